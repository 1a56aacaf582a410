"""Writes for LLM runs: launch, claim, call, store, cancel, retry, resume.

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

The package is split along those seams, and every name stays importable from `judging.services`:
- `launch`: endpoints, creating runs, the admin's actions (cancel, resume, retry, finalize) and
  the sweeper;
- `claims`: the claim/lease protocol (claim, heartbeat, bill, release);
- `storage`: storing outcomes exactly once;
- `engine`: the work loop (asyncio over HTTP, or one offline vLLM batch).
Patch a module attribute where it is read (e.g. `judging.services.engine.RETRY_BASE_DELAY`,
`judging.services.claims.LEASE_SECONDS`), not on this package.
"""

from annotation.selectors import study_distortion_labels, study_rubric  # noqa: F401
from scoring.label_parsing import parse_label_output  # noqa: F401
from scoring.parsing import parse_judge_output  # noqa: F401

from .. import prompts  # noqa: F401
from ..prompts import labelling_messages  # noqa: F401
from .claims import (  # noqa: F401
    LEASE_SECONDS,
    MAX_CLAIMS,
    _open_items_exist,
    _run_status,
    _stale_before,
    items_bill,
    items_claim,
    items_heartbeat,
    items_release,
)
from .engine import (  # noqa: F401
    ENDPOINT_BROKEN_STATUSES,
    JUDGE_MAX_TOKENS,
    MAX_HTTP_ATTEMPTS,
    RETRY_BASE_DELAY,
    UNLIMITED_RATE,
    WATCH_SECONDS,
    _call,
    _generate,
    _generation_outcome,
    _judge,
    _label,
    _limiter,
    _Plan,
    _process,
    _provider_failure,
    _watch,
    _work_async,
    _work_offline,
    close_connections,
    item_messages,
    run_work,
)
from .launch import (  # noqa: F401
    LABELLING_MAX_TOKENS,
    LABELLING_REPEATS,
    LOCAL_ENDPOINT_NAME,
    LOCAL_STRUCTURED_ENDPOINT_NAME,
    TEMPERATURE_ZERO_REFUSED,
    RunError,
    _check_numbers,
    _enqueue,
    _start,
    endpoint_config,
    generation_run_create,
    generation_runs_create,
    judge_rater_for_endpoint,
    judge_run_create,
    judge_targets,
    labelling_run_create,
    local_endpoints_register,
    responder_for_endpoint,
    run_cancel,
    run_fail,
    run_finalize,
    run_resume,
    run_retry_failures,
    run_sweep,
    runs_sweep,
)
from .storage import (  # noqa: F401
    Outcome,
    Result,
    _annotation_key,
    _annotations_insert,
    _items_finish,
    _rating_key,
    _ratings_insert,
    _store_once,
    generation_items_store,
    judge_item_store,
    judge_items_store,
    labelling_items_store,
)
