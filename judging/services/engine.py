"""The work loop: asyncio requests against HTTP endpoints, or one offline vLLM batch.

No LLM call runs inside a transaction; whatever goes wrong with one item fails that item, never
the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

from annotation.selectors import study_distortion_labels, study_rubric
from scoring.label_parsing import Scheme, parse_label_output
from scoring.parsing import CUT_OFF, parse_judge_output, strip_think

from .. import prompts, providers, structured
from ..models import ModelEndpoint, Run, RunItem
from ..prompts import labelling_messages
from ..ratelimit import LimiterUnavailable, LocalRateLimiter, RedisRateLimiter
from . import claims
from .claims import (
    items_bill,
    items_claim,
    items_heartbeat,
    items_release,
    open_items_exist,
    run_status,
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
from .storage import (
    Outcome,
    Result,
    generation_items_store,
    judge_items_store,
    labelling_items_store,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")

# HTTP attempts per LLM request (429/5xx/timeouts), all inside providers.complete_with_retries;
# Celery itself never retries these tasks, so retries are not multiplied.
MAX_HTTP_ATTEMPTS = 5
WATCH_SECONDS = 1.0  # how often a loop looks for a cancel (cancel takes effect within seconds)
RETRY_BASE_DELAY = 0.5  # seconds before the first retry; doubles each time (tests shorten it)
UNLIMITED_RATE = 100_000.0  # requests/s when the run sets no rate limit
# How long a run loop waits out a database that went away (a PostgreSQL restart) before it
# gives up and leaves its items to the sweeper.
DB_OUTAGE_SECONDS: float = settings.JUDGING_DB_OUTAGE_SECONDS
# 401/403/404 mean the endpoint itself is wrong (key, model name): stop the run, fail nothing.
ENDPOINT_BROKEN_STATUSES = frozenset({401, 403, 404})
JUDGE_MAX_TOKENS = 1024
# A re-ask after an answer the token limit cut off doubles the limit, up to this many times the
# run's own: the same limit would most likely cut the next answer at the same place.
CUT_OFF_MAX_TOKENS_FACTOR = 4


# ------------------------------------------------------------------------------ the work loop


@dataclass
class RunPlan:
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
    scheme: Scheme = "ranked"
    # The answer's JSON schema, sent only where the endpoint has structured outputs on.
    output_schema: providers.OutputSchema | None = None

    @classmethod
    def load(cls, run: Run) -> RunPlan:
        endpoint = run.endpoint
        offline = endpoint.provider == ModelEndpoint.Provider.VLLM_OFFLINE
        price = endpoint_prices(endpoint=endpoint)
        plan = cls(
            run_id=run.id,
            kind=run.kind,
            endpoint_id=endpoint.id,
            config=None if offline else endpoint_config(endpoint=endpoint),
            json_mode=endpoint.json_mode,
            temperature=run.temperature,
            max_tokens=run.max_tokens,
            max_output_attempts=max(1, run.max_output_attempts),
            concurrency=max(1, run.concurrency),
            rate_limit=run.rate_limit,
            # Unknown prices count as 0 in the items' cost columns; the pages say "price
            # unknown" for such an endpoint instead of showing that sum.
            price_input=price.input or 0.0,
            price_output=price.output or 0.0,
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
            # A study's choices or a launch form's (parse_label_output refuses anything else).
            plan.scheme = cast(Scheme, (run.params or {}).get("scheme") or run.study.label_scheme)
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


def item_messages(
    *, item: RunItem, rubric: list[dict[str, Any]] | None, plan: RunPlan | None = None
) -> tuple[str, str]:
    """(system, user) exactly as sent for this item."""
    if item.response_id:
        response = item.response
        assert response is not None  # response_id is set
        return prompts.judge_messages(response.conversation.context, response.text, rubric)
    conversation = item.conversation
    assert conversation is not None  # an item without a response is a conversation's
    if plan is not None and plan.kind == Run.Kind.LABELLING:
        return labelling_messages(conversation.context, labels=plan.labels, scheme=plan.scheme)
    return prompts.generation_messages(conversation.context)


def run_work(*, run_id: int) -> None:
    """Process a run's items until none is left or the run stops. Safe to call many times at once.

    Called by the Celery task; several calls share the run through claims.
    """
    run = Run.objects.select_related("endpoint", "study").get(id=run_id)
    if run.is_batch:
        return  # a stale message: batch-mode runs are worked by judging.services.batch
    if run.status != Run.Status.RUNNING:
        run_finalize(run_id=run_id)
        return
    try:
        # Again here, not only at launch: the study's policy may have changed since.
        text_policy_check(run=run)
        plan = RunPlan.load(run)
    except (providers.PermanentError, RunError, ValueError) as exc:
        run_fail(run_id=run_id, error=str(exc))
        return
    if run.endpoint.provider == ModelEndpoint.Provider.VLLM_OFFLINE:
        _work_offline(plan, model=run.endpoint.model, options=run.endpoint.default_params or {})
    else:
        async_to_sync(_work_async)(plan)
    run_finalize(run_id=run_id)


# SQLSTATEs that say "the same statements again, a moment later, will do": the transaction
# was rolled back for a conflict (class 40: serialization failure, deadlock), or the server is
# out of a resource or not accepting connections for now (class 53, e.g. too many clients; 57P0x,
# a shutdown or a start-up; class 08, the connection).
TRANSIENT_SQLSTATES = ("40", "53", "57P", "08")


def db_error_is_transient(*, exc: BaseException) -> bool:
    """Whether a database error (Django's, wrapping the driver's) is worth trying again."""
    sqlstate = getattr(exc.__cause__, "sqlstate", None) or ""
    return sqlstate.startswith(TRANSIENT_SQLSTATES)


def _db(function: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """`sync_to_async(function)` that waits out a database restart or a transient refusal
    instead of ending the loop.

    Without it, a loop whose connection died mid-run lost what it held in memory: answers
    received but not yet stored or billed (the provider billed them all the same). On
    OperationalError or InterfaceError from a connection that no longer answers, it is closed
    and the call made again, backing off up to DB_OUTAGE_SECONDS; so is a transient error on a
    live connection (a deadlock, a serialization failure, too many clients:
    `db_error_is_transient`). Repeating a call is safe: what failed rolled back, and storing is
    exactly-once under the item's claim; only a commit whose acknowledgement was lost in the
    restart could be billed twice.
    """

    def call(*args: Any, **kwargs: Any) -> T:
        deadline, delay = time.monotonic() + DB_OUTAGE_SECONDS, 0.5
        while True:
            try:
                return function(*args, **kwargs)
            except (OperationalError, InterfaceError) as exc:
                # Another error on a live connection (a lock timeout, a constraint) is the
                # caller's to handle.
                alive = connection.connection is not None and connection.is_usable()
                transient = db_error_is_transient(exc=exc)
                if (alive and not transient) or time.monotonic() + delay > deadline:
                    raise
                logger.warning(
                    "run loop: database unavailable (%s), trying again in %.1f s", exc, delay
                )
                if not alive:
                    connection.close()  # thread-sensitive: this thread's broken connection
                time.sleep(delay)
                delay = min(5.0, delay * 2)

    return sync_to_async(call)


def _limiter(plan: RunPlan) -> LocalRateLimiter | RedisRateLimiter:
    rate = plan.rate_limit or UNLIMITED_RATE
    # A set limit spaces requests evenly (no bursts); without one only 429 pauses matter.
    burst = 1 if plan.rate_limit else max(1, plan.concurrency)
    redis_url = settings.JUDGING_RATELIMIT_REDIS_URL
    if redis_url:
        # One budget and one 429 pause per endpoint, shared by every worker process.
        # Every request in flight may ask for its slot at the same moment: one connection each.
        return RedisRateLimiter(
            redis=redis_url,
            key=f"endpoint-{plan.endpoint_id}",
            rate=rate,
            burst=burst,
            max_connections=plan.concurrency,
        )
    return LocalRateLimiter(rate=rate, burst=burst)


async def _work_async(plan: RunPlan) -> None:
    """The asyncio loop: keep `concurrency` requests in flight, store results as they arrive."""
    assert plan.config is not None
    token = uuid.uuid4().hex
    claim = _db(items_claim)
    store = _db(plan.store)
    try:
        client = providers.make_client(plan.config, max_connections=plan.concurrency)
    except providers.PermanentError as exc:
        await _db(run_fail)(run_id=plan.run_id, error=str(exc))
        return
    limiter = _limiter(plan)
    stop = asyncio.Event()
    ledger: list[tuple[int, int, int]] = []
    bill = _db(items_bill)

    async def bill_received() -> None:
        if ledger:
            received = ledger[:]
            ledger.clear()  # no await in between: nothing is counted twice or dropped
            await bill(received=received, plan=plan)

    await _db(items_heartbeat)(token=token, run_id=plan.run_id)
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
                if not await _db(open_items_exist)(run_id=plan.run_id):
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
                    await _db(run_fail)(run_id=plan.run_id, error=outcome.error)
                    stop.set()
                elif outcome.release:
                    await _db(items_release)(token=token, item_ids=[item.id], error=outcome.error)
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
        await _db(items_release)(token=token)
        await client.close()
        if isinstance(limiter, RedisRateLimiter):
            await limiter.aclose()


async def _watch(run_id: int, token: str, stop: asyncio.Event) -> None:
    """Stop the loop when the run leaves "running"; keep this loop's claims alive."""
    heartbeat_every = max(1.0, claims.LEASE_SECONDS / 4)
    last_beat = time.monotonic()
    while not stop.is_set():
        if await _db(run_status)(run_id=run_id) != Run.Status.RUNNING:
            stop.set()
            return
        if time.monotonic() - last_beat >= heartbeat_every:
            await _db(items_heartbeat)(token=token, run_id=run_id)
            last_beat = time.monotonic()
        try:
            await asyncio.wait_for(stop.wait(), timeout=WATCH_SECONDS)
        except TimeoutError:
            pass


