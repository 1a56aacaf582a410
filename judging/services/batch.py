"""Batch mode: a run's requests go through the provider's batch interface (about half price,
results within 24 h) instead of one live request per item.

Lifecycle, all in short Celery tasks (no worker waits on the provider):
- submit (`run_submit`): pending items are claimed for a new `ProviderBatch` (RunItem.claim_token
  = the batch's token, attempts + 1), their request lines are written to a temporary JSONL file
  streamed from the database, cut at the provider's request and byte limits, uploaded, and the
  batch created. The custom id of each request names the item and its attempt.
- poll (`batches_poll`, Celery beat): each open batch is retrieved when due, with a backoff;
  once ended, its results are streamed and stored in chunks, each chunk in one transaction
  through the engine's exactly-once store (`RunPlan.store`): a result is stored only
  while its item is still claimed by that batch, under the item's row lock. A second download
  (a poller killed mid-way, two pollers racing, a late result of an older attempt) finds the
  claim gone and stores nothing.
- re-ask: per-request errors, expired requests and outputs that fail parsing put the item
  back to pending (with the reason) while it has attempts left, and the next submit sends them
  in a follow-up batch; after `run.max_output_attempts` the item fails with every reason.
- cancel: the provider cancels the open batches; whatever they answered is stored, the rest
  goes back to pending for a resume.
Everything is in Postgres, so a restart of every worker and of beat loses nothing.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from scoring.label_parsing import parse_label_output
from scoring.parsing import parse_judge_output

from .. import providers
from ..models import ModelEndpoint, ProviderBatch, Run, RunItem
from ..providers import batch_api
from .claims import items_bill
from .engine import (
    ENDPOINT_BROKEN_STATUSES,
    JUDGE_MAX_TOKENS,
    RunPlan,
    cut_off_reason,
    generation_outcome,
    item_messages,
    reask_limit,
)
from .launch import (
    LABELLING_MAX_TOKENS,
    RunError,
    endpoint_config,
    run_fail,
    run_finalize,
    text_policy_check,
)
from .prices import endpoint_prices
from .storage import Outcome, Result

logger = logging.getLogger(__name__)

# Read from settings once (settings.py says what they are); tests patch these attributes.
STORE_CHUNK: int = settings.JUDGING_BATCH_STORE_CHUNK
BUILD_LEASE_SECONDS: float = settings.JUDGING_BATCH_BUILD_LEASE_SECONDS
_CUSTOM_ID = re.compile(r"^i(\d+)-a(\d+)$")


class BatchModeError(RunError):
    """The run cannot go through a batch interface; the message says why."""


def endpoint_check(*, endpoint: ModelEndpoint) -> None:
    """Raise BatchModeError when `endpoint` has no batch interface."""
    if not batch_api.supports_batch(provider=endpoint.provider, flag=endpoint.supports_batch):
        raise BatchModeError(
            f"{endpoint.name}: batch mode needs an OpenAI or Anthropic endpoint, or an "
            "OpenAI-compatible server marked 'supports batch'"
        )


def limits(*, provider: str) -> tuple[int, int]:
    """(requests, bytes) per batch for the provider's protocol."""
    table = settings.JUDGING_BATCH_LIMITS
    entry = table["anthropic" if provider == "anthropic" else "openai"]
    return int(entry["requests"]), int(entry["bytes"])


def custom_id(*, item_id: int, attempt: int) -> str:
    return f"i{item_id}-a{attempt}"


def parse_custom_id(*, value: str) -> tuple[int, int] | None:
    match = _CUSTOM_ID.match(value)
    return (int(match.group(1)), int(match.group(2))) if match else None


# ------------------------------------------------------------------------------ the plan


def load_plan(*, run: Run) -> RunPlan:
    """The engine's plan of `run`, priced at the endpoint's batch prices (its own, else the list
    price, else the immediate price; 0 when unknown, which the pages say)."""
    plan = RunPlan.load(run)
    price = endpoint_prices(endpoint=run.endpoint)
    plan.price_input = price.batch_input or 0.0
    plan.price_output = price.batch_output or 0.0
    return plan


