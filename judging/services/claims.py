"""The claim/lease protocol: a work loop claims items with a status-guarded, SKIP LOCKED update
stamped with its token, keeps them alive with heartbeats, bills what it received and releases
what it will not finish. A claim older than the lease belonged to a dead worker.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from ..models import Run, RunItem

if TYPE_CHECKING:
    from .engine import RunPlan


logger = logging.getLogger(__name__)

# A running item whose heartbeat is older than this belonged to a worker that died. Read from
# settings once; tests patch this attribute.
LEASE_SECONDS: float = settings.JUDGING_LEASE_SECONDS
# A worker that dies this many times on the same item (an item that crashes workers) gives up.
MAX_CLAIMS = 5


# ------------------------------------------------------------------------------ claiming


def stale_before() -> Any:
    """The moment before which a claim's heartbeat means its worker died (now − the lease)."""
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
    stale = stale_before()
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


def items_bill(
    *, received: Sequence[tuple[int, int, int]], plan: RunPlan, locked: bool = False
) -> None:
    """Count completions received (item id, input tokens, output tokens) on their items.

    Whether or not the result is ever stored: a loop that lost its claim, a cancelled item, a
    re-ask — the provider billed them all. Called by the loop within half a second of receiving
    (and when it stops), so only what arrived in that last moment before a SIGKILL goes uncounted.
    `locked`: the caller's transaction holds the items' row locks (a batch poller's store).
    """
    if not received:
        return
    rows = [
        (
            input_tokens,
            output_tokens,
            (input_tokens * plan.price_input + output_tokens * plan.price_output) / 1_000_000,
            item_id,
        )
        for item_id, input_tokens, output_tokens in received
    ]
    with connection.cursor() as cursor:
        if (
            locked
            and connection.vendor == "postgresql"
            and len({row[-1] for row in rows}) == len(rows)
        ):
            # One statement with the values as arrays, where the rows are already locked (so
            # the order the join updates them in cannot matter) and each item is billed once
            # (a join would apply only one of an item's completions).
            cursor.execute(
                f"UPDATE {RunItem._meta.db_table} AS item "
                "SET billed_completions = item.billed_completions + 1, "
                "billed_input_tokens = item.billed_input_tokens + v.input_tokens, "
                "billed_output_tokens = item.billed_output_tokens + v.output_tokens, "
                "billed_cost_usd = item.billed_cost_usd + v.cost_usd "
                "FROM unnest(%s::bigint[], %s::bigint[], %s::float8[], %s::bigint[]) "
                "AS v(input_tokens, output_tokens, cost_usd, id) WHERE item.id = v.id",
                [list(column) for column in zip(*rows, strict=True)],
            )
            return
        cursor.executemany(
            f"UPDATE {RunItem._meta.db_table} SET billed_completions = billed_completions + 1, "
            "billed_input_tokens = billed_input_tokens + %s, "
            "billed_output_tokens = billed_output_tokens + %s, "
            "billed_cost_usd = billed_cost_usd + %s WHERE id = %s",
            rows,
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


def run_status(*, run_id: int) -> str:
    """The run's status as stored now (a work loop looks for a cancel with it)."""
    return Run.objects.values_list("status", flat=True).get(id=run_id)


def open_items_exist(*, run_id: int) -> bool:
    """Whether any item of the run is still pending or running (work is left for a loop)."""
    return RunItem.objects.filter(
        run_id=run_id, status__in=[RunItem.Status.PENDING, RunItem.Status.RUNNING]
    ).exists()
