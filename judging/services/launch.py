"""Launching runs and the admin's actions on them: create, cancel, resume, retry, finalize, sweep.

Every function here changes runs in short transactions and enqueues worker tasks on commit;
none calls an LLM.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone
from django.utils.text import slugify

from annotation.models import (
    Conversation,
    DistortionLabel,
    Rater,
    Rating,
    Responder,
    Response,
    Study,
    Webhook,
)
from annotation.responders import paper_judge_defaults
from annotation.services.webhooks import webhook_emit

from .. import api_keys, prompts, providers
from ..models import ModelEndpoint, Run, RunItem
from .claims import stale_before

logger = logging.getLogger(__name__)

# ------------------------------------------------------------------------------ endpoints


class RunError(ValueError):
    """A run cannot be launched or changed as asked; the message says why."""


def endpoint_config(*, endpoint: ModelEndpoint) -> providers.EndpointConfig:
    """The provider-layer config of an endpoint; resolves the API key (never logged)."""
    if endpoint.provider == ModelEndpoint.Provider.VLLM_OFFLINE:
        raise RunError(f"{endpoint.name}: offline vLLM endpoints have no HTTP config")
    return providers.EndpointConfig(
        provider=endpoint.provider,
        model=endpoint.model,
        base_url=endpoint.base_url or None,
        # Decrypted, or read from an allowed variable, only here at call time (judging.api_keys).
        api_key=api_keys.endpoint_api_key(endpoint=endpoint),
        default_params=endpoint.default_params or {},
        timeout=endpoint.timeout_s,
        json_prefill=endpoint.json_prefill,
        supports_temperature=endpoint.supports_temperature,
        structured_output=endpoint.structured_output,
        name=endpoint.name,
    )


LOCAL_ENDPOINT_NAME = "local SmolLM2-135M (llama.cpp)"
LOCAL_STRUCTURED_ENDPOINT_NAME = "local SmolLM2-135M (llama.cpp, structured)"


@transaction.atomic
def local_endpoints_register(*, base_url: str, model: str) -> list[ModelEndpoint]:
    """The two endpoints of the local llama.cpp server (bin/local-model): prompt-only, as the
    papers' judges were asked, and with the schema as a grammar. Idempotent: a second call
    points the same rows at `base_url`.

    No key (llama.cpp accepts any), a price of 0 (it runs on this machine), a long timeout: the
    server answers one request at a time on a shared CPU, so queued requests wait their turn.
    """
    if not base_url.startswith(("http://", "https://")):
        raise RunError(f"base URL {base_url!r} must start with http:// or https://")
    registered = []
    for name, mode in (
        (LOCAL_ENDPOINT_NAME, providers.STRUCTURED_OFF),
        (LOCAL_STRUCTURED_ENDPOINT_NAME, "llama_cpp"),
    ):
        endpoint, _ = ModelEndpoint.objects.update_or_create(
            name=name,
            defaults={
                "provider": ModelEndpoint.Provider.OPENAI_COMPATIBLE,
                "model": model,
                "family": "smollm2",
                "base_url": base_url,
                # Prompt-only means no JSON mode either: llama.cpp would turn it into a grammar.
                "json_mode": False,
                "structured_output": mode,
                "timeout_s": 600.0,
                "responder_key": "smollm2_135m",
                # Free, said so: an unset price would read "price unknown".
                "price_input_per_mtok": 0.0,
                "price_output_per_mtok": 0.0,
                # On this machine: a study kept to local models may use it.
                "on_premises": True,
            },
        )
        registered.append(endpoint)
    return registered


def judge_rater_for_endpoint(*, endpoint: ModelEndpoint) -> Rater:
    """The judge Rater an endpoint's ratings are stored under (created on first use).

    Self-preference exclusion: the paper's exclusions for a known judge name, otherwise every
    responder of the endpoint's own family.
    """
    rater = Rater.objects.filter(name=endpoint.name).first()
    if rater is None:
        excluded = paper_judge_defaults(endpoint.name).get("excluded")
        if excluded is None:
            excluded = sorted(
                Responder.objects.filter(family=endpoint.family).values_list("key", flat=True)
            )
        rater = Rater.objects.create(
            kind=Rater.Kind.JUDGE,
            name=endpoint.name,
            model=endpoint.model,
            family=endpoint.family,
            excluded_responders=excluded,
        )
    if rater.kind != Rater.Kind.JUDGE:
        raise RunError(f"a clinician is already called {endpoint.name!r}; rename the endpoint")
    return rater


def responder_for_endpoint(*, endpoint: ModelEndpoint) -> Responder:
    """The Responder an endpoint's generated responses are stored under (created on first use)."""
    key = endpoint.responder_key or slugify(endpoint.name).replace("-", "_")[:100]
    responder, _ = Responder.objects.get_or_create(
        key=key, defaults={"name": endpoint.name, "family": endpoint.family}
    )
    return responder


