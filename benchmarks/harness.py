"""What every benchmark shares: a throwaway database, a free port, timing beside a floor, the load.

The benchmark database: every script makes its databases on the PostgreSQL server that
DATABASE_URL points at (the URL's database name is replaced by the script's own, which `--db`
changes). Scripts that read a study already imported read DATABASE_URL's database itself.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432/postgres"


# --- databases ---------------------------------------------------------------------------------


def add_database_argument(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--db",
        default=default,
        help=f"benchmark database, made on DATABASE_URL's server ({default})",
    )


def database_url(name: str) -> str:
    """DATABASE_URL with its database name replaced by `name`."""
    base = os.environ.get("DATABASE_URL", DEFAULT_SERVER)
    return base.rsplit("/", 1)[0] + "/" + name


def database_env(name: str) -> dict[str, str]:
    """The environment of a process that works on database `name`."""
    return {**os.environ, "DATABASE_URL": database_url(name)}


def fresh_database(name: str, *, migrate: bool = True) -> None:
    """Drop database `name` (closing its connections), create it and migrate it (unless told
    not to)."""
    import psycopg

    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    if migrate:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0", "--skip-checks"],
            cwd=ROOT, env=database_env(name), check=True,
        )  # fmt: skip


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def psql(database: str, sql: str) -> None:
    """Run `sql` on database `database` through psql (stops at the first error)."""
    subprocess.run(
        ["psql", "-q", "-X", "-v", "ON_ERROR_STOP=1", database_url(database), "-c", sql],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def mentalalign_data() -> Path:
    """The released MentalAlign-70k workbooks: $MENTALBENCH_SHARED/data/mentalalign70k."""
    shared = Path(os.environ.get("MENTALBENCH_SHARED", ROOT.parent / "shared"))
    return shared / "data" / "mentalalign70k"


def bench_redis_url() -> str:
    """The Redis database a benchmark may flush: $BENCH_REDIS_URL, by default db 13 on localhost."""
    return os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")


def django_setup(**env: str) -> None:
    """Set `env` in this process's environment, then start Django on the project's settings."""
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mentalbench.settings")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


# --- processes and ports -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_for_port(port: int, *, timeout: float = 15, what: str = "a server") -> None:
    wait_until(lambda: _port_open(port), timeout=timeout, what=f"{what} on port {port}")


def wait_for_healthz(base: str, *, timeout: float = 30) -> None:
    """Wait until the platform served at `base` (e.g. gunicorn just started) answers /healthz."""
    import httpx

    def healthy() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, timeout=timeout, what=f"{base}/healthz")


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process (all its threads) has used so far, from /proc: a figure other
    load on a shared machine does not inflate, unlike wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_with_peak_rss(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of a command in a fresh child process."""
    code = (
        "import resource, subprocess, sys, time;"
        "t=time.perf_counter();"
        f"subprocess.run({argv!r}, check=True, stdout=subprocess.DEVNULL);"
        "w=time.perf_counter()-t;"
        "print(w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    wall, rss = done.stdout.split()
    return float(wall), float(rss)


# --- timing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Wall seconds of several runs of one thing."""

    runs: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    def __str__(self) -> str:
        runs = ", ".join(f"{t:.3g}" for t in self.runs)
        return f"median {self.median:.3g} s (runs {runs})"


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_of(fn: Callable[[], object], runs: int) -> Timing:
    return Timing([seconds(fn) for _ in range(runs)])


def beside_floor(
    fn: Callable[[], object], floor: Callable[[], object], runs: int
) -> tuple[Timing, Timing, float]:
    """`fn` and its floor (or peer), alternated run by run so that other load on the machine falls
    on both alike; returns both timings and the ratio of their medians."""
    measured, floors = [], []
    for _ in range(runs):
        measured.append(seconds(fn))
        floors.append(seconds(floor))
    timing, floor_timing = Timing(measured), Timing(floors)
    return timing, floor_timing, timing.median / floor_timing.median


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def load() -> str:
    """The machine's load average (1, 5, 15 min) and its cores, to print beside every figure."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"
