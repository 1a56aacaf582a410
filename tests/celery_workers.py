"""Real Celery workers for tests: a `celery worker` (or beat) subprocess on the test database and
a Redis database of the test process's own, and waiting for what they do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

from tests.conftest import worker_redis_url

WORKER_REDIS_URL = worker_redis_url(
    os.environ.get("TEST_WORKER_REDIS_URL", "redis://127.0.0.1:6379/14")
)
ROOT = Path(__file__).resolve().parents[1]


def flush(url: str) -> None:
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


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