# ------------------------------------------------------------------------------ launch


def judge_targets(
    *, study_id: int, rater: Rater, subset: str, sample_size: int | None, sample_seed: int
) -> list[int]:
    """Ids of the responses a judge run rates: non-empty, not of the judge's excluded responders."""
    responses = (
        # Practice conversations are clinicians' training material, not study data.
        Response.objects.filter(conversation__study_id=study_id, conversation__practice=False)
        .exclude(text="")
        .exclude(responder__key__in=rater.excluded_responders or [])
    )
    if subset == Run.Subset.UNRATED:
        rated = Rating.objects.filter(rater=rater, status=Rating.Status.COMPLETE)
        responses = responses.exclude(id__in=rated.values("response_id"))
    elif subset == Run.Subset.CLINICIAN_RATED:
        rated = Rating.objects.filter(
            rater__kind=Rater.Kind.CLINICIAN, status=Rating.Status.COMPLETE
        )
        responses = responses.filter(id__in=rated.values("response_id"))
    elif subset not in (Run.Subset.ALL, Run.Subset.SAMPLE):
        raise RunError(f"unknown subset {subset!r} for a judge run")
    ids = list(responses.order_by("id").values_list("id", flat=True))
    if subset == Run.Subset.SAMPLE:
        if not sample_size:
            raise RunError("a sample needs a sample size")
        # A recorded seed makes the sample reproducible.
        ids = sorted(random.Random(sample_seed).sample(ids, min(sample_size, len(ids))))
    return ids


@transaction.atomic
def judge_run_create(
    *,
    study_id: int,
    endpoint: ModelEndpoint,
    subset: str = Run.Subset.ALL,
    sample_size: int | None = None,
    sample_seed: int = 0,
    repeats: int = 1,
    temperature: float | None = None,
    max_tokens: int | None = None,
    concurrency: int = 32,
    rate_limit: float | None = None,
    parallel_tasks: int = 2,
    max_output_attempts: int = 3,
    created_by: Any = None,
    mode: str = Run.Mode.IMMEDIATE,
) -> Run:
    """Create a judge run with one item per (response, repeat) and start it on commit."""
    _refuse_offline(endpoint, model="the judge model")
    _check_numbers(repeats=repeats, concurrency=concurrency, parallel_tasks=parallel_tasks)
    rater = judge_rater_for_endpoint(endpoint=endpoint)
    targets = judge_targets(
        study_id=study_id,
        rater=rater,
        subset=subset,
        sample_size=sample_size,
        sample_seed=sample_seed,
    )
    subset_label = dict(Run.Subset.choices).get(subset, subset)
    return _run_launch(
        target="response_id",
        ids=targets,
        nothing=(
            f"nothing to judge: no response with text in this study is left for {rater.name} "
            f"in the subset “{subset_label}” (responses it must not rate are left out); "
            "nothing was launched"
        ),
        study_id=study_id,
        endpoint=endpoint,
        rater=rater,
        kind=Run.Kind.JUDGE,
        subset=subset,
        sample_size=sample_size,
        sample_seed=sample_seed,
        repeats=repeats,
        temperature=temperature,
        max_tokens=max_tokens,
        concurrency=concurrency,
        rate_limit=rate_limit,
        parallel_tasks=parallel_tasks,
        max_output_attempts=max_output_attempts,
        created_by=created_by,
        mode=mode,
    )


