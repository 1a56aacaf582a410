"""Writes for LLM runs: launch, claim, call, store, cancel, retry, resume (STYLE.md items 4, 5).

How a run executes
- `judge_run_create` / `generation_run_create` write the Run and one RunItem per target and
  repeat, then enqueue `parallel_tasks` worker tasks on commit.
- Each task calls `run_work`: a loop that claims items with a status-guarded, SKIP LOCKED update
  (pending → running, stamped with this loop's claim token), keeps LLM requests in flight with
  asyncio — `run.concurrency` for all loops of the run together, however many there are — and
  stores the results that finished together in one short transaction. No LLM call ever runs
  inside a transaction. Whatever goes wrong with one item fails that item, never the loop.
- Exactly once: storing results is one transaction that locks the items, flips running → done
  *only for those this loop still holds a claim on*, then inserts their Ratings/Responses. A
  worker killed mid-run leaves its items "running" with a heartbeat that stops moving; after the
  lease they are claimed again by whoever is still working, or by the loops the sweeper
  (`runs_sweep`) sends once no loop of the run has been heard of for a lease. A slow-but-alive
  worker that lost its claim stores nothing. The unique constraints on Rating and Response are
  the last line of defence.
- Billing: every completion received is counted on its item (`billed_*`) within half a second,
  whether or not its result is ever stored.
- Cancel: the run goes to "cancelling"; every loop sees it within a second, stops sending,
  abandons in-flight requests and puts its items back to pending; the run then becomes
  "cancelled" (the sweeper does it when a dead worker's items were holding it up). Resume and
  "retry failures" re-open items and enqueue tasks again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.text import slugify

from annotation.models import (
    Attribute,
    Conversation,
    DistortionLabel,
    LabelAnnotation,
    Rater,
    Rating,
    Responder,
    Response,
    Score,
    Study,
)
from annotation.responders import paper_judge_defaults

from . import api_keys, prompts, providers, structured
from .label_parsing import LabelParse, parse_label_output
from .models import ModelEndpoint, Run, RunItem
from .parsing import JudgeParse, parse_judge_output, strip_think
from .ratelimit import LocalRateLimiter, RedisRateLimiter

logger = logging.getLogger(__name__)

# A running item whose heartbeat is older than this belonged to a worker that died.
LEASE_SECONDS = float(os.environ.get("JUDGING_LEASE_SECONDS", "60"))
# A worker that dies this many times on the same item (an item that crashes workers) gives up.
MAX_CLAIMS = 5
# HTTP attempts per LLM request (429/5xx/timeouts), all inside providers.complete_with_retries;
# Celery itself never retries these tasks, so retries are not multiplied.
MAX_HTTP_ATTEMPTS = 5
WATCH_SECONDS = 1.0  # how often a loop looks for a cancel (cancel takes effect within seconds)
RETRY_BASE_DELAY = 0.5  # seconds before the first retry; doubles each time (tests shorten it)
UNLIMITED_RATE = 100_000.0  # requests/s when the run sets no rate limit
# 401/403/404 mean the endpoint itself is wrong (key, model name): stop the run, fail nothing.
ENDPOINT_BROKEN_STATUSES = frozenset({401, 403, 404})
JUDGE_MAX_TOKENS = 1024


class RunError(ValueError):
    """A run cannot be launched or changed as asked; the message says why."""


# ------------------------------------------------------------------------------ endpoints


def endpoint_config(endpoint: ModelEndpoint) -> providers.EndpointConfig:
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


def study_rubric(*, study_id: int) -> list[dict[str, Any]]:
    """The study's rubric as the plain data judging.prompts renders."""
    from annotation.models import Study

    rubric_id = Study.objects.values_list("rubric_id", flat=True).get(id=study_id)
    attributes = (
        Attribute.objects.filter(rubric_id=rubric_id)
        .prefetch_related("levels")
        .order_by("position")
    )
    return [
        {
            "id": attribute.id,
            "name": attribute.name,
            "group": attribute.group,
            "description": attribute.description,
            "anchors": {level.value: level.anchor for level in attribute.levels.all()},
        }
        for attribute in attributes
    ]


LOCAL_ENDPOINT_NAME = "local SmolLM2-135M (llama.cpp)"
LOCAL_STRUCTURED_ENDPOINT_NAME = "local SmolLM2-135M (llama.cpp, structured)"


