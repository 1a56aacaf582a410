"""Celery tasks: thin, idempotent, JSON arguments only; the work is in judging.services.

No Celery-level retries: LLM retries happen in providers.complete_with_retries, and a task that
dies is recovered from the database (stale claims, the sweeper), not by redelivery counting.
"""

from celery import shared_task
from celery.signals import worker_ready

from . import services
from .services import batch


@shared_task(ignore_result=True)
def run_work(run_id: int) -> None:
    """Work on a run until it has nothing left; any number of these may run at once.

    Dies with its worker: the message is redelivered (acks_late) and, sooner, the sweeper sends
    fresh loops once the run's lease runs out; claims and the run's concurrency make any number
    of extra loops harmless.
    """
    services.run_work(run_id=run_id)


@shared_task(ignore_result=True)
def runs_sweep() -> None:
    """Periodic (Celery beat, see mentalbench/celery.py): move on runs whose workers are gone.

    Idempotent and cheap; a sweep that dies is simply done again by the next one, and the beat
    schedule lets an undelivered sweep expire rather than pile up behind busy workers.
    """
    services.runs_sweep()


@shared_task(ignore_result=True)
def batch_submit(run_id: int) -> None:
    """Send a batch-mode run's pending items to the provider (returns once they are created)."""
    batch.run_submit(run_id=run_id)


@shared_task(ignore_result=True)
def batches_poll() -> None:
    """Periodic (Celery beat): poll open provider batches, store results, submit re-asks.

    Each batch is leased by one poller at a time (its next poll time moves on first), and its
    results are stored exactly once whatever runs it twice; a poll that dies is done again.
    """
    batch.batches_poll(dispatch=batch_poll.delay)


@shared_task(ignore_result=True)
def batch_poll(batch_id: int) -> None:
    """Poll one provider batch and store its results once it ended; then move its run on."""
    batch.batch_poll_and_follow_up(batch_id=batch_id)


@shared_task(ignore_result=True)
def batch_cancel(run_id: int) -> None:
    """Cancel a cancelling batch-mode run's batches at the provider; polls store what came back."""
    batch.run_cancel_batches(run_id=run_id)


@worker_ready.connect
def resume_active_runs(**_: object) -> None:
    """A worker that starts sweeps once: runs whose workers died are moved on at once when
    their lease has already run out, and by the periodic sweeper otherwise.

    It does not send loops to every running run: with many workers (re)starting, each would add
    `parallel_tasks` loops to runs whose loops are alive elsewhere, and every extra loop holds a
    worker process for as long as the run lasts.
    """
    try:
        services.runs_sweep()
    finally:
        # This runs in the parent process before it forks pool children.
        services.close_connections()
