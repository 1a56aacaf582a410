"""PostgreSQL and Redis restarting under a running study lose nothing (benchmarks/infra_faults.py).

The script starts a PostgreSQL and a Redis of its own (temporary directory, free ports) and
restarts those; the servers the rest of the suite uses are never touched.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.infra_faults import Redis
from judging.ratelimit import RedisRateLimiter

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    not shutil.which("redis-server") or not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")),
    reason="needs redis-server and PostgreSQL's server binaries (initdb, pg_ctl)",
)


def test_the_rate_limiter_waits_out_a_redis_restart(tmp_path):
    server = Redis(tmp_path)
    server.start()
    try:

        async def across_a_restart() -> None:
            limiter = RedisRateLimiter(redis=server.url, key="restart", rate=1000, burst=10)
            await limiter.acquire()
            await asyncio.to_thread(server.restart)  # the client's connection is gone now
            await limiter.acquire()  # reconnects instead of failing the item
            assert await limiter.paused_for() == 0.0
            await limiter.aclose()

        asyncio.run(across_a_restart())
    finally:
        server.stop()


@pytest.mark.slow
def test_restarting_postgres_and_redis_twice_each_loses_nothing():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.infra_faults", "--clinicians", "20", "--seconds", "40"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.stdout.strip().startswith("{"), done.stderr[-3000:]
    result = json.loads(done.stdout)
    print(json.dumps(result, indent=1))
    assert result["failures"] == [], result["failures"]
    assert done.returncode == 0
    assert result["restarts"] == {"postgres": 2, "redis": 2}
    saves = result["saves"]
    assert saves["acknowledged_saves"] > 300  # 20 clinicians saved all along
    assert saves["lost_or_wrong_final_values"] == saves["duplicate_ratings"] == 0
    assert saves["audit_changes_stored"] == saves["audit_changes_expected"]
    assert result["responses"].get("save 503", 0) > 0  # they saw "retrying" …
    assert not any(what.endswith(" 500") for what in result["responses"])  # … and never a 500
    for run in result["runs"].values():
        assert run["status"] == "done" and run["items_done"] == run["ratings"] == run["items"]