@transaction.atomic
def local_endpoints_register(*, base_url: str, model: str) -> list[ModelEndpoint]:
    """The two endpoints of the local llama.cpp server (bin/local-model): prompt-only, as the
    papers' judges were asked, and with the schema as a grammar. Idempotent: a second call
    points the same rows at `base_url`.

    No key (llama.cpp accepts any), no price, a long timeout: the server answers one request at
    a time on a shared CPU, so queued requests wait their turn.
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
        Response.objects.filter(conversation__study_id=study_id)
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
    if endpoint.provider == ModelEndpoint.Provider.VLLM_OFFLINE:
        raise RunError(
            "offline vLLM endpoints serve generation runs; serve the judge model with "
            "`vllm serve` and add it as an OpenAI-compatible endpoint"
        )
    _check_numbers(repeats=repeats, concurrency=concurrency, parallel_tasks=parallel_tasks)
    rater = judge_rater_for_endpoint(endpoint=endpoint)
    run = Run.objects.create(
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
    targets = judge_targets(
        study_id=study_id,
        rater=rater,
        subset=subset,
        sample_size=sample_size,
        sample_seed=sample_seed,
    )
    RunItem.objects.bulk_create(
        (
            RunItem(run=run, response_id=response_id, repeat=repeat)
            for response_id in targets
            for repeat in range(repeats)
        ),
        batch_size=5000,
    )
    _start(run)
    return run


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
    run = Run.objects.create(
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
    answered = Response.objects.filter(responder=responder).values("conversation_id")
    missing = (
        Conversation.objects.filter(study_id=study_id)
        .exclude(id__in=answered)
        .order_by("id")
        .values_list("id", flat=True)
    )
    RunItem.objects.bulk_create(
        (RunItem(run=run, conversation_id=conversation_id) for conversation_id in missing),
        batch_size=5000,
    )
    _start(run)
    return run


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


def study_distortion_labels(*, study_id: int) -> list[dict[str, str]]:
    """The study's label set in the shape prompts and the parser take."""
    return [
        {
            "name": name,
            "prompt_label": prompt_label or name,
            "description": definition,
            "example": example,
        }
        for name, prompt_label, definition, example in DistortionLabel.objects.filter(
            study_id=study_id
        )
        .order_by("position")
        .values_list("name", "prompt_label", "definition", "example")
    ]


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
    if endpoint.provider == ModelEndpoint.Provider.VLLM_OFFLINE:
        raise RunError(
            "offline vLLM endpoints serve generation runs; serve the model with `vllm serve` "
            "and add it as an OpenAI-compatible endpoint"
        )
    _check_numbers(repeats=repeats, concurrency=concurrency, parallel_tasks=parallel_tasks)
    if temperature is not None and temperature <= 0 and repeats > 1:
        raise RunError(TEMPERATURE_ZERO_REFUSED)
    if not DistortionLabel.objects.filter(study_id=study_id).exists():
        raise RunError("this study has no label set")
    run = Run.objects.create(
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
    ids = list(
        Conversation.objects.filter(study_id=study_id).order_by("id").values_list("id", flat=True)
    )
    if subset == Run.Subset.SAMPLE and sample_size is not None and sample_size < len(ids):
        ids = sorted(random.Random(sample_seed).sample(ids, sample_size))
    RunItem.objects.bulk_create(
        (
            RunItem(run=run, conversation_id=conversation_id, repeat=repeat)
            for conversation_id in ids
            for repeat in range(repeats)
        ),
        batch_size=5000,
    )
    _start(run)
    return run


def _check_numbers(*, repeats: int, concurrency: int, parallel_tasks: int) -> None:
    if not 1 <= repeats <= 100:
        raise RunError(f"repeats must be between 1 and 100, got {repeats}")
    if not 1 <= concurrency <= 1000:
        raise RunError(f"concurrency must be between 1 and 1000, got {concurrency}")
    if not 1 <= parallel_tasks <= 64:
        raise RunError(f"parallel tasks must be between 1 and 64, got {parallel_tasks}")


def _start(run: Run) -> None:
    """Mark `run` running (or done when it has nothing to do) and enqueue its tasks on commit.

    Precondition: inside a transaction that holds (or just created) the run row.
    """
    now = timezone.now()
    if not RunItem.objects.filter(
        run=run, status__in=[RunItem.Status.PENDING, RunItem.Status.RUNNING]
    ).exists():
        run.status, run.finished_at = Run.Status.DONE, now
        run.save(update_fields=["status", "finished_at"])
        return
    run.status, run.error, run.finished_at = Run.Status.RUNNING, "", None
    run.started_at = run.started_at or now
    run.heartbeat_at = now  # loops are on their way: the sweeper leaves the run alone a lease
    run.save(update_fields=["status", "error", "started_at", "finished_at", "heartbeat_at"])
    if run.is_batch:
        from . import batch  # batch mode: no loops; its requests go to the provider's batches

        batch.run_start(run)
        return
    _enqueue(run.id, run.parallel_tasks)


def _enqueue(run_id: int, count: int) -> None:
    from . import tasks  # tasks import this module

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
        from . import tasks  # the provider cancels its batches; their answers are still stored

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
        items.filter(status=RunItem.Status.RUNNING, heartbeat_at__lt=_stale_before()).update(
            status=RunItem.Status.PENDING, claim_token=""
        )
        if not items.filter(status=RunItem.Status.RUNNING).exists():
            run.status, run.finished_at = Run.Status.CANCELLED, now
            run.save(update_fields=["status", "finished_at"])
    elif run.status == Run.Status.RUNNING:
        open_statuses = [RunItem.Status.PENDING, RunItem.Status.RUNNING]
        if not items.filter(status__in=open_statuses).exists():
            run.status, run.finished_at = Run.Status.DONE, now
            run.save(update_fields=["status", "finished_at"])
    return run


@transaction.atomic
def run_fail(*, run_id: int, error: str) -> None:
    """Stop a run for a reason that concerns the whole run (bad key, unknown model)."""
    run = Run.objects.select_for_update().get(id=run_id)
    if run.status in (Run.Status.RUNNING, Run.Status.CANCELLING, Run.Status.PENDING):
        run.status, run.error, run.finished_at = Run.Status.FAILED, error[:2000], timezone.now()
        run.save(update_fields=["status", "error", "finished_at"])


# ------------------------------------------------------------------------------ the sweeper


def runs_sweep() -> dict[str, list[int]]:
    """Move on every run whose workers are gone; returns run ids by what was done to them.

    Runs periodically (Celery beat → `tasks.runs_sweep`; `manage.py sweep_runs` without Redis)
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
    if run.heartbeat_at is not None and run.heartbeat_at >= _stale_before():
        return ""  # a loop is alive (or was sent less than a lease ago)
    run.heartbeat_at = timezone.now()  # one restart per lease, however often the sweeper runs
    run.save(update_fields=["heartbeat_at"])
    _enqueue(run.id, run.parallel_tasks)
    return "restarted"


# ------------------------------------------------------------------------------ claiming


def _stale_before() -> Any:
    return timezone.now() - timedelta(seconds=LEASE_SECONDS)


def items_claim(
    *, run_id: int, token: str, limit: int, within_concurrency: bool = True
) -> list[RunItem]:
    """Claim up to `limit` pending items (or running ones whose worker died) for `token`.

    Only a running run hands out work, and never more than `run.concurrency` live claims in
    all: every loop on the run (parallel tasks, a task the broker redelivered, a worker's
    restart) shares that budget, so the endpoint never sees more requests in flight than the run
    allows. The run row is locked for the count, which serialises claimers (a claim is a few
    short statements); SKIP LOCKED then takes disjoint items. `within_concurrency=False` is for
    offline vLLM, which sends no requests and batches everything it claims.
    """
    stale = _stale_before()
    with transaction.atomic():
        concurrency = (
            Run.objects.select_for_update()
            .filter(id=run_id, status=Run.Status.RUNNING)
            .values_list("concurrency", flat=True)
            .first()
        )
        if concurrency is None:
            return []
        if within_concurrency:
            live = RunItem.objects.filter(
                run_id=run_id, status=RunItem.Status.RUNNING, heartbeat_at__gte=stale
            ).count()
            limit = min(limit, max(1, concurrency) - live)
        if limit <= 0:
            return []
        RunItem.objects.filter(
            run_id=run_id,
            status=RunItem.Status.RUNNING,
            heartbeat_at__lt=stale,
            attempts__gte=MAX_CLAIMS,
        ).update(
            status=RunItem.Status.FAILED,
            last_error=f"its worker was lost {MAX_CLAIMS} times while processing it",
            finished_at=timezone.now(),
        )
        ids = list(
            # of=("self",): lock the items only. Locking the joined run row as well would make
            # concurrent claimers skip *every* item (they all join that one row).
            RunItem.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(run_id=run_id, run__status=Run.Status.RUNNING)
            .filter(
                Q(status=RunItem.Status.PENDING)
                | Q(status=RunItem.Status.RUNNING, heartbeat_at__lt=stale)
            )
            .order_by("id")
            .values_list("id", flat=True)[:limit]
        )
        if not ids:
            return []
        now = timezone.now()
        RunItem.objects.filter(id__in=ids).update(
            status=RunItem.Status.RUNNING,
            claim_token=token,
            claimed_at=now,
            heartbeat_at=now,
            attempts=F("attempts") + 1,
        )
    return list(
        RunItem.objects.filter(id__in=ids, claim_token=token)
        .select_related("response__conversation", "conversation")
        .order_by("id")
    )


def items_heartbeat(*, token: str, run_id: int | None = None) -> None:
    """Keep this loop's claims (and, given `run_id`, the run's sign of life) fresh."""
    now = timezone.now()
    RunItem.objects.filter(claim_token=token, status=RunItem.Status.RUNNING).update(
        heartbeat_at=now
    )
    if run_id is not None:
        Run.objects.filter(id=run_id).update(heartbeat_at=now)


def items_bill(*, received: Sequence[tuple[int, int, int]], plan: _Plan) -> None:
    """Count completions received (item id, input tokens, output tokens) on their items.

    Whether or not the result is ever stored: a loop that lost its claim, a cancelled item, a
    re-ask — the provider billed them all. Called by the loop within half a second of receiving
    (and when it stops), so only what arrived in that last moment before a SIGKILL goes uncounted.
    """
    if not received:
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {RunItem._meta.db_table} SET billed_completions = billed_completions + 1, "
            "billed_input_tokens = billed_input_tokens + %s, "
            "billed_output_tokens = billed_output_tokens + %s, "
            "billed_cost_usd = billed_cost_usd + %s WHERE id = %s",
            [
                (
                    input_tokens,
                    output_tokens,
                    (input_tokens * plan.price_input + output_tokens * plan.price_output)
                    / 1_000_000,
                    item_id,
                )
                for item_id, input_tokens, output_tokens in received
            ],
        )


def items_release(*, token: str, item_ids: Sequence[int] | None = None, error: str = "") -> int:
    """Give claimed items back (pending) so another loop or a resume picks them up."""
    items = RunItem.objects.filter(claim_token=token, status=RunItem.Status.RUNNING)
    if item_ids is not None:
        items = items.filter(id__in=item_ids)
    changes: dict[str, Any] = {"status": RunItem.Status.PENDING, "claim_token": ""}
    if error:
        changes["last_error"] = error
    return items.update(**changes)


def _run_status(run_id: int) -> str:
    return Run.objects.values_list("status", flat=True).get(id=run_id)


def _open_items_exist(run_id: int) -> bool:
    return RunItem.objects.filter(
        run_id=run_id, status__in=[RunItem.Status.PENDING, RunItem.Status.RUNNING]
    ).exists()


# ------------------------------------------------------------------------------ outcomes


@dataclass
class Outcome:
    """What the LLM calls for one item produced, before it is stored."""

    raw_output: str | None = None  # None when no answer arrived at all
    error: str = ""
    parse: JudgeParse | None = None
    label_parse: LabelParse | None = None
    answer: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    truncated: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    latency_s: float | None = None
    release: bool = False  # rate limited: give the item back rather than fail it
    endpoint_broken: bool = False
    problems: list[str] = field(default_factory=list)  # why earlier answers were unusable
    # (item id, input, output tokens) of each completion received, shared by the loop's items
    # and emptied into the database by the loop (items_bill) as they arrive.
    item_id: int | None = None
    ledger: list[tuple[int, int, int]] | None = None

    def add(self, completion: providers.Completion) -> None:
        self.input_tokens += completion.input_tokens or 0
        self.output_tokens += completion.output_tokens or 0
        self.requests += completion.attempts
        self.latency_s = (self.latency_s or 0.0) + completion.latency_s
        if self.ledger is not None and self.item_id is not None:
            self.ledger.append(
                (self.item_id, completion.input_tokens or 0, completion.output_tokens or 0)
            )

    @property
    def ok(self) -> bool:
        return not self.error


def _items_finish(results: Sequence[Result], *, token: str, plan: _Plan) -> list[Result]:
    """Flip claimed items to done/failed; returns the results whose claim this loop still held.

    Precondition: inside a transaction. The rows are locked first, so no other loop can take
    them over between the check and the write.
    """
    owned = set(
        RunItem.objects.select_for_update()
        .filter(
            id__in=[item.id for item, _ in results],
            status=RunItem.Status.RUNNING,
            claim_token=token,
        )
        .values_list("id", flat=True)
    )
    kept = [(item, outcome) for item, outcome in results if item.id in owned]
    # One statement per item, sent in one round trip (psycopg pipelines executemany): a batch
    # costs the same few round trips whatever its size. Django's bulk_update would build a
    # CASE per column and item, which costs more CPU than the LLM call it records.
    if not kept:
        return kept
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {RunItem._meta.db_table} SET status = %s, last_error = %s, "
            "input_tokens = input_tokens + %s, output_tokens = output_tokens + %s, "
            "cost_usd = cost_usd + %s, requests = requests + %s, latency_s = %s, "
            "finished_at = %s, claim_token = '' WHERE id = %s AND claim_token = %s",
            [
                (
                    (RunItem.Status.DONE if outcome.ok else RunItem.Status.FAILED).value,
                    outcome.error[:4000],
                    outcome.input_tokens,
                    outcome.output_tokens,
                    (
                        outcome.input_tokens * plan.price_input
                        + outcome.output_tokens * plan.price_output
                    )
                    / 1_000_000,
                    outcome.requests,
                    outcome.latency_s,
                    now,
                    item.id,
                    token,
                )
                for item, outcome in kept
            ],
        )
    return kept


Result = tuple[RunItem, "Outcome"]


@transaction.atomic
def judge_items_store(*, results: Sequence[Result], token: str, plan: _Plan) -> int:
    """Store judge results exactly once, in one transaction: item states, Ratings, Scores.

    An item whose claim this loop no longer holds (another loop took it over, or the same
    result arrives twice) stores nothing. Returns how many results were stored. One transaction
    per batch rather than per item: a batch is what finished during one wait of the loop, and
    its rows are written with one INSERT per table.
    """
    return _store_once(
        results, token=token, plan=plan, model=Rating, key=_rating_key, insert=_ratings_insert
    )


@transaction.atomic
def labelling_items_store(*, results: Sequence[Result], token: str, plan: _Plan) -> int:
    """Store labelling results exactly once: item states and LabelAnnotations (as judges)."""
    return _store_once(
        results,
        token=token,
        plan=plan,
        model=LabelAnnotation,
        key=_annotation_key,
        insert=_annotations_insert,
    )


def _store_once(
    results: Sequence[Result], *, token: str, plan: _Plan, model: Any, key: Any, insert: Any
) -> int:
    """The exactly-once store shared by judge and labelling runs (precondition: in atomic)."""
    owned = _items_finish(results, token=token, plan=plan)
    # No answer at all (transport failure): the item holds the reason, there is nothing to keep.
    answered = [(item, outcome) for item, outcome in owned if outcome.raw_output is not None]
    for item, _ in answered:
        if item.last_error:
            # A retried item replaces the invalid row its earlier attempt stored.
            model.objects.filter(status=Rating.Status.INVALID, **key(item, plan)).delete()
    try:
        with transaction.atomic():
            insert(answered, plan)
    except IntegrityError:
        # The unique constraint caught a row stored before: settle item by item.
        for item, outcome in answered:
            try:
                with transaction.atomic():
                    insert([(item, outcome)], plan)
            except IntegrityError:
                if not model.objects.filter(**key(item, plan)).exists():
                    raise  # not a duplicate: a real constraint violation
                logger.info("result for run item %s was already stored", item.id)
    return len(owned)


def judge_item_store(*, item: RunItem, token: str, outcome: Outcome, plan: _Plan) -> bool:
    """One result; see judge_items_store."""
    return judge_items_store(results=[(item, outcome)], token=token, plan=plan) == 1


def _rating_key(item: RunItem, plan: _Plan) -> dict[str, Any]:
    return {
        "rater_id": plan.rater_id,
        "response_id": item.response_id,
        "run_id": plan.run_id,
        "repeat": item.repeat,
    }


def _ratings_insert(answered: Sequence[Result], plan: _Plan) -> None:
    """A Rating per result (complete with Scores when valid, else invalid with the reason)."""
    ratings: list[Rating] = []
    for item, outcome in answered:
        parse = outcome.parse if outcome.ok else None
        ratings.append(
            Rating(
                status=Rating.Status.COMPLETE if parse else Rating.Status.INVALID,
                source=Rating.Source.JUDGE,
                rationale=parse.explanation if parse else "",
                overall=parse.overall if parse else None,
                raw_output=outcome.raw_output or "",
                error="" if parse else outcome.error,
                **_rating_key(item, plan),
            )
        )
    Rating.objects.bulk_create(ratings)  # PostgreSQL and SQLite return the new ids
    Score.objects.bulk_create(
        Score(rating=rating, attribute_id=plan.attribute_ids[name], value=value)
        for rating, (_, outcome) in zip(ratings, answered, strict=True)
        if rating.status == Rating.Status.COMPLETE
        for name, value in outcome.parse.scores.items()
    )


def _annotation_key(item: RunItem, plan: _Plan) -> dict[str, Any]:
    return {
        "rater_id": plan.rater_id,
        "conversation_id": item.conversation_id,
        "run_id": plan.run_id,
        "repeat": item.repeat,
    }


def _annotations_insert(answered: Sequence[Result], plan: _Plan) -> None:
    """A LabelAnnotation per result: complete with its labels, or invalid with raw text and why."""
    LabelAnnotation.objects.bulk_create(
        LabelAnnotation(
            status=Rating.Status.COMPLETE if parse else Rating.Status.INVALID,
            source=Rating.Source.JUDGE,
            labels=parse.labels if parse else [],
            others=parse.others if parse else [],
            raw_output=outcome.raw_output or "",
            error="" if parse else outcome.error,
            **_annotation_key(item, plan),
        )
        for item, outcome in answered
        for parse in [outcome.label_parse if outcome.ok else None]
    )


@transaction.atomic
def generation_items_store(*, results: Sequence[Result], token: str, plan: _Plan) -> int:
    """Store generated responses exactly once, with their generation metadata."""
    owned = _items_finish(results, token=token, plan=plan)
    for item, outcome in owned:
        if not outcome.ok:
            continue
        try:
            with transaction.atomic():
                Response.objects.create(
                    conversation_id=item.conversation_id,
                    responder_id=plan.responder_id,
                    text=outcome.answer,
                    truncated=outcome.truncated,
                    metadata=outcome.metadata,
                )
        except IntegrityError:
            if not Response.objects.filter(
                conversation_id=item.conversation_id, responder_id=plan.responder_id
            ).exists():
                raise
            logger.info("response for run item %s was already stored", item.id)
    return len(owned)


# ------------------------------------------------------------------------------ the work loop


@dataclass
class _Plan:
    """Everything a work loop needs, read from the database once before going async."""

    run_id: int
    kind: str
    endpoint_id: int
    config: providers.EndpointConfig | None
    json_mode: bool
    temperature: float | None
    max_tokens: int | None
    max_output_attempts: int
    concurrency: int
    rate_limit: float | None
    price_input: float
    price_output: float
    rater_id: int | None = None
    rubric: list[dict[str, Any]] = field(default_factory=list)
    attribute_ids: dict[str, int] = field(default_factory=dict)
    scale: tuple[int, int] = (1, 5)
    responder_id: int | None = None
    labels: list[dict[str, str]] = field(default_factory=list)
    scheme: str = "ranked"
    # The answer's JSON schema, sent only where the endpoint has structured outputs on.
    output_schema: providers.OutputSchema | None = None

    @classmethod
    def load(cls, run: Run) -> _Plan:
        endpoint = run.endpoint
        offline = endpoint.provider == ModelEndpoint.Provider.VLLM_OFFLINE
        plan = cls(
            run_id=run.id,
            kind=run.kind,
            endpoint_id=endpoint.id,
            config=None if offline else endpoint_config(endpoint),
            json_mode=endpoint.json_mode,
            temperature=run.temperature,
            max_tokens=run.max_tokens,
            max_output_attempts=max(1, run.max_output_attempts),
            concurrency=max(1, run.concurrency),
            rate_limit=run.rate_limit,
            price_input=endpoint.price_input_per_mtok,
            price_output=endpoint.price_output_per_mtok,
            rater_id=run.rater_id,
            responder_id=run.responder_id,
        )
        if run.kind == Run.Kind.JUDGE:
            plan.rubric = study_rubric(study_id=run.study_id)
            plan.attribute_ids = {a["name"]: a["id"] for a in plan.rubric}
            plan.scale = prompts.rubric_scale(plan.rubric)
            if endpoint.structured_output != providers.STRUCTURED_OFF:
                plan.output_schema = providers.OutputSchema(
                    name=structured.JUDGE_SCHEMA_NAME,
                    schema=structured.judge_output_schema(plan.rubric),
                )
        elif run.kind == Run.Kind.LABELLING:
            plan.labels = study_distortion_labels(study_id=run.study_id)
            plan.scheme = (run.params or {}).get("scheme") or run.study.label_scheme
            if endpoint.structured_output != providers.STRUCTURED_OFF:
                plan.output_schema = providers.OutputSchema(
                    name=structured.LABELS_SCHEMA_NAME,
                    schema=structured.labels_output_schema(plan.labels, scheme=plan.scheme),
                )
        return plan

    def store(self, results: Sequence[Result], token: str) -> int:
        if self.kind == Run.Kind.JUDGE:
            return judge_items_store(results=results, token=token, plan=self)
        if self.kind == Run.Kind.LABELLING:
            return labelling_items_store(results=results, token=token, plan=self)
        return generation_items_store(results=results, token=token, plan=self)


def labelling_messages(
    context: str, *, labels: list[dict[str, str]], scheme: str
) -> tuple[str, str]:
    """The Appendix D prompt of the scheme: Ranked-Label (RLP) or Multi-Label (MLP)."""
    if scheme == "multi":
        return prompts.distortion_multilabel_messages(context, labels)
    return prompts.distortion_ranked_messages(context, labels)


def item_messages(
    *, item: RunItem, rubric: list[dict[str, Any]] | None, plan: _Plan | None = None
) -> tuple[str, str]:
    """(system, user) exactly as sent for this item."""
    if item.response_id:
        response = item.response
        return prompts.judge_messages(response.conversation.context, response.text, rubric)
    if plan is not None and plan.kind == Run.Kind.LABELLING:
        return labelling_messages(item.conversation.context, labels=plan.labels, scheme=plan.scheme)
    return prompts.generation_messages(item.conversation.context)


def run_work(*, run_id: int) -> None:
    """Process a run's items until none is left or the run stops. Safe to call many times at once.

    Called by the Celery task; several calls share the run through claims.
    """
    run = Run.objects.select_related("endpoint").get(id=run_id)
    if run.is_batch:
        return  # a stale message: batch-mode runs are worked by judging.batch
    if run.status != Run.Status.RUNNING:
        run_finalize(run_id=run_id)
        return
    try:
        plan = _Plan.load(run)
    except (providers.PermanentError, RunError, ValueError) as exc:
        run_fail(run_id=run_id, error=str(exc))
        return
    if run.endpoint.provider == ModelEndpoint.Provider.VLLM_OFFLINE:
        _work_offline(plan, model=run.endpoint.model, options=run.endpoint.default_params or {})
    else:
        async_to_sync(_work_async)(plan)
    run_finalize(run_id=run_id)


def _limiter(plan: _Plan) -> LocalRateLimiter | RedisRateLimiter:
    rate = plan.rate_limit or UNLIMITED_RATE
    # A set limit spaces requests evenly (no bursts); without one only 429 pauses matter.
    burst = 1 if plan.rate_limit else max(1, plan.concurrency)
    # JUDGING_RATELIMIT_REDIS_URL lets tests keep their limiter keys in a Redis db of their own.
    redis_url = os.environ.get("JUDGING_RATELIMIT_REDIS_URL") or getattr(settings, "REDIS_URL", "")
    if redis_url:
        # One budget and one 429 pause per endpoint, shared by every worker process.
        return RedisRateLimiter(
            redis=redis_url, key=f"endpoint-{plan.endpoint_id}", rate=rate, burst=burst
        )
    return LocalRateLimiter(rate=rate, burst=burst)


async def _work_async(plan: _Plan) -> None:
    """The asyncio loop: keep `concurrency` requests in flight, store results as they arrive."""
    assert plan.config is not None
    token = uuid.uuid4().hex
    claim = sync_to_async(items_claim)
    store = sync_to_async(plan.store)
    try:
        client = providers.make_client(plan.config)
    except providers.PermanentError as exc:
        await sync_to_async(run_fail)(run_id=plan.run_id, error=str(exc))
        return
    limiter = _limiter(plan)
    stop = asyncio.Event()
    ledger: list[tuple[int, int, int]] = []
    bill = sync_to_async(items_bill)

    async def bill_received() -> None:
        if ledger:
            received = ledger[:]
            ledger.clear()  # no await in between: nothing is counted twice or dropped
            await bill(received=received, plan=plan)

    await sync_to_async(items_heartbeat)(token=token, run_id=plan.run_id)
    watcher = asyncio.create_task(_watch(plan.run_id, token, stop))
    in_flight: dict[asyncio.Task[Outcome], RunItem] = {}
    refill_at = max(1, plan.concurrency // 4)
    last_empty_claim = 0.0
    try:
        while not stop.is_set():
            room = plan.concurrency - len(in_flight)
            if room >= refill_at and time.monotonic() - last_empty_claim > 0.5:
                items = await claim(run_id=plan.run_id, token=token, limit=room)
                if not items:
                    last_empty_claim = time.monotonic()
                for item in items:
                    task = asyncio.create_task(
                        _process(plan, item, client, limiter, stop, ledger=ledger)
                    )
                    in_flight[task] = item
            if not in_flight:
                if not await sync_to_async(_open_items_exist)(plan.run_id):
                    break
                # Other loops hold the rest; linger, so that items of a worker that dies are
                # taken over once its lease runs out.
                await asyncio.sleep(0.5)
                continue
            done, _ = await asyncio.wait(
                in_flight, timeout=0.5, return_when=asyncio.FIRST_COMPLETED
            )
            await bill_received()
            finished: list[Result] = []
            for task in done:
                item = in_flight.pop(task)
                outcome = task.result()
                if outcome.endpoint_broken:
                    await sync_to_async(run_fail)(run_id=plan.run_id, error=outcome.error)
                    stop.set()
                elif outcome.release:
                    await sync_to_async(items_release)(
                        token=token, item_ids=[item.id], error=outcome.error
                    )
                else:
                    finished.append((item, outcome))
            if finished:
                await store(finished, token)
    finally:
        stop.set()
        for task in in_flight:
            task.cancel()
        await asyncio.gather(*in_flight, watcher, return_exceptions=True)
        await bill_received()
        await sync_to_async(items_release)(token=token)
        await client.close()
        if isinstance(limiter, RedisRateLimiter):
            await limiter.aclose()


async def _watch(run_id: int, token: str, stop: asyncio.Event) -> None:
    """Stop the loop when the run leaves "running"; keep this loop's claims alive."""
    heartbeat_every = max(1.0, LEASE_SECONDS / 4)
    last_beat = time.monotonic()
    while not stop.is_set():
        if await sync_to_async(_run_status)(run_id) != Run.Status.RUNNING:
            stop.set()
            return
        if time.monotonic() - last_beat >= heartbeat_every:
            await sync_to_async(items_heartbeat)(token=token, run_id=run_id)
            last_beat = time.monotonic()
        try:
            await asyncio.wait_for(stop.wait(), timeout=WATCH_SECONDS)
        except TimeoutError:
            pass