def request_spec(*, plan: RunPlan) -> batch_api.RequestSpec:
    """The same temperature, token limit, JSON mode and schema as immediate mode sends."""
    if plan.kind == Run.Kind.JUDGE:
        return batch_api.RequestSpec(
            temperature=plan.temperature,
            max_tokens=plan.max_tokens or JUDGE_MAX_TOKENS,
            json_mode=plan.json_mode,
            schema=plan.output_schema,
        )
    if plan.kind == Run.Kind.LABELLING:
        return batch_api.RequestSpec(
            temperature=plan.temperature,
            max_tokens=plan.max_tokens or LABELLING_MAX_TOKENS,
            json_mode=False,
            schema=plan.output_schema,
        )
    return batch_api.RequestSpec(
        temperature=plan.temperature, max_tokens=plan.max_tokens, json_mode=False, schema=None
    )


# ------------------------------------------------------------------------------ start, submit


def run_start(*, run: Run) -> None:
    """Send the run's pending items to the provider once the transaction commits.

    Precondition: in the transaction that starts the run (a refusal rolls the launch back).
    """
    from .. import tasks

    endpoint_check(endpoint=run.endpoint)

    transaction.on_commit(lambda: tasks.batch_submit.delay(run.id))


def run_submit(*, run_id: int) -> list[int]:
    """Submit every pending item of a running batch-mode run; returns the new batch ids.

    Safe to call several times at once: each part claims disjoint items (SKIP LOCKED).
    """
    made: list[int] = []
    run = Run.objects.select_related("endpoint", "study").get(id=run_id)
    if run.status != Run.Status.RUNNING or not run.is_batch:
        return made
    try:
        text_policy_check(run=run)  # the study's policy may have changed since the launch
        plan = load_plan(run=run)
        assert plan.config is not None
        sdk = batch_api.client(plan.config)
    except (providers.PermanentError, RunError, ValueError) as exc:
        run_fail(run_id=run_id, error=str(exc))
        return made
    max_requests, max_bytes = limits(provider=run.endpoint.provider)
    try:
        while True:
            batch = _claim_part(run_id=run_id, limit=max_requests)
            if batch is None:
                return made
            _build_and_submit(batch, plan=plan, sdk=sdk, max_bytes=max_bytes)
            made.append(batch.id)
            if batch.status != ProviderBatch.Status.IN_PROGRESS:
                return made  # the provider refused it: try again at the next poll
    finally:
        sdk.close()


@transaction.atomic
def _claim_part(*, run_id: int, limit: int) -> ProviderBatch | None:
    run = Run.objects.select_for_update().filter(id=run_id, status=Run.Status.RUNNING).first()
    if run is None:
        return None
    ids = list(
        RunItem.objects.select_for_update(skip_locked=True)
        .filter(run_id=run_id, status=RunItem.Status.PENDING)
        .order_by("id")
        .values_list("id", flat=True)[:limit]
    )
    if not ids:
        return None
    batch = ProviderBatch.objects.create(
        run=run, token=uuid.uuid4().hex[:32], first_item_id=ids[0], last_item_id=ids[-1]
    )
    RunItem.objects.filter(id__in=ids).update(
        status=RunItem.Status.RUNNING,
        claim_token=batch.token,
        claimed_at=timezone.now(),
        heartbeat_at=timezone.now(),
        attempts=F("attempts") + 1,
    )
    return batch


def _batch_items(token: str, chunk: int = 2000) -> Iterator[RunItem]:
    """The items a batch holds, in id order, read a chunk at a time (never the whole run)."""
    last = 0
    while True:
        items = list(
            RunItem.objects.filter(claim_token=token, status=RunItem.Status.RUNNING, id__gt=last)
            .select_related("response__conversation", "conversation")
            .order_by("id")[:chunk]
        )
        if not items:
            return
        yield from items
        last = items[-1].id


