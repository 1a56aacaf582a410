"""Celery tasks of background jobs: thin, idempotent, JSON arguments only; the work is in
analysis.jobs.services."""

from celery import shared_task
from django.conf import settings

from analysis.jobs import services


@shared_task(  # type: ignore[untyped-decorator]  # celery ships no types
    ignore_result=True,
    soft_time_limit=settings.JOBS_TIME_LIMIT_SECONDS,
    time_limit=settings.JOBS_TIME_LIMIT_SECONDS + 60,
)
def job_run(job_id: str) -> None:
    """Run one queued job. Past the soft limit the job fails with a sentence saying so (the hard
    limit kills a computation that ignores it). Dies with its worker: the redelivered message
    finds the job running and does nothing; the sweeper fails it once it stops reporting, and
    the person starts it again (a job is never run twice unasked)."""
    services.job_execute(job_id=job_id)


@shared_task(ignore_result=True)  # type: ignore[untyped-decorator]
def jobs_sweep() -> None:
    """Periodic (Celery beat, mentalbench/celery.py): delete expired results, fail jobs whose
    worker is gone. Idempotent; a sweep that is lost is done by the next."""
    services.jobs_sweep()