@transaction.atomic
def generation_run_create(
    *,
    study_id: int,
    endpoint: ModelEndpoint,
    temperature: float = prompts.GENERATION_TEMPERATURE,
    max_tokens: int = prompts.GENERATION_MAX_TOKENS,
    concurrency: int = 32,
    rate_limit: float | None = None,
    parallel_tasks: int = 2,
    created_by: Any = None,
    mode: str = Run.Mode.IMMEDIATE,
) -> Run:
    """Create a generation run: one item per conversation that has no response from this model."""
    _check_numbers(repeats=1, concurrency=concurrency, parallel_tasks=parallel_tasks)
    responder = responder_for_endpoint(endpoint=endpoint)
    answered = Response.objects.filter(responder=responder).values("conversation_id")
    missing = (
        # Practice conversations keep the responses their reference scores were written for: a
        # new, unreferenced answer would make the practice set unassignable.
        Conversation.objects.filter(study_id=study_id, practice=False)
        .exclude(id__in=answered)
        .order_by("id")
        .values_list("id", flat=True)
    )
    return _run_launch(
        target="conversation_id",
        ids=missing,
        nothing=(
            f"nothing to generate for {endpoint.name}: every conversation of this study (practice "
            f"conversations aside) already has a response from {responder.name}; nothing was "
            "launched"
        ),
        study_id=study_id,
        endpoint=endpoint,
        responder=responder,
        kind=Run.Kind.GENERATION,
        subset=Run.Subset.MISSING,
        temperature=temperature,
        max_tokens=max_tokens,
        concurrency=concurrency,
        rate_limit=rate_limit,
        parallel_tasks=parallel_tasks,
        created_by=created_by,
        mode=mode,
    )


def generation_runs_create(
    *, study_id: int, endpoints: Sequence[ModelEndpoint], **options: Any
) -> list[Run]:
    """One generation run per endpoint (a run belongs to one endpoint)."""
    with transaction.atomic():
        return [
            generation_run_create(study_id=study_id, endpoint=endpoint, **options)
            for endpoint in endpoints
        ]


#: §3.3: "five independent API calls per prompt type".
LABELLING_REPEATS = 5
LABELLING_MAX_TOKENS = 256
TEMPERATURE_ZERO_REFUSED = (
    "Temperature 0 is refused for repeated labelling runs: decoding then collapses to (nearly) "
    "one output, so the runs would agree trivially and their consistency would say nothing "
    "about whether a label is strongly indicated by the text (the paper, Appendix C, avoids "
    "a deterministic setting for this reason and uses 0.5 and 0.7). Choose a temperature "
    "above 0, or a single repeat."
)


@transaction.atomic
def labelling_run_create(
    *,
    study_id: int,
    endpoint: ModelEndpoint,
    repeats: int = LABELLING_REPEATS,
    temperature: float | None = 0.5,
    max_tokens: int | None = LABELLING_MAX_TOKENS,
    subset: str = Run.Subset.ALL,
    sample_size: int | None = None,
    sample_seed: int = 0,
    concurrency: int = 32,
    rate_limit: float | None = None,
    parallel_tasks: int = 2,
    max_output_attempts: int = 3,
    created_by: Any = None,
    mode: str = Run.Mode.IMMEDIATE,
) -> Run:
    """A distortion-labelling run: one item per (conversation, repeat), prompted with the
    Appendix D prompt of the study's scheme, stored as LabelAnnotations of the endpoint's rater.

    Refuses temperature 0 with more than one repeat (TEMPERATURE_ZERO_REFUSED).
    """
    study = Study.objects.get(pk=study_id)
    if study.kind != Study.Kind.DISTORTION_LABELLING:
        raise RunError("labelling runs need a cognitive-distortion labelling study")
    _refuse_offline(endpoint, model="the model")
    _check_numbers(repeats=repeats, concurrency=concurrency, parallel_tasks=parallel_tasks)
    if temperature is not None and temperature <= 0 and repeats > 1:
        raise RunError(TEMPERATURE_ZERO_REFUSED)
    if not DistortionLabel.objects.filter(study_id=study_id).exists():
        raise RunError("this study has no label set")
    ids = list(
        Conversation.objects.filter(study_id=study_id).order_by("id").values_list("id", flat=True)
    )
    if subset == Run.Subset.SAMPLE and sample_size is not None and sample_size < len(ids):
        ids = sorted(random.Random(sample_seed).sample(ids, sample_size))
    return _run_launch(
        target="conversation_id",
        ids=ids,
        nothing="nothing to label: this study has no conversations; nothing was launched",
        study_id=study_id,
        endpoint=endpoint,
        rater=judge_rater_for_endpoint(endpoint=endpoint),
        kind=Run.Kind.LABELLING,
        subset=subset,
        sample_size=sample_size,
        sample_seed=sample_seed,
        repeats=repeats,
        temperature=temperature,
        max_tokens=max_tokens,
        concurrency=concurrency,
        rate_limit=rate_limit,
        parallel_tasks=parallel_tasks,
        max_output_attempts=max_output_attempts,
        params={"scheme": study.label_scheme},
        created_by=created_by,
        mode=mode,
    )


