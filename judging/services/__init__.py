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

The package is split along those seams; callers import the names below from `judging.services`
and anything else from the module that defines it:
- `launch`: endpoints, creating runs, the admin's actions (cancel, resume, retry, finalize) and
  the sweeper;
- `claims`: the claim/lease protocol (claim, heartbeat, bill, release);
- `storage`: storing outcomes exactly once;
- `engine`: the work loop (asyncio over HTTP, or one offline vLLM batch);
- `batch`: batch mode (submit, poll, store, cancel through the providers' batch interfaces);
- `costs`: what a run would cost, estimated before it is launched;
- `prices`: an endpoint's prices (its own, else the dated list prices), "unknown" never 0;
- `endpoints`: endpoints as the admin manages them (save, enable/disable, connection test).
Patch a module attribute where it is read (e.g. `judging.services.engine.RETRY_BASE_DELAY`,
`judging.services.claims.LEASE_SECONDS`), not on this package.
"""

from .claims import LEASE_SECONDS, items_bill, items_claim
from .engine import RunPlan, close_connections, item_messages, run_work
from .launch import (
    LOCAL_ENDPOINT_NAME,
    LOCAL_STRUCTURED_ENDPOINT_NAME,
    TEMPERATURE_ZERO_REFUSED,
    RunError,
    endpoint_config,
    generation_run_create,
    generation_runs_create,
    judge_rater_for_endpoint,
    judge_run_create,
    judge_targets,
    labelling_run_create,
    local_endpoints_register,
    run_cancel,
    run_finalize,
    run_resume,
    run_retry_failures,
    run_sweep,
    runs_sweep,
    text_policy_refusal,
)
from .storage import (
    Outcome,
    judge_item_store,
    judge_items_store,
    labelling_items_store,
)

__all__ = [
    "LEASE_SECONDS",
    "LOCAL_ENDPOINT_NAME",
    "LOCAL_STRUCTURED_ENDPOINT_NAME",
    "TEMPERATURE_ZERO_REFUSED",
    "Outcome",
    "RunError",
    "RunPlan",
    "close_connections",
    "endpoint_config",
    "generation_run_create",
    "generation_runs_create",
    "item_messages",
    "items_bill",
    "items_claim",
    "judge_item_store",
    "judge_items_store",
    "judge_rater_for_endpoint",
    "judge_run_create",
    "judge_targets",
    "labelling_items_store",
    "labelling_run_create",
    "local_endpoints_register",
    "run_cancel",
    "run_finalize",
    "run_resume",
    "run_retry_failures",
    "run_sweep",
    "run_work",
    "runs_sweep",
    "text_policy_refusal",
]
