"""Celery tasks: thin, idempotent, JSON arguments only; the work is in judging.services.

No Celery-level retries: LLM retries happen in providers.complete_with_retries, and a task that
dies is recovered from the database (stale claims), not by redelivery counting.
"""

from celery import shared_task
from celery.signals import worker_ready

from . import services
from .models import Run


@shared_task(ignore_result=True)
def run_work(run_id: int) -> None:
    """Work on a run until it has nothing left; any number of these may run at once."""
    services.run_work(run_id=run_id)


@worker_ready.connect
def resume_active_runs(**_: object) -> None:
    """A worker that starts picks up runs left running by workers that died.

    Their unacknowledged messages only come back after the broker's visibility timeout (an
    hour), so the new worker enqueues fresh tasks; claims make extra tasks harmless.
    """
    try:
        for run_id, count in Run.objects.filter(status=Run.Status.RUNNING).values_list(
            "id", "parallel_tasks"
        ):
            for _ in range(count):
                run_work.delay(run_id)
    finally:
        # This runs in the parent process before it forks pool children.
        services.close_connections()