async def _process(
    plan: RunPlan,
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
    except LimiterUnavailable as exc:
        # The platform's own Redis, not the item, failed (after the client's retries): as after
        # a 429, the item goes back to the queue and is asked again, never failed for it.
        outcome.error, outcome.release = str(exc), True
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
    plan: RunPlan,
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
    plan: RunPlan,
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
    limit = plan.max_tokens or JUDGE_MAX_TOKENS
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
            max_tokens=limit,
            json_mode=plan.json_mode,
            schema=plan.output_schema,
        )
        outcome.add(completion)
        outcome.raw_output = completion.text
        parse = parse_judge_output(completion.text, names, plan.scale)
        reason = (
            cut_off_reason(completion=completion, limit=limit, detail=parse.error) or parse.error
        )
        if reason is None:
            outcome.parse, outcome.error = parse, ""
            return
        problems.append(f"attempt {ask}: {reason}")
        limit = reask_limit(reason=reason, limit=limit, base=plan.max_tokens or JUDGE_MAX_TOKENS)
    outcome.error = "no valid judge output; " + "; ".join(problems)
    problems.clear()  # the error says it all


def cut_off_reason(
    *, completion: providers.Completion, limit: int | None, detail: str | None = None
) -> str | None:
    """Why an answer the provider stopped at the token limit is no answer (None otherwise),
    with what the parser said of it where it said something (`detail`).

    Whatever a parser could read from the part that came (every score may be there, the
    explanation cut), the judge did not finish: taking it would be a guess at what it meant.
    """
    if not completion.truncated:
        return None
    at = f"{limit} tokens, " if limit else ""
    reason = f"{CUT_OFF} ({at}finish reason {completion.raw_finish_reason})"
    detail = (detail or "").removeprefix(CUT_OFF).lstrip(": ")
    return f"{reason}: {detail}" if detail else reason