def _refuse_offline(endpoint: ModelEndpoint, *, model: str) -> None:
    if endpoint.provider == ModelEndpoint.Provider.VLLM_OFFLINE:
        raise RunError(
            f"offline vLLM endpoints serve generation runs; serve {model} with `vllm serve` "
            "and add it as an OpenAI-compatible endpoint"
        )


def _run_launch(*, target: str, ids: Iterable[int], nothing: str, **fields: Any) -> Run:
    """Write the Run, one RunItem per (target id, repeat), and start it on commit.

    A run with nothing to do is refused with `nothing` (what there was none of, and why) rather
    than created "done 0/0". Precondition: inside the caller's transaction, so a refused launch
    writes nothing.
    """
    run = Run.objects.create(**fields)
    created = RunItem.objects.bulk_create(
        (
            RunItem(run=run, repeat=repeat, **{target: target_id})
            for target_id in ids
            for repeat in range(run.repeats)
        ),
        batch_size=5000,
    )
    if not created:
        raise RunError(nothing)
    _start(run)
    return run


def _check_numbers(*, repeats: int, concurrency: int, parallel_tasks: int) -> None:
    if not 1 <= repeats <= 100:
        raise RunError(f"repeats must be between 1 and 100, got {repeats}")
    if not 1 <= concurrency <= 1000:
        raise RunError(f"concurrency must be between 1 and 1000, got {concurrency}")
    if not 1 <= parallel_tasks <= 64:
        raise RunError(f"parallel tasks must be between 1 and 64, got {parallel_tasks}")


def text_policy_refusal(*, study: Study, endpoint: ModelEndpoint) -> str:
    """Why `study`'s texts may not go to `endpoint` under the study's policy, or "" when they
    may. Asked before a run starts, resumes or retries, and by the engine before it sends."""
    if study.text_policy == Study.TextPolicy.LOCAL_ONLY and not endpoint.keeps_texts_local:
        return (
            f"the study “{study.name}” is kept to local models (its texts stay on servers the "
            f"study team runs), and {endpoint.name} ({endpoint.get_provider_display()}) is not "
            "marked as on our own servers; nothing was sent. Use a local endpoint, or change "
            "the study's policy if its ethics approval allows."
        )
    return ""


def text_policy_check(*, run: Run) -> None:
    """Raise RunError when `run` would send its study's texts where the study's policy forbids."""
    refusal = text_policy_refusal(study=run.study, endpoint=run.endpoint)
    if refusal:
        raise RunError(refusal)


