import os
from datetime import timedelta
from pathlib import Path

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mentalbench.settings")

app = Celery("mentalbench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def lower_priority(**_: object) -> None:
    """Each process that runs tasks (a prefork pool's child) lowers its CPU priority by
    settings.WORKER_NICE, so that on cores shared with gunicorn the web's requests run first
    and a release or a κ_F1 job takes the time they leave. Lowering needs no privilege; a
    process can never raise it again, which is why the worker's main process (the one talking
    to the broker) keeps its own.

    With settings.WORKER_IDLE_SCHEDULING (Linux) the process also moves to the SCHED_IDLE
    policy: a nice value only shrinks a process's share, and a waking web worker may still wait
    a scheduler slice for the core a job holds; an idle-policy process is preempted at once and
    runs only on time no normal process wants. That waiting is what an autosave's p95 measures."""
    from django.conf import settings

    if settings.WORKER_NICE:
        os.nice(settings.WORKER_NICE)
    if settings.WORKER_IDLE_SCHEDULING and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


@app.on_after_configure.connect
def _broker_folders(sender: Celery, **_: object) -> None:
    """Without Redis the broker is a folder (settings): kombu creates none of its folders, and
    the first launch must not fail because no worker has run yet."""
    if sender.conf.broker_url != "filesystem://":
        return
    options = sender.conf.broker_transport_options
    for key in ("data_folder_in", "processed_folder", "control_folder"):
        Path(options[key]).mkdir(parents=True, exist_ok=True)


@app.on_after_configure.connect
def _beat_schedule(sender: Celery, **_: object) -> None:
    """The periodic tasks `celery -A mentalbench beat` sends (bin/up and the compose stack run it).

    The run sweeper finds runs whose workers died (running, cancelling or finishing) and moves
    them on; the outbox sweep sends due webhook deliveries; the jobs sweeper deletes expired job
    results. A sweep that waits longer than its own period is dropped (`expires`): the next one
    does the same work, so they never pile up behind workers busy with long runs.
    """
    from django.conf import settings

    every = timedelta(seconds=settings.JUDGING_SWEEP_SECONDS)
    sender.add_periodic_task(
        every,
        sender.signature("judging.tasks.runs_sweep"),
        name="judging: sweep runs whose workers are gone",
        expires=every.total_seconds(),
    )
    remind = timedelta(seconds=settings.MAIL_REMINDER_CHECK_SECONDS)
    sender.add_periodic_task(
        remind,
        sender.signature("annotation.tasks.reminders_send"),
        name="annotation: e-mail reminders (paused work, deadlines) and the leads' digests",
        expires=remind.total_seconds(),
    )
    poll = timedelta(seconds=settings.JUDGING_BATCH_POLL_SECONDS)
    sender.add_periodic_task(
        poll,
        sender.signature("judging.tasks.batches_poll"),
        name="judging: poll provider batches of batch-mode runs",
        expires=poll.total_seconds(),
    )
    outbox = timedelta(seconds=settings.WEBHOOK_POLL_SECONDS)
    sender.add_periodic_task(
        outbox,
        sender.signature("annotation.tasks.webhooks_deliver_due"),
        name="annotation: send due webhook deliveries (retries, lost tasks)",
        expires=outbox.total_seconds(),
    )
    jobs = timedelta(seconds=60)
    sender.add_periodic_task(
        jobs,
        sender.signature("analysis.tasks.jobs_sweep"),
        name="analysis: delete expired job results, fail jobs whose worker is gone",
        expires=jobs.total_seconds(),
    )