async def _process(
    plan: _Plan,
    item: RunItem,
    client: Any,
    limiter: LocalRateLimiter | RedisRateLimiter,
    stop: asyncio.Event,
    *,
    ledger: list[tuple[int, int, int]] | None = None,
) -> Outcome:
    """All LLM calls for one item. Never raises (cancellation aside): whatever goes wrong with
    one item — the provider, the answer, a bug — is that item's failure with its reason, and the
    loop goes on with the others."""
    outcome = Outcome(item_id=item.id, ledger=ledger)
    try:
        try:
            system, user = item_messages(item=item, rubric=plan.rubric or None, plan=plan)
        except ValueError as exc:  # a target the prompt cannot be built for: say why
            outcome.error = str(exc)
            return outcome
        if plan.kind == Run.Kind.JUDGE:
            await _judge(plan, system, user, client, limiter, stop, outcome)
        elif plan.kind == Run.Kind.LABELLING:
            await _label(plan, system, user, client, limiter, stop, outcome)
        else:
            await _generate(plan, system, user, client, limiter, outcome)
    except providers.ProviderError as exc:
        outcome.requests += exc.attempts  # requests that brought no answer count as made too
        _provider_failure(outcome, exc)
    except Exception as exc:
        logger.exception("run %s item %s failed unexpectedly", plan.run_id, item.id)
        key = plan.config.api_key if plan.config else None
        outcome.error = providers.redact(f"unexpected error: {type(exc).__name__}: {exc}", key)
        outcome.release = outcome.endpoint_broken = False
    if outcome.error and outcome.problems and not outcome.release:
        # Earlier answers were unusable and then the provider failed: the item fails with both
        # reasons, and the last unusable answer is kept (an invalid rating, never scores).
        outcome.error = f"{'; '.join(outcome.problems)}; then: {outcome.error}"
    return outcome


