"""Fixtures for run tests: a study with responses, fake LLM servers, endpoints, a Celery worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import worker_redis_url
from tests.factories import ENDPOINT_API_KEY, case_context, case_reply, endpoint_make, study_make
from tests.fakes.llm_server import FakeLLMServer

API_KEY = ENDPOINT_API_KEY
WORKER_REDIS_URL = worker_redis_url(
    os.environ.get("TEST_WORKER_REDIS_URL", "redis://127.0.0.1:6379/14")
)
LIMITER_REDIS_URL = worker_redis_url(os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15"))
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _limiter_redis_db(request: pytest.FixtureRequest) -> None:
    if not request.config.pluginmanager.hasplugin("django"):
        return  # the provider tests run with -p no:django: no settings, no run services
    # Rate-limit keys of in-process runs go to the test Redis db, never to db 0.
    request.getfixturevalue("settings").JUDGING_RATELIMIT_REDIS_URL = LIMITER_REDIS_URL


@pytest.fixture(autouse=True)
def _fast_retries(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if not request.config.pluginmanager.hasplugin("django"):
        return
    from judging.services import engine

    monkeypatch.setattr(engine, "RETRY_BASE_DELAY", 0.01)


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Tasks run inside the test process at commit (Celery eager): a launched run executes
    inside the web request. Asked for explicitly."""
    from mentalbench.celery import app

    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = saved


@pytest.fixture(scope="session")
def fake_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def study(db):
    return study_make(
        name="Run test study",
        conversations=3,
        responders=("gpt4o", "llama_3"),
        context=case_context,
        text=case_reply,
    )


@pytest.fixture
def endpoint_factory(db, fake_llm: FakeLLMServer) -> Callable:
    """endpoint_make on the session's fake server (its Anthropic URL for provider="anthropic")."""

    def make(provider: str = "openai", **overrides):
        base_url = (
            fake_llm.anthropic_base_url if provider == "anthropic" else fake_llm.openai_base_url
        )
        return endpoint_make(**{"base_url": base_url, "provider": provider, **overrides})

    return make


# ------------------------------------------------------------------------------ Celery worker


def _flush(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


class Worker:
    """A real `celery worker` (or, with beat=True, `celery beat`) subprocess on the test database
    and the test process's WORKER_REDIS_URL."""

    def __init__(
        self,
        env: dict[str, str],
        log: Path,
        *,
        concurrency: int = 2,
        beat: bool = False,
        queues: str = "",
    ) -> None:
        self.env, self.log = env, log
        self.concurrency, self.beat, self.queues = concurrency, beat, queues
        self.process: subprocess.Popen | None = None

    def start(self) -> Worker:
        handle = self.log.open("ab")
        if self.beat:
            schedule = self.log.with_suffix(".schedule")
            command = ["beat", "--loglevel=INFO", f"--schedule={schedule}"]
        else:
            command = [
                "worker",
                "-P",
                "prefork",
                "-c",
                str(self.concurrency),
                "--loglevel=INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ]
            if self.queues:  # as bin/up and docker compose start them: one queue each
                command += ["-Q", self.queues, "-n", f"{self.queues}-{uuid.uuid4().hex[:6]}@%h"]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "mentalbench", *command],
            cwd=ROOT,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: SIGKILL reaches the pool children
        )
        return self

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()  # warm shutdown: the parent lets running tasks finish
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def celery_worker_factory(transactional_db, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start real workers; the test process sends its tasks to the same Redis db."""
    from django.conf import settings

    from mentalbench.celery import app

    _flush(WORKER_REDIS_URL)
    database = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": (
            f"postgres://{database['USER'] or 'postgres'}@{database['HOST'] or '127.0.0.1'}:"
            f"{database['PORT'] or 5432}/{database['NAME']}"
        ),
        "REDIS_URL": WORKER_REDIS_URL,
        "JUDGING_RATELIMIT_REDIS_URL": WORKER_REDIS_URL,
        "JUDGING_LEASE_SECONDS": "4",
        "JUDGING_SWEEP_SECONDS": "1",
        "DB_CONN_MAX_AGE": "0",
        "PYTHONUNBUFFERED": "1",
    }
    saved = app.conf.broker_url
    app.conf.broker_url = WORKER_REDIS_URL
    app._pool = None  # connection pools are built from broker_url on first use
    app.amqp._producer_pool = None
    workers: list[Worker] = []

    def start(
        log_name: str = "worker.log", *, concurrency: int = 2, beat: bool = False, queues: str = ""
    ) -> Worker:
        """A worker (of every queue unless `queues` names some), or beat."""
        worker = Worker(
            env, tmp_path / log_name, concurrency=concurrency, beat=beat, queues=queues
        ).start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()
    app.conf.broker_url = saved
    app._pool = None
    app.amqp._producer_pool = None
    _flush(WORKER_REDIS_URL)


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


# ------------------------------------------------------------------------------ a real model


@pytest.fixture(scope="session")
def local_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """One llama.cpp server with SmolLM2-135M for the whole session (2 threads, small context)."""
    from tests.local_llama import LocalLlama, require_local_model

    require_local_model()
    # LOCAL_MODEL_THREADS=1 on a machine whose cores are busy: llama.cpp's threads spin-wait
    # for each other, and two of them on oversubscribed cores run several times slower than one.
    threads = int(os.environ.get("LOCAL_MODEL_THREADS", "2"))
    log = tmp_path_factory.mktemp("llama") / "server.log"
    server = LocalLlama(log=log, threads=threads).start()
    yield server
    server.stop()