def reask_limit(*, reason: str, limit: int, base: int) -> int:
    """The token limit for the re-ask: doubled after a cut-off answer, up to
    CUT_OFF_MAX_TOKENS_FACTOR × the run's own limit; unchanged after any other problem.

    ``reason`` is why the answer was refused. A cut-off answer is one the provider said it cut
    (cut_off_reason) *or* one whose JSON never closes though the provider said it stopped
    (scoring.parsing): both start with CUT_OFF, and both need more room, not the same again."""
    if not reason.startswith(CUT_OFF):
        return limit
    return min(limit * 2, base * CUT_OFF_MAX_TOKENS_FACTOR)


async def _label(
    plan: RunPlan,
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
    limit = plan.max_tokens or LABELLING_MAX_TOKENS
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
            max_tokens=limit,
            json_mode=False,  # Appendix D asks for a plain comma-separated list
            schema=plan.output_schema,  # sent only when the endpoint turned it on
        )
        outcome.add(completion)
        outcome.raw_output = completion.text
        parse = parse_label_output(completion.text, plan.labels, scheme=plan.scheme)
        reason = (
            cut_off_reason(completion=completion, limit=limit, detail=parse.error) or parse.error
        )
        if reason is None:
            outcome.label_parse, outcome.error = parse, ""
            return
        problems.append(f"attempt {ask}: {reason}")
        limit = reask_limit(
            reason=reason, limit=limit, base=plan.max_tokens or LABELLING_MAX_TOKENS
        )
    outcome.error = "no valid label output; " + "; ".join(problems)
    problems.clear()


async def _generate(
    plan: RunPlan, system: str, user: str, client: Any, limiter: Any, outcome: Outcome
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
    generation_outcome(plan=plan, completion=completion, outcome=outcome)


def generation_outcome(
    *, plan: RunPlan, completion: providers.Completion, outcome: Outcome
) -> None:
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


def _work_offline(plan: RunPlan, *, model: str, options: dict[str, Any]) -> None:
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
        generation_outcome(plan=plan, completion=completion, outcome=outcome)
        results.append((item, outcome))
    plan.store(results, token)


def close_connections() -> None:
    """For worker signal handlers that touch the database before forking."""
    connection.close()
