"""The embedded broker: what a launch pays to send a task, and how soon an idle worker starts it.

Two brokers that need no server: kombu's filesystem transport (a folder; no dependency) with the
embedded default's 0.2 s poll (and kombu's default 1 s, with BROKER_BENCH_POLL=1), and kombu's
SQLAlchemy transport over a SQLite file (needs SQLAlchemy, which the project does not otherwise
depend on; skipped when it is not importable; it can only poll every second).

A real `celery worker` (prefork, 1 process) runs a no-op task that writes down when it started;
the parent sends one task at a time and waits for it.

    python -m benchmarks.broker_bench [--tasks 50]

Prints one JSON line per broker: median and p95 of the send (the web request's share) and of
send → task start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from celery import Celery

from benchmarks.harness import ROOT, load

app = Celery("broker_bench")


def _configure() -> None:
    folder = Path(os.environ.get("BROKER_BENCH_DIR", tempfile.gettempdir()))
    if os.environ.get("BROKER_BENCH_KIND") == "sqlalchemy":
        app.conf.broker_url = f"sqla+sqlite:///{folder / 'broker.sqlite3'}"
        # Its transport options all go to SQLAlchemy's create_engine, which refuses a
        # polling_interval: it polls at kombu's default, every second.
        app.conf.broker_transport_options = {}
    else:
        for name in ("queue", "processed", "control"):
            (folder / name).mkdir(exist_ok=True)
        app.conf.broker_url = "filesystem://"
        app.conf.broker_transport_options = {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"),
            "store_processed": True,
            "control_folder": str(folder / "control"),
            "polling_interval": float(os.environ.get("BROKER_BENCH_POLL", "0.2")),
        }
    app.conf.task_acks_late = True
    app.conf.worker_prefetch_multiplier = 1


_configure()


@app.task(name="broker_bench.started")
def started(token: str) -> None:
    (Path(os.environ["BROKER_BENCH_DIR"]) / f"{token}.started").write_text(repr(time.time()))


def _measure(kind: str, tasks: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "BROKER_BENCH_DIR": folder, "BROKER_BENCH_KIND": kind}
        os.environ.update(BROKER_BENCH_DIR=folder, BROKER_BENCH_KIND=kind)
        _configure()
        app._pool = None  # connection pools are built from broker_url on first use
        app.amqp._producer_pool = None
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "benchmarks.broker_bench", "worker", "-c", "1"]
            + ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        sends, starts = [], []
        try:
            for index in range(tasks + 1):  # the first one waits for the worker to start
                token = f"t{index}"
                before = time.time()
                started.delay(token)
                sent = time.time()
                marker = Path(folder) / f"{token}.started"
                deadline = time.monotonic() + 60
                while not marker.exists() or not marker.read_text():
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{kind}: task {token} not started within 60 s")
                    time.sleep(0.005)
                if index:
                    sends.append(sent - before)
                    starts.append(float(marker.read_text()) - before)
        finally:
            worker.terminate()
            worker.wait(timeout=30)

    def ms(values: list[float], q: float) -> float:
        return round(1000 * statistics.quantiles(values, n=100)[int(q) - 1], 1)

    return {
        "broker": kind,
        "tasks": tasks,
        "send_ms_median": round(1000 * statistics.median(sends), 1),
        "send_ms_p95": ms(sends, 95),
        "start_ms_median": round(1000 * statistics.median(starts), 1),
        "start_ms_p95": ms(starts, 95),
        "load": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50)
    args = parser.parse_args()
    kinds = ["filesystem"]
    try:
        import sqlalchemy  # noqa: F401
    except ImportError:
        print("sqlalchemy not importable: the SQLAlchemy transport is not measured", flush=True)
    else:
        kinds.append("sqlalchemy")
    for kind in kinds:
        print(json.dumps(_measure(kind, args.tasks)), flush=True)


if __name__ == "__main__":
    main()
