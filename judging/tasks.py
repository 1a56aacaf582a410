"""Celery tasks: thin, idempotent, JSON arguments only; the work is in judging.services.

No Celery-level retries: LLM retries happen in providers.complete_with_retries, and a task that
dies is recovered from the database (stale claims, the sweeper), not by redelivery counting.
"""

from celery import shared_task
from celery.signals import worker_ready

from . import services


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