def _build_and_submit(batch: ProviderBatch, *, plan: RunPlan, sdk: Any, max_bytes: int) -> None:
    """Write the batch's request file, cut at `max_bytes`, and create it at the provider."""
    assert plan.config is not None
    spec = request_spec(plan=plan)
    count = size = 0
    last_id: int | None = None
    overflow_from: int | None = None
    unbuildable: list[Result] = []
    with tempfile.TemporaryFile() as jsonl:
        for item in _batch_items(batch.token):
            try:
                system, user = item_messages(item=item, rubric=plan.rubric or None, plan=plan)
            except ValueError as exc:  # a target the prompt cannot be built for: say why
                outcome = Outcome(error=str(exc))
                unbuildable.append((item, outcome))
                continue
            line = batch_api.request_line(
                plan.config,
                custom_id=custom_id(item_id=item.id, attempt=item.attempts),
                system=system,
                user=user,
                spec=replace(spec, max_tokens=item.max_tokens) if item.max_tokens else spec,
            )
            data = (json.dumps(line, ensure_ascii=False) + "\n").encode()
            if count and size + len(data) > max_bytes:
                overflow_from = item.id  # this item and the rest wait for the next part
                break
            jsonl.write(data)
            count, size, last_id = count + 1, size + len(data), item.id
        if unbuildable:
            plan.store(unbuildable, batch.token)
        if overflow_from is not None:
            # Back to pending, the attempt not counted: it was never sent.
            RunItem.objects.filter(
                claim_token=batch.token, status=RunItem.Status.RUNNING, id__gte=overflow_from
            ).update(status=RunItem.Status.PENDING, claim_token="", attempts=F("attempts") - 1)
        if count == 0:
            _batch_close(batch, status=ProviderBatch.Status.STORED)
            return
        jsonl.seek(0)
        try:
            submitted = batch_api.submit(sdk, plan.config, jsonl=jsonl, token=batch.token)
        except providers.ProviderError as exc:
            logger.warning("run %s: batch %s not created: %s", plan.run_id, batch.token, exc)
            _items_handback(batch.token, error=str(exc), uncount=True)
            _batch_close(batch, status=ProviderBatch.Status.ABANDONED, error=str(exc))
            if isinstance(exc, providers.PermanentError) and (
                exc.status_code in ENDPOINT_BROKEN_STATUSES
            ):
                run_fail(run_id=plan.run_id, error=str(exc))
            return
    batch.provider_batch_id = submitted.batch_id
    batch.input_file_id = submitted.input_file_id
    batch.request_count, batch.bytes, batch.last_item_id = count, size, last_id
    batch.status = ProviderBatch.Status.IN_PROGRESS
    batch.next_poll_at = timezone.now() + timedelta(seconds=_poll_delay(0))
    batch.save()
    logger.info(
        "run %s: batch %s created (%s requests, %s bytes)",
        plan.run_id,
        submitted.batch_id,
        count,
        size,
    )


def _batch_close(batch: ProviderBatch, *, status: str, error: str = "") -> None:
    ProviderBatch.objects.filter(id=batch.id).update(
        status=status, error=error[:4000], finished_at=timezone.now()
    )
    batch.status = status


def _items_handback(token: str, *, error: str = "", uncount: bool = False) -> int:
    """Every item the batch still holds back to pending (a cancel, a refused batch)."""
    updates: dict[str, Any] = {"status": RunItem.Status.PENDING, "claim_token": ""}
    if error:
        updates["last_error"] = error[:4000]
    if uncount:
        updates["attempts"] = F("attempts") - 1
    return RunItem.objects.filter(claim_token=token, status=RunItem.Status.RUNNING).update(
        **updates
    )


# ------------------------------------------------------------------------------ poll