def _start(run: Run) -> None:
    """Mark `run` running (or done when it has nothing to do) and enqueue its tasks on commit.

    Refused (RunError) when the study's policy forbids sending its texts to the run's endpoint.
    Precondition: inside a transaction that holds (or just created) the run row.
    """
    text_policy_check(run=run)
    now = timezone.now()
    if not RunItem.objects.filter(
        run=run, status__in=[RunItem.Status.PENDING, RunItem.Status.RUNNING]
    ).exists():
        _settle(run, now)
        return
    run.status, run.error, run.finished_at = Run.Status.RUNNING, "", None
    run.started_at = run.started_at or now
    run.heartbeat_at = now  # loops are on their way: the sweeper leaves the run alone a lease
    run.save(update_fields=["status", "error", "started_at", "finished_at", "heartbeat_at"])
    if run.is_batch:
        # Batch mode has no worker loops: its requests go to the provider's batches.
        from . import batch

        batch.run_start(run=run)
        return
    _enqueue(run.id, run.parallel_tasks)


def _enqueue(run_id: int, count: int) -> None:
    from .. import tasks  # tasks import this module

    def send() -> None:
        for _ in range(count):
            tasks.run_work.delay(run_id)

    transaction.on_commit(send)


# ------------------------------------------------------------------------------ admin actions


@transaction.atomic
def run_cancel(*, run_id: int) -> Run:
    """Ask every worker to stop; they notice within WATCH_SECONDS and release their items."""
    run = Run.objects.select_for_update().get(id=run_id)
    if run.status in (Run.Status.PENDING, Run.Status.RUNNING):
        run.status = Run.Status.CANCELLING
        run.save(update_fields=["status"])
    if run.is_batch:
        # The provider cancels its batches; the answers already back are still stored.
        from judging import tasks

        transaction.on_commit(lambda: tasks.batch_cancel.delay(run_id))
        return run
    transaction.on_commit(lambda: run_finalize(run_id=run_id))
    return run


@transaction.atomic
def run_resume(*, run_id: int) -> Run:
    """Continue a cancelled, failed or interrupted run with its pending items."""
    run = Run.objects.select_for_update().get(id=run_id)
    if run.status == Run.Status.CANCELLING:
        raise RunError("the run is still cancelling; resume it once it is cancelled")
    _start(run)
    return run


@transaction.atomic
def run_retry_failures(*, run_id: int) -> int:
    """Put failed items back to pending and resume; returns how many were re-opened."""
    run = Run.objects.select_for_update().get(id=run_id)
    if run.status == Run.Status.CANCELLING:
        raise RunError("the run is still cancelling; retry once it is cancelled")
    reopened = RunItem.objects.filter(run=run, status=RunItem.Status.FAILED).update(
        status=RunItem.Status.PENDING, attempts=0, claim_token=""
    )
    if reopened or run.status != Run.Status.RUNNING:
        _start(run)
    return reopened


@transaction.atomic
def run_finalize(*, run_id: int) -> Run:
    """Settle the run's status once its items allow: running → done, cancelling → cancelled.

    Idempotent; every worker loop calls it when it stops.
    """
    run = Run.objects.select_for_update().get(id=run_id)
    now = timezone.now()
    items = RunItem.objects.filter(run=run)
    if run.status == Run.Status.CANCELLING:
        # Items of workers that died while cancelling are not coming back.
        items.filter(status=RunItem.Status.RUNNING, heartbeat_at__lt=stale_before()).update(
            status=RunItem.Status.PENDING, claim_token=""
        )
        if not items.filter(status=RunItem.Status.RUNNING).exists():
            run.status, run.finished_at = Run.Status.CANCELLED, now
            run.save(update_fields=["status", "finished_at"])
    elif run.status == Run.Status.RUNNING:
        open_statuses = [RunItem.Status.PENDING, RunItem.Status.RUNNING]
        if not items.filter(status__in=open_statuses).exists():
            _settle(run, now)
    return run