def _provider_failure(outcome: Outcome, exc: providers.ProviderError) -> None:
    if isinstance(exc, providers.RateLimited):
        # The endpoint is saturated for longer than we wait in-process: the shared limiter is
        # paused for everyone, and the item goes back to the queue instead of failing.
        outcome.error, outcome.release = str(exc), True
    elif isinstance(exc, providers.PermanentError):
        outcome.error = str(exc)
        outcome.endpoint_broken = exc.status_code in ENDPOINT_BROKEN_STATUSES
    else:
        outcome.error = f"{exc} (gave up after {exc.attempts} attempts)"


async def _call(
    plan: _Plan,
    system: str,
    user: str,
    client: Any,
    limiter: Any,
    *,
    temperature: float | None,
    max_tokens: int | None,
    json_mode: bool,
    schema: providers.OutputSchema | None = None,
) -> providers.Completion:
    assert plan.config is not None
    return await providers.complete_with_retries(
        plan.config,
        system=system,
        user=user,
        temperature=temperature,
        max_tokens=max_tokens,
        json_mode=json_mode,
        schema=schema,
        client=client,
        limiter=limiter,
        max_attempts=MAX_HTTP_ATTEMPTS,
        base_delay=RETRY_BASE_DELAY,
    )


async def _judge(
    plan: _Plan,
    system: str,
    user: str,
    client: Any,
    limiter: Any,
    stop: asyncio.Event,
    outcome: Outcome,
) -> None:
    """Ask, parse; re-ask an unusable output up to max_output_attempts times. Never guesses."""
    names = [attribute["name"] for attribute in plan.rubric]
    problems = outcome.problems
    for ask in range(1, plan.max_output_attempts + 1):
        if stop.is_set():
            outcome.release = True  # cancelled: the item goes back to pending, unasked
            return
        completion = await _call(
            plan,
            system,
            user,
            client,
            limiter,
            temperature=plan.temperature,
            max_tokens=plan.max_tokens or JUDGE_MAX_TOKENS,
            json_mode=plan.json_mode,
            schema=plan.output_schema,
        )
        outcome.add(completion)
        outcome.raw_output = completion.text
        parse = parse_judge_output(completion.text, names, plan.scale)
        if parse.ok:
            outcome.parse, outcome.error = parse, ""
            return
        reason = parse.error or "unusable output"
        if completion.truncated:
            reason = f"cut off by the token limit: {reason}"
        problems.append(f"attempt {ask}: {reason}")
    outcome.error = "no valid judge output; " + "; ".join(problems)
    problems.clear()  # the error says it all


