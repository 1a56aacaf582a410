"""Infrastructure faults: PostgreSQL and Redis restart, twice each, under a running study.

The whole platform runs on a PostgreSQL and a Redis of its own (started here in a temporary
directory on free ports; the machine's shared servers are never touched): gunicorn, a Celery
worker for runs, one for the upkeep, and beat, as bin/up starts them. Meanwhile an immediate
judge run and a batch-mode judge run (fake LLM servers over real HTTP) are under way and N
clinicians autosave one score a second, each keeping unacknowledged edits in a journal and
sending them again, as the rating page's script does. PostgreSQL restarts (`pg_ctl restart -m
fast`), then Redis (SIGTERM: its append-only file is flushed), then each once more.

Afterwards it checks: every acknowledged save is stored with its value and nothing else
(benchmarks.load_autosave.verify), no rating twice; each run ended by itself, each item with one
result, and every answer the fake server delivered is billed in the database; clinicians got
503 "retrying" during the restarts and never a 500.

    .venv/bin/python -m benchmarks.infra_faults [--clinicians 20] [--seconds 50]

Prints one JSON object; exits 1 when a check fails. tests/test_infra_faults.py runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psycopg

from benchmarks.harness import ROOT, free_port, wait_for_healthz, wait_until

ENCRYPTION_KEY = "JW-EH4jSIWW4IXMVVDkF_I7Uat-Y_1_EVJ0yAAWJr9c="  # a throwaway for this run


class Postgres:
    """A private cluster: initdb in `folder`, trust authentication, on 127.0.0.1:`port`."""

    def __init__(self, folder: Path) -> None:
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not versions:
            raise SystemExit("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
        self.bin = versions[-1].parent
        self.data, self.port = folder / "pgdata", free_port()
        self.log = folder / "postgres.log"
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/mentalbench"

    def _run(self, *command: str) -> None:
        # The server refuses to run as root: as root, run it as the postgres account.
        # runuser lives in sbin, which a minimal PATH (a CI job's `env -i`) may leave out.
        runuser = shutil.which("runuser", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
        prefix = [runuser or "runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *command], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self.data.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres")
            shutil.chown(self.data.parent, "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8")  # fmt: skip
        self.start()
        with psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE mentalbench")

    def _ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        self._run(str(self.bin / "pg_ctl"), action, "-D", str(self.data), "-l", str(self.log),
                  "-w", "-o", options, *extra)  # fmt: skip

    def start(self) -> None:
        self._ctl("start")

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")  # what a restart does: clients are disconnected

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")


class Redis:
    """A private redis-server with its append-only file, as docker-compose.yml runs it."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.folder), "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
            stdout=(self.folder / "redis.log").open("ab"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_until(self._ping, timeout=20, what="redis-server")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: Redis flushes its append-only file and exits
            self.process.wait(timeout=30)

    def restart(self) -> None:
        self.stop()
        self.start()


class Clinician(threading.Thread):
    """Saves one score a second like the rating page: an edit stays in the journal (the page's
    localStorage) until the server acknowledges it, a 5xx or a dropped connection means "retrying",
    and the journal is sent again, oldest first, with each edit's own time."""

    def __init__(self, base: str, session: str, token: str, stop: threading.Event, seed: float):
        super().__init__(daemon=True)
        self.token, self.stop, self.rng = token, stop, random.Random(seed)
        self.client = httpx.Client(base_url=base, cookies={"sessionid": session}, timeout=20)
        self.journal: dict[tuple[str, int], tuple[int, int]] = {}  # field → (score, edited_ms)
        self.acked: list[tuple[str, int, int]] = []
        self.statuses: dict[str, int] = {}  # "page 200", "save 503", "save connection", …
        self.refused: list[str] = []

    def _count(self, what: str) -> None:
        self.statuses[what] = self.statuses.get(what, 0) + 1

    def load_page(self) -> list[tuple[str, int]]:
        from benchmarks.load_autosave import ITEM

        while True:
            try:
                page = self.client.get(f"/rate/{self.token}/")
            except httpx.HTTPError:
                self._count("page connection")
                time.sleep(1)
                continue
            self._count(f"page {page.status_code}")
            if page.status_code == 200:
                return [(item, int(attribute)) for item, attribute in ITEM.findall(page.text)]
            time.sleep(1)  # the 503 page reloads itself

    def send_journal(self) -> None:
        headers = {"X-CSRFToken": self.client.cookies.get("csrftoken") or "", "HX-Request": "true"}
        for field, (score, edited_ms) in sorted(self.journal.items(), key=lambda e: e[1][1]):
            data = {"item": field[0], "attribute": field[1], "score": score, "edited_ms": edited_ms}
            try:
                response = self.client.post(f"/rate/{self.token}/save", data=data, headers=headers)
            except httpx.HTTPError:
                self._count("save connection")
                return  # the server is away: try again at the next tick
            self._count(f"save {response.status_code}")
            if response.status_code == 200 and "All changes saved" in response.text:
                if self.journal.get(field) == (score, edited_ms):
                    del self.journal[field]
                self.acked.append((field[0], field[1], score))
            elif response.status_code >= 500:
                return
            else:
                self.refused.append(f"{response.status_code} {response.text[:80]}")
                self.journal.pop(field, None)

    def run(self) -> None:
        fields = self.load_page()
        next_page = time.monotonic() + 10
        while not self.stop.is_set():
            time.sleep(self.rng.random() * 0.2 + 0.9)
            field = self.rng.choice(fields)
            self.journal[field] = (self.rng.randint(1, 5), int(time.time() * 1000))
            self.send_journal()
            if time.monotonic() > next_page:
                self.load_page()
                next_page = time.monotonic() + 10

    def drain(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.journal and time.monotonic() < deadline:
            self.send_journal()
            time.sleep(0.5)


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def run(*, clinicians: int, seconds: int, folder: Path) -> dict:
    from tests.fakes.llm_server import FakeLLMServer

    postgres, redis_server = Postgres(folder), Redis(folder)
    postgres.init()
    redis_server.start()
    env = {
        **os.environ,
        "DATABASE_URL": postgres.url,
        "REDIS_URL": redis_server.url,
        "JUDGING_RATELIMIT_REDIS_URL": redis_server.url,
        "SECRET_KEY": "infra-faults-only-" + os.urandom(32).hex(),
        "MENTALBENCH_ENCRYPTION_KEYS": ENCRYPTION_KEY,
        "DEBUG": "0",
        "DJANGO_SETTINGS_MODULE": "mentalbench.settings",
        "STATIC_ROOT": str(folder / "static"),
        "PYTHONPATH": str(ROOT),
        "JUDGING_SWEEP_SECONDS": "2",
        "JUDGING_LEASE_SECONDS": "8",
        "JUDGING_BATCH_POLL_SECONDS": "2",
        "JUDGING_BATCH_POLL_MAX_SECONDS": "2",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("CELERY_TASK_ALWAYS_EAGER", None)
    os.environ.update(env)
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT,
                   env=env, check=True)  # fmt: skip
    from benchmarks.load_autosave import seed, verify

    sessions = seed(clinicians)  # migrates, then a study, clinicians and their sessions
    from django.db import connections

    from annotation.models import Rating, Study
    from judging import selectors, services
    from judging.models import ModelEndpoint, Run, RunItem

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    celery = [sys.executable, "-m", "celery", "-A", "mentalbench"]
    quiet = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
    processes = [
        _start([sys.executable, "-m", "gunicorn", "mentalbench.wsgi", "-b", f"127.0.0.1:{port}",
                "-w", "2", "-k", "gthread", "--threads", "8"], env, folder / "gunicorn.log"),
        _start([*celery, "worker", "-Q", "runs", "-n", "runs@%h", "-c", "2", *quiet], env,
               folder / "runs.log"),
        _start([*celery, "worker", "-Q", "upkeep", "-n", "upkeep@%h", "-c", "1", *quiet], env,
               folder / "upkeep.log"),
        _start([*celery, "beat", "-l", "INFO", f"--schedule={folder / 'beat-schedule'}"], env,
               folder / "beat.log"),
    ]  # fmt: skip
    immediate_server = FakeLLMServer(delay=0.8).__enter__()
    batch_server = FakeLLMServer().__enter__()
    stop = threading.Event()
    try:
        wait_for_healthz(base, timeout=60)
        study = Study.objects.get(name="Load benchmark")
        common = {"family": "fake", "api_key": "sk-infra-faults", "timeout_s": 10.0,
                  "price_input_per_mtok": 2.5, "price_output_per_mtok": 10.0}  # fmt: skip
        immediate_endpoint = ModelEndpoint.objects.create(
            name="fake immediate", provider="openai", model="fake-openai",
            base_url=immediate_server.openai_base_url, **common,
        )  # fmt: skip
        batch_endpoint = ModelEndpoint.objects.create(
            name="fake batch", provider="openai", model="fake-openai",
            base_url=batch_server.openai_base_url, price_batch_input_per_mtok=1.25,
            price_batch_output_per_mtok=5.0, **common,
        )  # fmt: skip
        batch_server.batch_polls = 12  # the batch ends about 25 s in: after two restarts
        immediate = services.judge_run_create(
            study_id=study.id, endpoint=immediate_endpoint, concurrency=4, parallel_tasks=2
        )
        batch_run = services.judge_run_create(
            study_id=study.id, endpoint=batch_endpoint, mode=Run.Mode.BATCH
        )
        threads = [
            Clinician(base, session, token, stop, seed=index)
            for index, (session, token) in enumerate(sessions)
        ]
        for thread in threads:
            thread.start()
        # The faults, evenly spread over the load: PostgreSQL, Redis, PostgreSQL, Redis.
        restarts = {"postgres": 0, "redis": 0}
        started = time.monotonic()
        for index, (name, server) in enumerate(
            [("postgres", postgres), ("redis", redis_server)] * 2
        ):
            time.sleep(max(0.0, started + (index + 1) * seconds / 5 - time.monotonic()))
            server.restart()
            restarts[name] += 1
        time.sleep(max(0.0, started + seconds - time.monotonic()))
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        for thread in threads:
            thread.drain(timeout=60)
        connections.close_all()  # this process's own connection did not survive the restarts

        def ended() -> bool:
            return not Run.objects.filter(
                id__in=[immediate.id, batch_run.id],
                status__in=[Run.Status.PENDING, Run.Status.RUNNING, Run.Status.CANCELLING],
            ).exists()

        wait_until(ended, timeout=240, what="both runs to end by themselves")
        saves = verify(postgres.url, [thread.acked for thread in threads])
        statuses: dict[str, int] = {}
        for thread in threads:
            for what, count in thread.statuses.items():
                statuses[what] = statuses.get(what, 0) + count
        runs = {}
        for label, run_obj in (("immediate", immediate), ("batch", batch_run)):
            run_obj.refresh_from_db()
            items = RunItem.objects.filter(run=run_obj)
            ratings = Rating.objects.filter(run=run_obj)
            progress = selectors.run_progress(run=run_obj)
            runs[label] = {
                "status": run_obj.status,
                "items": items.count(),
                "items_done": items.filter(status=RunItem.Status.DONE).count(),
                "ratings": ratings.count(),
                "duplicate_ratings": ratings.count()
                - len(set(ratings.values_list("response_id", "repeat"))),
                "failed_reasons": sorted(
                    {
                        e[:160]
                        for e in items.exclude(status=RunItem.Status.DONE).values_list(
                            "last_error", flat=True
                        )
                    }
                ),
                "billed_completions": progress.billed_completions,
                "billed_input_tokens": progress.billed_input_tokens,
            }
        runs["immediate"]["server_sent_completions"] = immediate_server.sent["completions"]
        runs["immediate"]["server_sent_input_tokens"] = immediate_server.sent["input_tokens"]
        return {
            "clinicians": clinicians,
            "seconds": seconds,
            "restarts": restarts,
            "saves": saves,
            "unacknowledged_left": sum(len(thread.journal) for thread in threads),
            "refused_saves": sum(len(thread.refused) for thread in threads),
            "responses": dict(sorted(statuses.items())),
            "runs": runs,
        }
    finally:
        stop.set()
        _stop(processes)
        immediate_server.__exit__(None, None, None)
        batch_server.__exit__(None, None, None)
        redis_server.stop()
        try:
            postgres.stop()
        except subprocess.CalledProcessError:
            pass


def failures(result: dict) -> list[str]:
    """What the run shows that must not be: an empty list when every check holds."""
    found = []
    saves, responses = result["saves"], result["responses"]
    if result["restarts"] != {"postgres": 2, "redis": 2}:
        found.append(f"restarts: {result['restarts']}")
    for key in ("lost_or_wrong_final_values", "values_never_acknowledged", "duplicate_ratings"):
        if saves[key]:
            found.append(f"saves: {key} = {saves[key]}")
    if result["unacknowledged_left"] or result["refused_saves"]:
        found.append(
            f"saves never acknowledged: {result['unacknowledged_left']}, "
            f"refused: {result['refused_saves']}"
        )
    if any(what.endswith(" 500") for what in responses):
        found.append(f"500 answers: {responses}")
    if not any(what.endswith(" 503") for what in responses):
        found.append(f"no 503 'retrying' seen: the restarts were not noticed? {responses}")
    for label, run in result["runs"].items():
        if run["status"] != "done" or run["items_done"] != run["items"]:
            found.append(f"{label} run: {run['status']}, {run['items_done']}/{run['items']}")
        if run["duplicate_ratings"] or run["ratings"] != run["items"]:
            found.append(f"{label} run: {run['ratings']} ratings for {run['items']} items")
    immediate = result["runs"]["immediate"]
    if immediate["billed_completions"] != immediate["server_sent_completions"]:
        found.append(
            f"immediate run: {immediate['server_sent_completions']} answers delivered, "
            f"{immediate['billed_completions']} billed"
        )
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clinicians", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=50)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="mentalbench-faults-"))
    try:
        result = run(clinicians=args.clinicians, seconds=args.seconds, folder=folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result["failures"] = failures(result)
    print(json.dumps(result, indent=1))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
