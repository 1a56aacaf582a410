"""Background jobs on real Celery workers, on Redis and on the folder broker of `bin/up`: the
progress bar moves while a κ_F1 of 10,000 simulations runs, a cancel stops the worker's
computation, a release comes back as a zip whose checksums verify."""

from __future__ import annotations

import io
import os
import time
import zipfile
from pathlib import Path

import pytest
from django.db import transaction

from analysis.jobs.kinds import release_params
from analysis.jobs.services import job_cancel, job_digest, job_start
from analysis.models import Job
from analysis.release import checksums_verify
from tests.celery_workers import Worker, wait_for
from tests.factories import small_study_make

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _predictions(rows: int) -> bytes:
    labels = ["anxiety", "depression", "stress", "none", "other"]
    lines = ["true,predicted"]
    lines += [f"{labels[i % 5]},{labels[(i * 7 // 3) % 5]}" for i in range(rows)]
    return ("\n".join(lines) + "\n").encode()


def _kappa_job(owner, *, rows: int, n_sim: int, seed: int = 0) -> Job:
    data = _predictions(rows)
    params = {"kind": None, "labels": None, "n_sim": n_sim, "seed": seed, "file_name": "p.csv"}
    with transaction.atomic():
        job, created = job_start(
            owner=owner,
            kind=Job.Kind.KAPPA_F1,
            params=params,
            digest=job_digest(kind=Job.Kind.KAPPA_F1, params=params, inputs=[data]),
            upload=io.BytesIO(data),
            upload_name="predictions.csv",
        )
    assert created
    return job


def _state(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def test_the_progress_bar_moves_and_a_cancel_stops_the_worker(celery_worker_factory, researcher):
    celery_worker_factory()
    job = _kappa_job(researcher, rows=20_000, n_sim=10_000)
    seen: list[float] = []
    deadline = time.monotonic() + 240
    while _state(job) != Job.State.DONE and time.monotonic() < deadline:
        assert job.state in (Job.State.QUEUED, Job.State.RUNNING), job.error
        if job.state == Job.State.RUNNING and (not seen or job.fraction != seen[-1]):
            seen.append(job.fraction)
        time.sleep(0.2)
    assert job.state == Job.State.DONE, job.error
    assert job.result is not None and job.result["n_sim"] == 10_000
    moving = [f for f in seen if 0 < f < 1]
    assert len(moving) >= 3 and moving == sorted(moving), seen

    other = _kappa_job(researcher, rows=20_000, n_sim=10_000, seed=1)
    wait_for(lambda: (_state(other), other.fraction)[1] > 0.15, timeout=120, what="progress")
    assert job_cancel(job=other)
    time.sleep(3)  # the worker notices within a report (0.5 s) and stops
    other.refresh_from_db()
    assert other.state == Job.State.CANCELLED and other.result is None
    stopped_at = other.heartbeat_at
    time.sleep(1.5)
    other.refresh_from_db()
    assert other.heartbeat_at == stopped_at  # nothing reports on it any more

    # The worker is free again: a small job runs at once.
    small = _kappa_job(researcher, rows=10, n_sim=10)
    wait_for(lambda: _state(small) == Job.State.DONE, timeout=60, what="the small job")


def _release_on(researcher, tmp_path: Path) -> None:
    study = small_study_make().study
    params = release_params(study=study, include_text=True)
    with transaction.atomic():
        job, _ = job_start(
            owner=researcher,
            kind=Job.Kind.RELEASE,
            params=params,
            digest=job_digest(kind=Job.Kind.RELEASE, params=params),
            study=study,
        )
    wait_for(lambda: _state(job) in (Job.State.DONE, Job.State.FAILED), timeout=120, what="job")
    assert job.state == Job.State.DONE, job.error
    with job.result_file.open("rb") as handle, zipfile.ZipFile(handle) as archive:
        archive.extractall(tmp_path / "release")
    assert checksums_verify(tmp_path / "release") == []


def test_a_release_job_on_a_redis_worker(celery_worker_factory, researcher, tmp_path):
    celery_worker_factory()
    _release_on(researcher, tmp_path)


def test_a_release_job_on_the_folder_broker(transactional_db, researcher, tmp_path, settings):
    """bin/up without Redis: the broker is a folder; the job runs all the same."""
    from mentalbench.celery import app

    folder = tmp_path / "broker"
    options = {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "processed_folder": str(folder / "processed"),
        "store_processed": True,
        "control_folder": str(folder / "control"),
        "polling_interval": 0.2,
    }
    for key in ("data_folder_in", "processed_folder", "control_folder"):
        Path(options[key]).mkdir(parents=True, exist_ok=True)
    database = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": (
            f"postgres://{database['USER'] or 'postgres'}@{database['HOST'] or '127.0.0.1'}:"
            f"{database['PORT'] or 5432}/{database['NAME']}"
        ),
        "REDIS_URL": "",
        "CELERY_BROKER_DIR": str(folder),
        "DB_CONN_MAX_AGE": "0",
        "PYTHONUNBUFFERED": "1",
    }
    saved = (app.conf.broker_url, app.conf.broker_transport_options)
    app.conf.broker_url = "filesystem://"
    app.conf.broker_transport_options = options
    app._pool = None
    app.amqp._producer_pool = None
    worker = Worker(env, tmp_path / "worker.log").start()
    try:
        _release_on(researcher, tmp_path)
    finally:
        worker.stop()
        app.conf.broker_url, app.conf.broker_transport_options = saved
        app._pool = None
        app.amqp._producer_pool = None


def _niceness(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def test_the_processes_that_run_jobs_yield_the_cpu_to_the_web(celery_worker_factory):
    """A job's computation runs below the web server's CPU priority (settings.WORKER_NICE)
    and at the idle scheduling policy (settings.WORKER_IDLE_SCHEDULING), the worker's main
    process (the broker's side) at its own."""
    from django.conf import settings

    worker = celery_worker_factory(concurrency=2, idle_scheduling=True)
    assert worker.process is not None
    main = worker.process.pid
    children = Path(f"/proc/{main}/task/{main}/children")
    wait_for(lambda: len(children.read_text().split()) == 2, timeout=60, what="the pool")
    expected = min(_niceness(main) + settings.WORKER_NICE, 19)
    wait_for(
        lambda: all(_niceness(int(pid)) == expected for pid in children.read_text().split()),
        timeout=30,
        what=f"the pool's processes at nice {expected}",
    )
    assert settings.WORKER_NICE == 10 and _niceness(main) == _niceness(os.getpid())
    pool = [int(pid) for pid in children.read_text().split()]
    assert settings.WORKER_IDLE_SCHEDULING is True
    assert [os.sched_getscheduler(pid) for pid in pool] == [os.SCHED_IDLE] * 2
    assert os.sched_getscheduler(main) == os.sched_getscheduler(os.getpid())