def _poll_delay(attempt: int) -> float:
    """Seconds to the next poll of a batch polled `attempt` times: doubling, capped."""
    first = float(settings.JUDGING_BATCH_POLL_SECONDS)
    return min(float(settings.JUDGING_BATCH_POLL_MAX_SECONDS), first * 2 ** min(attempt, 20))


def batches_poll(
    *, force: bool = False, dispatch: Callable[[int], None] | None = None
) -> dict[str, int]:
    """Periodic: poll due batches, store what ended, submit re-asks, settle runs.

    Idempotent and safe in several places at once. `dispatch` sends each due batch to a task
    of its own (beat does: the batches of a large run are then downloaded and stored by as many
    worker processes at once); without it they are polled here, one after the other. `force`
    polls every open batch now (tests, benchmarks), regardless of its backoff.
    """
    counts = {"polled": 0, "stored": 0, "submitted": 0}
    stale = timezone.now() - timedelta(seconds=BUILD_LEASE_SECONDS)
    for batch in ProviderBatch.objects.filter(
        status=ProviderBatch.Status.BUILDING, created_at__lt=stale
    ):
        # Its submitter died before the batch was created at the provider.
        _items_handback(batch.token, uncount=True)
        _batch_close(batch, status=ProviderBatch.Status.ABANDONED, error="submitter lost")
    due = ProviderBatch.objects.filter(
        status__in=[
            ProviderBatch.Status.IN_PROGRESS,
            ProviderBatch.Status.CANCELLING,
            ProviderBatch.Status.ENDED,
        ]
    )
    if not force:
        due = due.filter(Q(next_poll_at__lte=timezone.now()) | Q(next_poll_at__isnull=True))
    for batch_id in due.order_by("id").values_list("id", flat=True):
        counts["polled"] += 1
        if dispatch is not None:
            dispatch(batch_id)
        else:
            counts["stored"] += batch_poll(batch_id=batch_id, force=force)
    for run_id in Run.objects.filter(
        mode=Run.Mode.BATCH, status__in=[Run.Status.RUNNING, Run.Status.CANCELLING]
    ).values_list("id", flat=True):
        counts["submitted"] += run_follow_up(run_id=run_id)
    return counts


def run_follow_up(*, run_id: int) -> int:
    """Send what is pending (re-asks, a resume) in a new batch, or settle the run; returns how
    many batches were created."""
    made = 0
    if (
        _run_has_pending(run_id)
        and not _open_batches(run_id).filter(status=ProviderBatch.Status.BUILDING).exists()
    ):
        made = len(run_submit(run_id=run_id))
    run_settle(run_id=run_id)
    return made


def batch_poll_and_follow_up(*, batch_id: int) -> int:
    """`batch_poll`, then what its run needs next (re-asks submitted, or the run settled)."""
    stored = batch_poll(batch_id=batch_id)
    run_id = ProviderBatch.objects.filter(id=batch_id).values_list("run_id", flat=True).first()
    if run_id is not None:
        run_follow_up(run_id=run_id)
    return stored


def _run_has_pending(run_id: int) -> bool:
    return RunItem.objects.filter(run_id=run_id, status=RunItem.Status.PENDING).exists()


def _open_batches(run_id: int) -> Any:
    return ProviderBatch.objects.filter(run_id=run_id, status__in=ProviderBatch.OPEN)


def run_settle(*, run_id: int) -> Run:
    """Finish a batch-mode run once none of its batches is open (done, or cancelled)."""
    if _open_batches(run_id).exists():
        return Run.objects.get(id=run_id)
    return run_finalize(run_id=run_id)