async def _label(
    plan: _Plan,
    system: str,
    user: str,
    client: Any,
    limiter: Any,
    stop: asyncio.Event,
    outcome: Outcome,
) -> None:
    """Ask for labels; re-ask an unparseable answer up to max_output_attempts times. Labels
    outside the list are kept (as "Others", verbatim in `others`); nothing is guessed."""
    problems = outcome.problems
    for ask in range(1, plan.max_output_attempts + 1):
        if stop.is_set():
            outcome.release = True
            return
        completion = await _call(
            plan,
            system,
            user,
            client,
            limiter,
            temperature=plan.temperature,
            max_tokens=plan.max_tokens or LABELLING_MAX_TOKENS,
            json_mode=False,  # Appendix D asks for a plain comma-separated list
            schema=plan.output_schema,  # sent only when the endpoint turned it on
        )
        outcome.add(completion)
        outcome.raw_output = completion.text
        parse = parse_label_output(completion.text, plan.labels, scheme=plan.scheme)
        if parse.ok:
            outcome.label_parse, outcome.error = parse, ""
            return
        reason = parse.error or "unusable output"
        if completion.truncated:
            reason = f"cut off by the token limit: {reason}"
        problems.append(f"attempt {ask}: {reason}")
    outcome.error = "no valid label output; " + "; ".join(problems)
    problems.clear()