def _settle(run: Run, now) -> None:
    """A run with nothing left open ends *done*, or *failed* when it has items and not one of
    them succeeded: a run whose every item failed is no done run. Some failures leave it done;
    its page counts them and lists their reasons.

    Precondition: the run row is locked (or was just created) in the caller's transaction.
    """
    counts = RunItem.objects.filter(run=run).aggregate(
        done=Count("id", filter=Q(status=RunItem.Status.DONE)),
        failed=Count("id", filter=Q(status=RunItem.Status.FAILED)),
    )
    if counts["failed"] and not counts["done"]:
        first = (
            RunItem.objects.filter(run=run, status=RunItem.Status.FAILED)
            .order_by("id")
            .values_list("last_error", flat=True)
            .first()
        )
        run.status = Run.Status.FAILED
        run.error = (
            f"every item failed ({counts['failed']} of {counts['failed']}); the first: {first}"
        )[:2000]
    else:
        run.status, run.error = Run.Status.DONE, ""
    run.finished_at = now
    run.save(update_fields=["status", "error", "finished_at"])
    _ended_emit(run, done=counts["done"], failed=counts["failed"])


def _ended_emit(run: Run, *, done: int | None = None, failed: int | None = None) -> None:
    """The webhooks' run.finished or run.failed, in the transaction that ended the run. Ids,
    kind and counts only: never the responder (a generation run's blinded system)."""
    event = (
        Webhook.Event.RUN_FINISHED if run.status == Run.Status.DONE else Webhook.Event.RUN_FAILED
    )
    data = {
        "run": run.pk,
        "study": run.study_id,
        "kind": run.kind,
        "status": run.status,
        "items_done": done,
        "items_failed": failed,
        "error": run.error if run.status == Run.Status.FAILED else "",
    }
    webhook_emit(event=event, study_id=run.study_id, data=data)


@transaction.atomic
def run_fail(*, run_id: int, error: str) -> None:
    """Stop a run for a reason that concerns the whole run (bad key, unknown model)."""
    run = Run.objects.select_for_update().get(id=run_id)
    if run.status in (Run.Status.RUNNING, Run.Status.CANCELLING, Run.Status.PENDING):
        run.status, run.error, run.finished_at = Run.Status.FAILED, error[:2000], timezone.now()
        run.save(update_fields=["status", "error", "finished_at"])
        _ended_emit(run)


# ------------------------------------------------------------------------------ the sweeper


def runs_sweep() -> dict[str, list[int]]:
    """Move on every run whose workers are gone; returns run ids by what was done to them.

    Runs periodically (Celery beat → `tasks.runs_sweep`, on the upkeep queue; `manage.py
    sweep_runs` from a shell)
    and when a worker starts, so no run ever needs a person to finish it:
    - cancelling: items of dead workers go back to pending once their lease ran out, then the
      run is cancelled (`run_finalize`);
    - running with nothing open (the last loop died before it finalized): done;
    - running with open items and no loop heard from for a lease: fresh loops are sent. Their
      claims take over the stale items; the run's concurrency bounds them however many arrive.
    Idempotent, and safe to run in several places at once (each run is handled under its lock).
    """
    swept: dict[str, list[int]] = {"finalized": [], "restarted": []}
    active = Run.objects.filter(status__in=[Run.Status.RUNNING, Run.Status.CANCELLING])
    for run_id in active.order_by("id").values_list("id", flat=True):
        action = run_sweep(run_id=run_id)
        if action:
            swept[action].append(run_id)
    if any(swept.values()):
        logger.info("run sweeper: %s", swept)
    return swept


@transaction.atomic
def run_sweep(*, run_id: int) -> str:
    """One run of `runs_sweep`: "finalized", "restarted" or "" (nothing to do)."""
    run = Run.objects.select_for_update(skip_locked=True).filter(id=run_id).first()
    if run is None or not run.is_active:
        return ""  # another sweeper (or a loop finalizing) holds it right now
    if run.is_batch:
        return ""  # no worker loops: batch.batches_poll moves batch-mode runs on
    before = run.status
    run = run_finalize(run_id=run_id)
    if run.status != before:
        return "finalized"
    if run.status != Run.Status.RUNNING:
        return ""  # still cancelling: live workers are letting go of their items
    if run.heartbeat_at is not None and run.heartbeat_at >= stale_before():
        return ""  # a loop is alive (or was sent less than a lease ago)
    run.heartbeat_at = timezone.now()  # one restart per lease, however often the sweeper runs
    run.save(update_fields=["heartbeat_at"])
    _enqueue(run.id, run.parallel_tasks)
    return "restarted"