@transaction.atomic
def batch_lease(*, batch_id: int, force: bool) -> ProviderBatch | None:
    """Take the batch's next poll for this poller (others skip it until the backoff is over).

    None when another poller holds it, it is closed, or (unless `force`) its next poll is not
    due yet. Atomic on its own; inside a caller's transaction the row stays locked until that
    one commits.
    """
    # Only the batch's row is locked (of=self): with the joined run and endpoint rows locked
    # too, a second poller leasing another batch of the same run at that moment would find the
    # run row locked and skip its batch, leaving it for a later poll instead of storing the two
    # batches at once.
    batch = (
        ProviderBatch.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("run__endpoint")
        .filter(id=batch_id, status__in=ProviderBatch.OPEN)
        .first()
    )
    now = timezone.now()
    if batch is None or (not force and batch.next_poll_at and batch.next_poll_at > now):
        return None
    batch.polled_at = now
    batch.next_poll_at = now + timedelta(seconds=_poll_delay(batch.poll_attempts))
    batch.poll_attempts += 1
    batch.save(update_fields=["polled_at", "next_poll_at", "poll_attempts"])
    return batch


def batch_poll(*, batch_id: int, force: bool = False) -> int:
    """Look at one batch; store its results once it ended. Returns how many were stored."""
    batch = batch_lease(batch_id=batch_id, force=force)
    if batch is None:
        return 0
    run = batch.run
    plan = load_plan(run=run)
    assert plan.config is not None
    sdk = batch_api.client(plan.config)
    try:
        if run.status == Run.Status.CANCELLING and batch.status == ProviderBatch.Status.IN_PROGRESS:
            batch_api.cancel(sdk, plan.config, batch_id=batch.provider_batch_id)
            ProviderBatch.objects.filter(id=batch.id).update(status=ProviderBatch.Status.CANCELLING)
        state = batch_api.retrieve(sdk, plan.config, batch_id=batch.provider_batch_id)
        ProviderBatch.objects.filter(id=batch.id).update(provider_status=state.provider_status)
        if state.state == "in_progress":
            return 0
        if state.state == "failed":
            _batch_failed(batch, plan=plan, error=state.error)
            return 0
        ProviderBatch.objects.filter(id=batch.id).update(status=ProviderBatch.Status.ENDED)
        stored = 0
        for chunk in _chunks(
            batch_api.results(
                sdk,
                plan.config,
                batch_id=batch.provider_batch_id,
                state=state,
                spec=request_spec(plan=plan),
            ),
            STORE_CHUNK,
        ):
            stored += results_store(plan=plan, token=batch.token, results=chunk).stored
        # Requests the results did not mention (never run before a cancel): back to pending.
        cancelled = Run.objects.filter(id=run.id, status=Run.Status.CANCELLING).exists()
        if not cancelled:
            # A request the provider never answered counts as an attempt, like an error.
            missing = "no result came back for it"
            RunItem.objects.filter(
                claim_token=batch.token,
                status=RunItem.Status.RUNNING,
                attempts__gte=plan.max_output_attempts,
            ).update(
                status=RunItem.Status.FAILED,
                claim_token="",
                last_error=missing,
                finished_at=timezone.now(),
            )
        _items_handback(
            batch.token, error="" if cancelled else "no result came back for it", uncount=cancelled
        )
        _batch_close(batch, status=ProviderBatch.Status.STORED)
        return stored
    except providers.ProviderError as exc:
        # Polled again after the backoff; the batch keeps its items meanwhile.
        logger.warning("batch %s: poll failed: %s", batch.provider_batch_id, exc)
        ProviderBatch.objects.filter(id=batch.id).update(error=str(exc)[:4000])
        return 0
    finally:
        sdk.close()


def _batch_failed(batch: ProviderBatch, *, plan: RunPlan, error: str) -> None:
    """A batch refused as a whole: each item is re-asked while it has attempts left."""
    reason = f"batch {batch.provider_batch_id} failed: {error}"
    with transaction.atomic():
        items = list(
            RunItem.objects.select_for_update().filter(
                claim_token=batch.token, status=RunItem.Status.RUNNING
            )
        )
        again = [item for item in items if item.attempts < plan.max_output_attempts]
        final = [item for item in items if item.attempts >= plan.max_output_attempts]
        _reask(again, token=batch.token, reasons={item.id: reason for item in again})
        plan.store([(item, Outcome(error=_joined(item, reason))) for item in final], batch.token)
        _batch_close(batch, status=ProviderBatch.Status.FAILED, error=error)