async def _generate(
    plan: _Plan, system: str, user: str, client: Any, limiter: Any, outcome: Outcome
) -> None:
    completion = await _call(
        plan,
        system,
        user,
        client,
        limiter,
        temperature=plan.temperature,
        max_tokens=plan.max_tokens,
        json_mode=False,
    )
    outcome.add(completion)
    _generation_outcome(plan, completion, outcome)


def _generation_outcome(plan: _Plan, completion: providers.Completion, outcome: Outcome) -> None:
    """Answer without <think>…</think> (kept in metadata), truncation flag and metadata."""
    answer, thinking = strip_think(completion.text)
    thinking = "\n\n".join(part for part in (completion.reasoning, thinking) if part)
    outcome.raw_output = completion.text
    outcome.truncated = completion.truncated
    outcome.answer = answer
    outcome.metadata = {
        "run_id": plan.run_id,
        "model": completion.model,
        "input_tokens": completion.input_tokens,
        "output_tokens": completion.output_tokens,
        "latency_s": round(completion.latency_s, 4),
        "finish_reason": completion.finish_reason,
        "raw_finish_reason": completion.raw_finish_reason,
        "temperature": plan.temperature,
        "max_tokens": plan.max_tokens,
        "request_id": completion.request_id,
        "thinking": thinking,
    }
    if not answer:
        cut = " (cut off by the token limit)" if completion.truncated else ""
        outcome.error = f"empty answer once <think> reasoning was removed{cut}"


