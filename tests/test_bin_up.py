"""bin/up stops everything it started: Celery worker, beat (or the in-process sweeper), gunicorn.

The real script runs in a scratch copy of the repository whose .venv holds stand-ins for python,
celery and gunicorn: each stand-in is a long-running process with a child of its own (as Celery's
pool and gunicorn's workers are) and writes down its pids. What is tested is bin/up's process
lifetime: nothing of what it started may outlive it, however it is stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SERVICE = """#!/usr/bin/env bash
# A long-running service with a child process. STUB_IGNORE_TERM: both ignore SIGTERM (a Celery
# worker in warm shutdown waiting for a long task).
[ -n "${STUB_IGNORE_TERM:-}" ] && trap '' TERM
sleep 1000 &
echo "$! $1-child" >>"$STUB_PIDS"
echo "$$ $1" >>"$STUB_PIDS"
if [ "$1" = gunicorn ] && [ -n "${STUB_GUNICORN_EXITS:-}" ]; then sleep 1; exit 3; fi
while :; do wait; done
"""
PYTHON = """#!/usr/bin/env bash
case "$*" in
  *"manage.py sweep_runs"*) exec "$STUB_DIR/service" sweeper ;;
  "-c "*) echo stub ;;
esac
exit 0
"""
CELERY = """#!/usr/bin/env bash
exec "$STUB_DIR/service" "celery-$3"
"""
GUNICORN = """#!/usr/bin/env bash
exec "$STUB_DIR/service" gunicorn
"""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _pids(pids_file: Path) -> dict[str, int]:
    if not pids_file.exists():
        return {}
    return {
        name: int(pid)
        for pid, name in (line.split() for line in pids_file.read_text().splitlines() if line)
    }


def _wait_for(condition, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


@pytest.fixture
def bin_up(tmp_path: Path):
    _write(tmp_path / "bin" / "up", (ROOT / "bin" / "up").read_text())
    _write(tmp_path / ".venv" / "bin" / "python", PYTHON)
    _write(tmp_path / ".venv" / "bin" / "celery", CELERY)
    _write(tmp_path / ".venv" / "bin" / "gunicorn", GUNICORN)
    _write(tmp_path / "service", SERVICE)
    pids_file = tmp_path / "pids"
    started: list[subprocess.Popen] = []

    def start(**env: str) -> tuple[subprocess.Popen, Path]:
        environment = {
            "PATH": os.environ["PATH"],
            "STUB_DIR": str(tmp_path),
            "STUB_PIDS": str(pids_file),
            **env,
        }
        process = subprocess.Popen(
            ["bash", str(tmp_path / "bin" / "up")],
            cwd=tmp_path,
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        started.append(process)
        return process, pids_file

    yield start
    for process in started:  # a failed test must not leave stand-ins behind either
        if process.poll() is None:
            process.kill()
    for pid in _pids(pids_file).values():
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


EXPECTED_WITH_REDIS = {
    "celery-worker",
    "celery-worker-child",
    "celery-beat",
    "celery-beat-child",
    "gunicorn",
    "gunicorn-child",
}
EXPECTED_EMBEDDED = {"sweeper", "sweeper-child", "gunicorn", "gunicorn-child"}


@pytest.mark.parametrize(
    ("env", "expected", "stop_signal"),
    [
        ({"REDIS_URL": "redis://stub:6379/0"}, EXPECTED_WITH_REDIS, signal.SIGTERM),
        ({"REDIS_URL": "redis://stub:6379/0"}, EXPECTED_WITH_REDIS, signal.SIGINT),
        ({}, EXPECTED_EMBEDDED, signal.SIGTERM),
    ],
)
def test_stopping_bin_up_stops_every_process_it_started(bin_up, env, expected, stop_signal):
    process, pids_file = bin_up(**env)
    _wait_for(lambda: set(_pids(pids_file)) == expected, timeout=20, what="every service")
    pids = _pids(pids_file)
    assert all(_alive(pid) for pid in pids.values())
    process.send_signal(stop_signal)  # what Ctrl-C, systemd or docker stop do
    process.wait(timeout=20)
    _wait_for(
        lambda: not any(_alive(pid) for pid in pids.values()),
        timeout=5,
        what="no process of bin/up's to remain",
    )


def test_a_process_that_ignores_sigterm_is_killed_after_the_stop_timeout(bin_up):
    process, pids_file = bin_up(
        REDIS_URL="redis://stub:6379/0", STUB_IGNORE_TERM="1", STOP_TIMEOUT="1"
    )
    _wait_for(lambda: set(_pids(pids_file)) == EXPECTED_WITH_REDIS, timeout=20, what="services")
    pids = _pids(pids_file)
    process.terminate()
    process.wait(timeout=20)
    assert not any(_alive(pid) for pid in pids.values())


def test_when_the_web_server_ends_bin_up_stops_the_rest_and_fails(bin_up):
    process, pids_file = bin_up(REDIS_URL="redis://stub:6379/0", STUB_GUNICORN_EXITS="1")
    assert process.wait(timeout=30) == 3  # gunicorn's exit status
    pids = _pids(pids_file)
    assert set(pids) == EXPECTED_WITH_REDIS
    _wait_for(
        lambda: not any(_alive(pid) for pid in pids.values()),
        timeout=5,
        what="no process of bin/up's to remain",
    )