def _chunks(results: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for result in results:
        chunk.append(result)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# ------------------------------------------------------------------------------ store


@dataclass
class Stored:
    stored: int = 0
    reasked: int = 0
    released: int = 0
    ignored: int = 0


def _joined(item: RunItem, reason: str) -> str:
    return f"{item.last_error}; {reason}" if item.last_error else reason


@transaction.atomic
def results_store(*, plan: RunPlan, token: str, results: Sequence[batch_api.BatchResult]) -> Stored:
    """Store a chunk of one batch's results exactly once (one transaction).

    Only items still claimed by the batch (`token`) and asked in the attempt the custom id
    names are touched; their rows are locked first, so a racing poller waits and then finds
    nothing left to store. Every completion of such an item is billed here, once.
    """
    counts = Stored()
    by_item: dict[int, tuple[int, batch_api.BatchResult]] = {}
    for result in results:
        parsed = parse_custom_id(value=result.custom_id)
        if parsed is None:
            logger.warning("batch result with a foreign custom id %r", result.custom_id[:80])
            counts.ignored += 1
            continue
        by_item[parsed[0]] = (parsed[1], result)
    items = {
        item.id: item
        for item in RunItem.objects.select_for_update().filter(
            id__in=list(by_item), claim_token=token, status=RunItem.Status.RUNNING
        )
    }
    cancelling = Run.objects.filter(id=plan.run_id, status=Run.Status.CANCELLING).exists()
    finished: list[Result] = []
    again: list[RunItem] = []
    reasons: dict[int, str] = {}
    back: list[int] = []
    billed: list[tuple[int, int, int]] = []
    names = [attribute["name"] for attribute in plan.rubric]
    run_limit = request_spec(plan=plan).max_tokens
    for item_id, (attempt, result) in by_item.items():
        item = items.get(item_id)
        if item is None or item.attempts != attempt:
            counts.ignored += 1  # stored before, or an older attempt's late answer
            continue
        if result.kind == "canceled":
            back.append(item.id)
            continue
        outcome = Outcome()
        completion = result.completion
        problem = result.error or result.kind
        sent_limit = item.max_tokens or run_limit  # the limit this item's request carried
        if completion is not None:
            outcome.add(completion)
            billed.append((item.id, completion.input_tokens or 0, completion.output_tokens or 0))
            outcome.raw_output = completion.text
            problem = _parse_into(plan, completion, outcome, names, limit=sent_limit)
        if not problem:
            finished.append((item, outcome))
            continue
        reason = f"attempt {attempt}: {problem}"
        if plan.kind != Run.Kind.GENERATION or completion is None:
            if item.attempts < plan.max_output_attempts and not cancelling:
                again.append(item)
                reasons[item.id] = reason
                # Tokens of an unusable answer count on the item, as in immediate mode.
                item.input_tokens_add = outcome.input_tokens  # type: ignore[attr-defined]
                item.output_tokens_add = outcome.output_tokens  # type: ignore[attr-defined]
                if completion is not None and run_limit and sent_limit:
                    # A cut answer is re-asked with a raised limit, as in immediate mode.
                    raised = reask_limit(reason=problem, limit=sent_limit, base=run_limit)
                    if raised != sent_limit:
                        item.max_tokens = raised
                continue
        if cancelling and completion is None:
            back.append(item.id)
            continue
        kind = {"judge": "judge", "labelling": "label"}.get(plan.kind)
        prefix = f"no valid {kind} output; " if kind and completion is not None else ""
        outcome.error = prefix + _joined(item, reason)
        finished.append((item, outcome))
    items_bill(received=billed, plan=plan, locked=True)  # locked above
    if finished:
        counts.stored = plan.store(finished, token)
    counts.reasked = _reask(again, token=token, reasons=reasons, plan=plan)
    if back:
        counts.released = RunItem.objects.filter(
            id__in=back, claim_token=token, status=RunItem.Status.RUNNING
        ).update(status=RunItem.Status.PENDING, claim_token="", attempts=F("attempts") - 1)
    if counts.reasked or counts.stored:
        ProviderBatch.objects.filter(token=token).update(
            results_stored=F("results_stored") + counts.stored,
            results_reasked=F("results_reasked") + counts.reasked,
        )
    return counts


def _parse_into(
    plan: RunPlan,
    completion: providers.Completion,
    outcome: Outcome,
    names: list[str],
    *,
    limit: int | None,
) -> str:
    """Parse like immediate mode; returns why the answer is unusable ("" when usable). A batch
    result carries the same finish reason as an immediate answer, so an answer cut off by the
    token limit is refused here too, whatever could be parsed from it. `limit`: the token limit
    the request was sent with (the run's, or the item's where a re-ask raised it)."""
    if plan.kind == Run.Kind.GENERATION:
        generation_outcome(plan=plan, completion=completion, outcome=outcome)
        return outcome.error
    if plan.kind == Run.Kind.JUDGE:
        parse = parse_judge_output(completion.text, names, plan.scale)
        cut = cut_off_reason(completion=completion, limit=limit, detail=parse.error)
        if cut is None and parse.ok:
            outcome.parse = parse
            return ""
        return cut or parse.error or "unusable output"
    label_parse = parse_label_output(completion.text, plan.labels, scheme=plan.scheme)
    cut = cut_off_reason(completion=completion, limit=limit, detail=label_parse.error)
    if cut is None and label_parse.ok:
        outcome.label_parse = label_parse
        return ""
    return cut or label_parse.error or "unusable output"


def _reask(
    items: Sequence[RunItem],
    *,
    token: str,
    reasons: dict[int, str],
    plan: RunPlan | None = None,
) -> int:
    """Back to pending for the next batch, with the reason and the tokens spent so far."""
    if not items:
        return 0
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {RunItem._meta.db_table} SET status = %s, claim_token = '', "
            "last_error = %s, max_tokens = %s, requests = requests + 1, "
            "input_tokens = input_tokens + %s, output_tokens = output_tokens + %s, "
            "cost_usd = cost_usd + %s WHERE id = %s AND claim_token = %s",
            [
                (
                    RunItem.Status.PENDING.value,
                    _joined(item, reasons[item.id])[:4000],
                    item.max_tokens,
                    getattr(item, "input_tokens_add", 0),
                    getattr(item, "output_tokens_add", 0),
                    (
                        getattr(item, "input_tokens_add", 0) * plan.price_input
                        + getattr(item, "output_tokens_add", 0) * plan.price_output
                    )
                    / 1_000_000
                    if plan
                    else 0.0,
                    item.id,
                    token,
                )
                for item in items
            ],
        )
    return len(items)


# ------------------------------------------------------------------------------ cancel


def run_cancel_batches(*, run_id: int) -> int:
    """Ask the provider to cancel every open batch of a cancelling run; returns how many.

    What they already answered is stored by the next polls; the rest goes back to pending.
    """
    run = Run.objects.select_related("endpoint").get(id=run_id)
    if run.status != Run.Status.CANCELLING:
        return 0
    config = endpoint_config(endpoint=run.endpoint)
    sdk = batch_api.client(config)
    cancelled = 0
    try:
        for batch in _open_batches(run_id).filter(status=ProviderBatch.Status.IN_PROGRESS):
            try:
                batch_api.cancel(sdk, config, batch_id=batch.provider_batch_id)
            except providers.ProviderError as exc:
                logger.warning("batch %s: cancel failed: %s", batch.provider_batch_id, exc)
                continue  # the next poll of a cancelling run asks again
            ProviderBatch.objects.filter(id=batch.id).update(
                status=ProviderBatch.Status.CANCELLING, next_poll_at=timezone.now()
            )
            cancelled += 1
    finally:
        sdk.close()
    run_settle(run_id=run_id)
    return cancelled