# ------------------------------------------------------------------------------ vLLM offline


def _work_offline(plan: _Plan, *, model: str, options: dict[str, Any]) -> None:
    """Generation with vllm.LLM in this worker process (a GPU worker): one batch for the lot.

    The model loads once per call, so everything pending is claimed at once; vLLM batches it.
    """
    token = uuid.uuid4().hex
    items = items_claim(run_id=plan.run_id, token=token, limit=1_000_000, within_concurrency=False)
    if not items:
        return
    try:
        conversations = []
        for item in items:
            system, user = item_messages(item=item, rubric=None)
            conversations.append(
                [{"role": "system", "content": system}, {"role": "user", "content": user}]
            )
        completions = providers.generate_offline(
            model,
            conversations,
            temperature=plan.temperature
            if plan.temperature is not None
            else prompts.GENERATION_TEMPERATURE,
            max_tokens=plan.max_tokens or prompts.GENERATION_MAX_TOKENS,
            seed=options.get("seed"),
            llm_kwargs=options.get("llm_kwargs"),
        )
    except providers.PermanentError as exc:
        items_release(token=token)
        run_fail(run_id=plan.run_id, error=str(exc))
        return
    except BaseException:
        items_release(token=token)
        raise
    items_bill(
        received=[
            (item.id, completion.input_tokens or 0, completion.output_tokens or 0)
            for item, completion in zip(items, completions, strict=True)
        ],
        plan=plan,
    )
    results: list[Result] = []
    for item, completion in zip(items, completions, strict=True):
        outcome = Outcome()
        outcome.add(completion)
        _generation_outcome(plan, completion, outcome)
        results.append((item, outcome))
    plan.store(results, token)


def close_connections() -> None:
    """For worker signal handlers that touch the database before forking."""
    connection.close()
