"""Load benchmark for clinician autosave (docs/benchmarks.md, "Clinician rating: autosave load").

50 simulated clinicians, each with a logged-in session, load their rating page and then save one
score per second against gunicorn + PostgreSQL on 127.0.0.1. Afterwards the database is checked:
every acknowledged save must be stored exactly once (final values match the last acknowledged
save of each field; the audit trail holds one change per acknowledged change; one rating per
clinician and response).

    .venv/bin/python -m benchmarks.load_autosave [--clinicians 50] [--seconds 60] [--workers 3]
        [--threads 8] [--client-processes 5] [--db NAME] [--sqlite]
        [--export-during URL STUDY | --jobs-during [--paper-db NAME] [--n-sim 10000]]

Measured as a user meets it: static files are collected (hashed, precompressed) and served by
WhiteNoise with DEBUG off, as in a deployment; a page load is the HTML plus every script and style
sheet it names that the clinician's "browser" has not cached yet (hashed files are cached for
good, so a repeat load fetches the HTML only), and the bytes over the wire of first and repeat
loads are reported. Latency is open loop: each save is due one second after the previous one was
due, and is timed from then, not from when it was sent, so a slow answer also counts against the
saves it held up.

The simulated clinicians run as threads spread over several client processes, as real browsers
are separate programs: one Python process driving 50 threads would itself queue on its GIL and
add that wait to every measured latency.

With `--jobs-during`, background jobs run while the clinicians save. The clinicians save alone
for --seconds (the baseline); then a researcher, in the browser, starts a release of the
paper-scale study (100,000 responses; benchmarks.release_bench builds it once in --paper-db, and
each run starts from a copy of that database) and a κ_F1 evaluation of a 4 MB upload with
n_sim=10,000, and keeps both job pages open (their progress bars refresh every second). The
jobs run on Celery workers the benchmark starts and stops itself, as bin/up starts them (a
worker on the runs queue with 2 processes, one on the upkeep queue, beat; broker: the Redis of
$BENCH_REDIS_URL, flushed). The clinicians save until both jobs have ended. Printed: autosave
p50/p95/p99 alone and during the jobs, the slowest single request of all (saves, pages, job
starts, progress polls), the progress values each bar showed, how long each job took, the load.

It creates (and drops first) the database `mentalbench_bench` (or --db). With `--sqlite` it
runs against the embedded default instead: a fresh SQLite file (bench.sqlite3 in a temporary
directory) with the settings `bin/up` uses. Not a test: figures depend on the machine.
"""

import argparse
import multiprocessing
import os
import random
import re
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psycopg

from benchmarks import harness, paper_scale
from benchmarks.harness import ROOT, percentile

ITEM = re.compile(r'"item": "([^"]+)", "attribute": "(\d+)"')
STATIC = re.compile(r'<(?:script|link)[^>]+(?:src|href)="(/static/[^"]+)"')


def workers_cpu_seconds(master: int) -> float:
    """User + system CPU of the children of `master` (gunicorn's workers, a Celery pool) so
    far."""
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return sum(harness.cpu_seconds(int(pid)) for pid in children)


def create_sqlite_database() -> str:
    directory = Path(tempfile.mkdtemp(prefix="mentalbench-bench-"))
    return f"sqlite:///{directory / 'bench.sqlite3'}"


def connect(database_url: str):
    """A DB-API connection for the check: psycopg for PostgreSQL, sqlite3 for the embedded
    default (both offer connection.execute)."""
    if database_url.startswith("sqlite:///"):
        return sqlite3.connect(database_url.removeprefix("sqlite:///"))
    return psycopg.connect(database_url)


def seed(clinicians: int) -> list[tuple[str, str]]:
    """Migrate, create a study and `clinicians` clinicians with an assignment each; return
    (session key, assignment token) per clinician."""
    harness.django_setup()
    import logging

    from django.contrib.auth import (
        BACKEND_SESSION_KEY,
        HASH_SESSION_KEY,
        SESSION_KEY,
        get_user_model,
    )
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command

    from accounts.roles import CLINICIAN, role_add
    from annotation.models import Conversation, Rater, Responder, Response
    from annotation.services import assignments_create, study_get_or_create

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one log line per request otherwise
    call_command("migrate", verbosity=0)
    study, _ = study_get_or_create(name="Load benchmark")
    responders = [
        Responder.objects.create(key=f"bench{i}", name=f"Bench {i}", family=f"f{i}")
        for i in range(10)
    ]
    for c in range(clinicians):
        conversation = Conversation.objects.create(
            study=study, external_id=str(c), context="I can't sleep before exams. " * 8
        )
        Response.objects.bulk_create(
            Response(conversation=conversation, responder=r, text="A caring reply. " * 40)
            for r in responders
        )
    raters = []
    for n in range(clinicians):
        user = get_user_model().objects.create(username=f"bench{n}")
        role_add(user=user, role=CLINICIAN)
        raters.append(Rater.objects.create(kind="clinician", name=f"bench{n}", user=user))
    assignments = assignments_create(study=study, clinicians=raters)
    sessions = []
    for assignment in sorted(assignments, key=lambda a: a.rater_id):
        user = assignment.rater.user
        # A logged-in session as django.contrib.auth.login would store it (no password hashing,
        # which would only slow the set-up down).
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)
        store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        store[HASH_SESSION_KEY] = user.get_session_auth_hash()
        store.create()
        sessions.append((store.session_key, assignment.token))
    return sessions


class Clinician(threading.Thread):
    def __init__(self, base: str, session: str, token: str, stop: threading.Event, rng):
        super().__init__(daemon=True)
        self.base, self.token, self.stop, self.rng = base, token, stop, rng
        self.client = httpx.Client(base_url=base, cookies={"sessionid": session}, timeout=30)
        self.save_ms: list[float] = []
        self.save_due: list[float] = []  # when each save in save_ms was due (monotonic)
        self.page_ms: list[float] = []
        self.slowest_ms = 0.0  # the longest single request, from sending it to its answer
        self.page_bytes: list[int] = []  # bytes over the wire per page load (HTML + static)
        self.cache: set[str] = set()  # static URLs this "browser" may keep for good
        self.acked: list[tuple[str, int, int]] = []  # (item token, attribute id, score), in order
        self.failures: list[str] = []

    def timed(self, send, *args, **kwargs) -> httpx.Response:
        sent = time.monotonic()
        response = send(*args, **kwargs)
        self.slowest_ms = max(self.slowest_ms, (time.monotonic() - sent) * 1000)
        return response

    def load_page(self, scheduled: float) -> list[tuple[str, int]]:
        """The rating page as a browser loads it: the HTML (compressed when the server does),
        then every script and style sheet it names that is not in this clinician's cache yet.
        Hashed static files are cached for good (Cache-Control: immutable), so a repeat load
        asks only for the HTML. Timed from when the load was due (open loop)."""
        response = self.timed(self.client.get, f"/rate/{self.token}/")
        response.raise_for_status()
        wire = response.num_bytes_downloaded
        for url in STATIC.findall(response.text):
            if url in self.cache:
                continue
            asset = self.timed(self.client.get, url)
            asset.raise_for_status()
            wire += asset.num_bytes_downloaded
            if "immutable" in asset.headers.get("cache-control", ""):
                self.cache.add(url)
        self.page_ms.append((time.monotonic() - scheduled) * 1000)
        self.page_bytes.append(wire)
        return [(item, int(attribute)) for item, attribute in ITEM.findall(response.text)]

    def run(self) -> None:
        # Clinicians do not all open their page in the same instant: spread over 5 seconds.
        opened = time.monotonic() + self.rng.random() * 5
        time.sleep(max(0.0, opened - time.monotonic()))
        fields = self.load_page(opened)
        csrf = self.client.cookies.get("csrftoken")
        headers = {"X-CSRFToken": csrf, "HX-Request": "true"}
        next_save = time.monotonic() + self.rng.random()  # spread the clinicians over a second
        next_page = time.monotonic() + 15
        while not self.stop.is_set():
            # Open loop: every save is due at a fixed time, one second after the last one was
            # due, and its latency is counted from then. A slow answer therefore counts against
            # the saves it delayed too (measuring from the actual send would hide that wait:
            # coordinated omission). A reload is due every 15 s and is sent when due, not at
            # the next save's tick (which added up to a second of waiting to every reload).
            if next_page <= next_save:
                time.sleep(max(0.0, next_page - time.monotonic()))
                due = next_page
                next_page += 15
                try:
                    self.load_page(due)
                except httpx.HTTPError as exc:  # a failed reload is a failure, not a dead thread
                    self.failures.append(f"page load: {exc!r}"[:120])
                # A clinician does not save while the page reloads: a save that fell due
                # meanwhile is due when the page is back.
                next_save = max(next_save, time.monotonic())
                continue
            scheduled = next_save
            time.sleep(max(0.0, scheduled - time.monotonic()))
            next_save += 1.0
            item, attribute = self.rng.choice(fields)
            score = self.rng.randint(1, 5)
            data = {
                "item": item,
                "attribute": attribute,
                "score": score,
                "edited_ms": int(time.time() * 1000),
            }
            try:
                response = self.timed(
                    self.client.post, f"/rate/{self.token}/save", data=data, headers=headers
                )
            except httpx.HTTPError as exc:
                self.failures.append(repr(exc))
                continue
            self.save_ms.append((time.monotonic() - scheduled) * 1000)
            self.save_due.append(scheduled)
            if response.status_code == 200 and "All changes saved" in response.text:
                self.acked.append((item, attribute, score))
            else:
                self.failures.append(f"{response.status_code} {response.text[:80]}")


def drive(
    base: str, sessions: list[tuple[str, str]], seconds: float, seed: float, stop_early=None
) -> dict:
    """One client process: its clinicians as threads, for `seconds` or until `stop_early` (an
    Event shared with the parent) is set; returns what they measured."""
    stop = threading.Event()
    rng = random.Random(seed)
    clinicians = [
        Clinician(base, session, token, stop, random.Random(rng.random()))
        for session, token in sessions
    ]
    for c in clinicians:
        c.start()
    if stop_early is None:
        time.sleep(seconds)
    else:
        stop_early.wait(seconds)
    stop.set()
    for c in clinicians:
        c.join()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "save_ms": [ms for c in clinicians for ms in c.save_ms],
        "save_due": [due for c in clinicians for due in c.save_due],
        "slowest_ms": max((c.slowest_ms for c in clinicians), default=0.0),
        "page_ms": [ms for c in clinicians for ms in c.page_ms],
        "first_bytes": [c.page_bytes[0] for c in clinicians if c.page_bytes],
        "repeat_bytes": [b for c in clinicians for b in c.page_bytes[1:]],
        "acked": [c.acked for c in clinicians],
        "failures": [f for c in clinicians for f in c.failures],
        "cpu": usage.ru_utime + usage.ru_stime,
    }


def verify(database_url: str, acked_per_clinician: list[list[tuple[str, int, int]]]) -> dict:
    """Count in the database: every acknowledged save stored exactly once."""
    expected_final: dict[tuple[str, int], int] = {}
    expected_changes = 0
    for acked in acked_per_clinician:
        last: dict[tuple[str, int], int] = {}
        for item, attribute, score in acked:
            if last.get((item, attribute)) != score:
                expected_changes += 1
            last[(item, attribute)] = score
        expected_final.update(last)
    conn = connect(database_url)
    try:
        stored = dict(
            ((item, attribute), value)
            for item, attribute, value in conn.execute(
                """SELECT i.token, s.attribute_id, s.value
               FROM annotation_score s
               JOIN annotation_rating r ON r.id = s.rating_id
               JOIN annotation_assignmentitem i
                 ON i.response_id = r.response_id AND i.assignment_id = r.assignment_id"""
            )
        )
        changes = conn.execute(
            "SELECT count(*) FROM annotation_ratingchange WHERE field = 'score'"
        ).fetchone()[0]
        duplicates = conn.execute(
            """SELECT count(*) FROM (SELECT rater_id, response_id FROM annotation_rating
               GROUP BY rater_id, response_id HAVING count(*) > 1) d"""
        ).fetchone()[0]
    finally:
        conn.close()
    lost = sum(1 for key, value in expected_final.items() if stored.get(key) != value)
    unexpected = sum(1 for key in stored if key not in expected_final)
    return {
        "acknowledged_saves": sum(len(acked) for acked in acked_per_clinician),
        "fields": len(expected_final),
        "lost_or_wrong_final_values": lost,
        "values_never_acknowledged": unexpected,
        "audit_changes_expected": expected_changes,
        "audit_changes_stored": changes,
        "duplicate_ratings": duplicates,
    }


class Exporter:
    """A researcher exporting a study with `manage.py export_ratings`, one export after another,
    on the same PostgreSQL server and the same cores while the clinicians save."""

    def __init__(self, database_url: str, study: str) -> None:
        self.finished = self.failed = 0
        self._stop = threading.Event()
        self._command = [sys.executable, "manage.py", "export_ratings", "--study", study]
        self._command += ["--out", os.devnull]
        self._env = {**os.environ, "DATABASE_URL": database_url}
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._process: subprocess.Popen | None = None
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._process = subprocess.Popen(
                self._command, cwd=ROOT, env=self._env, stdout=subprocess.DEVNULL
            )
            code = self._process.wait()
            if self._stop.is_set():
                return
            if code == 0:
                self.finished += 1
            else:
                self.failed += 1

    def stop(self) -> None:
        self._stop.set()
        if self._process and self._process.poll() is None:
            self._process.terminate()
        self._thread.join(timeout=30)


def start_gunicorn(env: dict[str, str], port: int, workers: int, threads: int) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "mentalbench.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(workers),
            "-k",
            "gthread",
            "--threads",
            str(threads),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )


def print_latencies(name: str, values: list[float]) -> None:
    print(
        f"{name:10s} n={len(values):5d}  p50={percentile(values, 50):6.1f} ms  "
        f"p95={percentile(values, 95):6.1f} ms  p99={percentile(values, 99):6.1f} ms  "
        f"mean={statistics.mean(values):6.1f} ms"
    )


def print_verified(database_url: str, results: list[dict], failures: list[str]) -> bool:
    counts = verify(database_url, [acked for r in results for acked in r["acked"]])
    for key, value in counts.items():
        print(f"{key}: {value}")
    ok = (
        counts["lost_or_wrong_final_values"] == 0
        and counts["values_never_acknowledged"] == 0
        and counts["duplicate_ratings"] == 0
        and counts["audit_changes_expected"] == counts["audit_changes_stored"]
        and not failures
    )
    print("database check:", "OK, every acknowledged save stored exactly once" if ok else "FAILED")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clinicians", type=int, default=50)
    parser.add_argument(
        "--seconds",
        type=int,
        default=60,
        help="how long the clinicians save (with --jobs-during: the baseline before the jobs)",
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--client-processes", type=int, default=5)
    parser.add_argument("--port", type=int, help="gunicorn's port (a free one by default)")
    parser.add_argument(
        "--sqlite", action="store_true", help="the embedded default (a SQLite file), not PostgreSQL"
    )
    parser.add_argument(
        "--export-during",
        nargs=2,
        metavar=("DATABASE_URL", "STUDY"),
        help="meanwhile, a researcher exports STUDY from DATABASE_URL with export_ratings, "
        "over and over (e.g. the paper-scale study of benchmarks.paper_scale)",
    )
    jobs = parser.add_argument_group(
        "background jobs",
        "--jobs-during: after --seconds of saving alone, a researcher starts a release of the "
        "paper-scale study and a κ_F1 evaluation through the web pages; Celery workers started "
        "as bin/up starts them run both while the clinicians go on saving, until both end",
    )
    jobs.add_argument("--jobs-during", action="store_true")
    jobs.add_argument(
        "--paper-db",
        default=paper_scale.DB,
        help="the database holding the paper-scale study, built there when missing and copied "
        f"into --db for each run ({paper_scale.DB})",
    )
    jobs.add_argument(
        "--conversations",
        type=int,
        default=paper_scale.CONVERSATIONS,
        help="of the paper-scale study, × 10 responses (only when it is built)",
    )
    jobs.add_argument("--kappa-rows", type=int, default=50_000, help="rows of the κ_F1 upload")
    jobs.add_argument("--n-sim", type=int, default=10_000, help="κ_F1's simulated assignments")
    jobs.add_argument(
        "--celery-concurrency", type=int, default=2, help="the runs worker's (bin/up's default)"
    )
    jobs.add_argument(
        "--jobs-timeout",
        type=float,
        default=1800,
        help="seconds the jobs may take in all (then they are cancelled)",
    )
    harness.add_database_argument(parser, "mentalbench_bench")
    args = parser.parse_args()
    if args.jobs_during and (args.sqlite or args.export_during):
        parser.error("--jobs-during runs on PostgreSQL, without --export-during")

    if args.sqlite:
        database_url = create_sqlite_database()
    elif args.jobs_during:
        paper_template(args.paper_db, args.conversations)
        harness.drop_database(args.db)
        harness.psql("postgres", f'CREATE DATABASE "{args.db}" TEMPLATE "{args.paper_db}"')
        database_url = harness.database_url(args.db)
    else:
        harness.fresh_database(args.db, migrate=False)  # seed() migrates
        database_url = harness.database_url(args.db)
    port = args.port or harness.free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DEBUG": "0",
        "DJANGO_SETTINGS_MODULE": "mentalbench.settings",
    }
    # Static files as a deployment serves them (bin/up and the Dockerfile collect them): hashed,
    # precompressed, served by WhiteNoise with DEBUG off.
    static_root = tempfile.mkdtemp(prefix="mentalbench-static-")
    env["STATIC_ROOT"] = static_root
    if args.jobs_during:
        # The web and the workers share a media folder (job uploads and results) and the Redis
        # a benchmark may own (broker and cache).
        env["MEDIA_ROOT"] = tempfile.mkdtemp(prefix="mentalbench-media-")
        env["REDIS_URL"] = harness.bench_redis_url()
        import redis

        redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    os.environ.update(env)
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env,
        check=True,
    )  # fmt: skip
    sessions = seed(args.clinicians)
    if args.jobs_during:
        try:
            return run_jobs_during(args, env, port, sessions, database_url)
        finally:
            shutil.rmtree(static_root, ignore_errors=True)
            shutil.rmtree(env["MEDIA_ROOT"], ignore_errors=True)

    gunicorn = start_gunicorn(env, port, args.workers, args.threads)
    base = f"http://127.0.0.1:{port}"
    try:
        harness.wait_for_healthz(base)
        # Warm each worker up (imports, URL resolver, templates), as a running server is.
        for session, token in sessions[: 2 * args.workers]:
            httpx.get(f"{base}/rate/{token}/", cookies={"sessionid": session}).raise_for_status()
        n = args.client_processes
        rng = random.Random(1)
        cpu_before = workers_cpu_seconds(gunicorn.pid)
        exporter = Exporter(*args.export_during) if args.export_during else None
        with multiprocessing.get_context("spawn").Pool(n) as pool:
            results = pool.starmap(
                drive,
                [(base, sessions[i::n], args.seconds, rng.random()) for i in range(n)],
            )
        cpu_used = workers_cpu_seconds(gunicorn.pid) - cpu_before
        if exporter:
            exporter.stop()
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        gunicorn.wait(timeout=30)
        shutil.rmtree(static_root, ignore_errors=True)

    saves = [ms for r in results for ms in r["save_ms"]]
    pages = [ms for r in results for ms in r["page_ms"]]
    failures = [f for r in results for f in r["failures"]]
    print(f"database: {'SQLite file' if args.sqlite else 'PostgreSQL'}")
    print(
        f"{args.clinicians} clinicians in {n} client processes, {args.seconds} s, gunicorn "
        f"{args.workers} workers x {args.threads} threads, {os.cpu_count()} CPUs"
    )
    print_latencies("autosave", saves)
    print_latencies("page load", pages)
    first = [b for r in results for b in r["first_bytes"]]
    repeat = [b for r in results for b in r["repeat_bytes"]]
    print(
        f"rating page over the wire (HTML + static files, compressed, after login): first load "
        f"median {statistics.median(first) / 1024:.1f} KB, repeat load median "
        f"{statistics.median(repeat) / 1024 if repeat else float('nan'):.1f} KB"
    )
    print("latency counted from when each save and page load was due (open loop)")
    if exporter:
        print(
            f"meanwhile export_ratings of {args.export_during[1]!r} ran without pause: "
            f"{exporter.finished} exports finished, {exporter.failed} failed"
        )
    print(f"failed requests: {len(failures)} {failures[:3]}")
    print(
        f"server CPU: {cpu_used:.1f} s for {len(saves) + len(pages)} requests = "
        f"{1000 * cpu_used / (len(saves) + len(pages)):.1f} ms per request; "
        f"client CPU: {sum(r['cpu'] for r in results):.1f} s; "
        f"after: {harness.load()}"
    )
    return 0 if print_verified(database_url, results, failures) else 1


# --- background jobs while the clinicians save --------------------------------------------------


def paper_template(db: str, conversations: int) -> None:
    """Make sure database `db` holds the paper-scale study (benchmarks.release_bench builds it
    there when it does not); each run copies it, so a run starts from the study as built."""
    try:
        with psycopg.connect(harness.database_url(db)) as conn:
            found = conn.execute(
                "SELECT 1 FROM annotation_study WHERE name = %s", [paper_scale.STUDY]
            ).fetchone()
    except psycopg.Error:
        found = None
    if found:
        return
    print(f"building the paper-scale study in {db} ({conversations:,} conversations)")
    subprocess.run(
        [sys.executable, "-m", "benchmarks.release_bench", "--runs", "0", "--db", db,
         "--conversations", str(conversations)],
        cwd=ROOT, check=True,
    )  # fmt: skip


def predictions_csv(rows: int) -> bytes:
    """A multi-label classifier's predictions on `rows` items (10 distortion labels, one to four
    per cell, right on 60 %): about 4 MB at 50,000 rows, the most rows an upload may have."""
    labels = [
        "all-or-nothing thinking", "overgeneralization", "mental filter", "should statements",
        "labeling", "personalization", "magnification", "emotional reasoning", "mind reading",
        "fortune-telling",
    ]  # fmt: skip
    rng = random.Random(0)
    lines = ["true,predicted"]
    for _ in range(rows):
        true = rng.sample(labels, rng.randint(1, 4))
        predicted = true if rng.random() < 0.6 else rng.sample(labels, rng.randint(1, 4))
        lines.append(f"{';'.join(true)},{';'.join(predicted)}")
    return ("\n".join(lines) + "\n").encode()


def researcher_session() -> tuple[str, int, int]:
    """(a logged-in session key, the paper-scale study's id, its responses) for a
    researcher."""
    from django.contrib.auth import (
        BACKEND_SESSION_KEY,
        HASH_SESSION_KEY,
        SESSION_KEY,
        get_user_model,
    )
    from django.contrib.sessions.backends.db import SessionStore

    from accounts.roles import RESEARCHER, role_add
    from annotation.models import Response, Study

    user = get_user_model().objects.create(username="bench-researcher")
    role_add(user=user, role=RESEARCHER)
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    study = Study.objects.get(name=paper_scale.STUDY)
    responses = Response.objects.filter(conversation__study=study).count()
    return store.session_key or "", study.pk, responses


PROGRESS = re.compile(r'<progress id="job-progress" max="100" value="(\d+)"')
STATE = re.compile(r'<strong id="job-state" class="status status-(\w+)"')


class Researcher:
    """A researcher in a browser: opens the release page and presses *Prepare the release*, opens
    the κ_F1 page and uploads a file, then keeps both job pages open, whose progress bars htmx
    refreshes every second. Every request is timed from sending it to its answer."""

    def __init__(self, base: str, session: str) -> None:
        self.client = httpx.Client(base_url=base, cookies={"sessionid": session}, timeout=60)
        self.requests: list[tuple[str, float]] = []  # (what, ms)
        self.polls: dict[str, list[tuple[float, str, int]]] = {}  # job: (time, state, percent)

    def timed(self, what: str, send, *args, **kwargs) -> httpx.Response:
        sent = time.monotonic()
        response = send(*args, **kwargs)
        self.requests.append((what, (time.monotonic() - sent) * 1000))
        return response

    def _job_id(self, response: httpx.Response, what: str) -> str:
        if response.status_code != 302 or "/analysis/jobs/" not in response.headers["location"]:
            raise SystemExit(
                f"{what} did not start a job: {response.status_code} {response.text[:300]}"
            )
        return response.headers["location"].rstrip("/").rsplit("/", 1)[1]

    def start_release(self, study: int) -> str:
        page = self.timed("release page", self.client.get, f"/analysis/studies/{study}/release/")
        page.raise_for_status()
        response = self.timed(
            "release start",
            self.client.post,
            f"/analysis/studies/{study}/release/start",
            data={"text": "1", "csrfmiddlewaretoken": self.client.cookies["csrftoken"]},
        )
        return self._job_id(response, "the release")

    def start_kappa_f1(self, upload: bytes, n_sim: int) -> str:
        page = self.timed("κ_F1 page", self.client.get, "/analysis/distortions/kappa-f1/")
        page.raise_for_status()
        response = self.timed(
            "κ_F1 start",
            self.client.post,
            "/analysis/distortions/kappa-f1/",
            data={
                "kind": "",
                "labels": "",
                "n_sim": str(n_sim),
                "seed": "0",
                "csrfmiddlewaretoken": self.client.cookies["csrftoken"],
            },
            files={"file": ("predictions.csv", upload, "text/csv")},
        )
        return self._job_id(response, "the κ_F1 evaluation")

    def open_job(self, job: str) -> None:
        self.timed("job page", self.client.get, f"/analysis/jobs/{job}/").raise_for_status()
        self.polls[job] = []

    def cancel(self, job: str) -> None:
        self.timed(
            "job cancel",
            self.client.post,
            f"/analysis/jobs/{job}/cancel",
            data={"csrfmiddlewaretoken": self.client.cookies["csrftoken"]},
        )

    def poll(self, job: str) -> str:
        """One htmx refresh of the job's status; returns its state."""
        response = self.timed(
            "job status poll",
            self.client.get,
            f"/analysis/jobs/{job}/",
            headers={"HX-Request": "true"},
        )
        response.raise_for_status()
        state = STATE.search(response.text)
        percent = PROGRESS.search(response.text)
        if state is None or percent is None:
            raise SystemExit(f"no progress bar in the job's status: {response.text[:300]}")
        self.polls[job].append((time.monotonic(), state.group(1), int(percent.group(1))))
        return state.group(1)


def start_workers(env: dict[str, str], logs: Path, concurrency: int) -> list[subprocess.Popen]:
    """The Celery processes bin/up starts: a worker on the runs queue (where jobs go), one on
    the upkeep queue, and beat. Each leads a process group, so that it is stopped with its
    pool, in this process's session, as bin/up's children are in bin/up's (the scheduler's
    autogroup shares the cores between sessions, then between the processes in each)."""
    commands = {
        "runs": ["worker", "-Q", "runs", "-n", "runs@%h", f"--concurrency={concurrency}",
                 "--without-gossip", "--without-mingle", "--without-heartbeat"],
        "upkeep": ["worker", "-Q", "upkeep", "-n", "upkeep@%h", "--concurrency=2",
                   "--without-gossip", "--without-mingle", "--without-heartbeat"],
        "beat": ["beat", f"--schedule={logs / 'celerybeat-schedule'}"],
    }  # fmt: skip
    processes = []
    for name, command in commands.items():
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "mentalbench", *command, "--loglevel=INFO"],
                cwd=ROOT,
                env=env,
                stdout=(logs / f"{name}.log").open("wb"),
                stderr=subprocess.STDOUT,
                process_group=0,
            )  # fmt: skip
        )
    for name in ("runs", "upkeep"):
        log = logs / f"{name}.log"
        harness.wait_until(
            lambda log=log: b"ready." in log.read_bytes(), timeout=120, what=str(log)
        )
    return processes


def stop_workers(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def run_jobs_during(
    args: argparse.Namespace,
    env: dict[str, str],
    port: int,
    sessions: list[tuple[str, str]],
    database_url: str,
) -> int:
    """Baseline, then the jobs: one run of clinicians, split at the moment the jobs start."""
    from analysis.models import Job

    researcher_key, study_id, n_responses = researcher_session()
    upload = predictions_csv(args.kappa_rows)
    logs = Path(tempfile.mkdtemp(prefix="mentalbench-jobs-bench-"))
    workers = start_workers(env, logs, args.celery_concurrency)
    gunicorn = start_gunicorn(env, port, args.workers, args.threads)
    base = f"http://127.0.0.1:{port}"
    loads: list[tuple[float, float]] = []  # (time, 1-minute load average)
    try:
        harness.wait_for_healthz(base)
        for session, token in sessions[: 2 * args.workers]:
            httpx.get(f"{base}/rate/{token}/", cookies={"sessionid": session}).raise_for_status()
        researcher = Researcher(base, researcher_key)
        n = args.client_processes
        rng = random.Random(1)
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager, context.Pool(n) as pool:
            stop = manager.Event()
            started = time.monotonic()
            pending = pool.starmap_async(
                drive,
                [
                    (base, sessions[i::n], args.seconds + args.jobs_timeout + 60, rng.random(),
                     stop)
                    for i in range(n)
                ],
            )  # fmt: skip
            # The clinicians open their pages over the first 5 s; the baseline starts after.
            baseline_from = started + 10
            while time.monotonic() < baseline_from + args.seconds:
                loads.append((time.monotonic(), os.getloadavg()[0]))
                time.sleep(1)
            jobs_from = time.monotonic()
            web_cpu = workers_cpu_seconds(gunicorn.pid)
            release = researcher.start_release(study_id)
            kappa = researcher.start_kappa_f1(upload, args.n_sim)
            for job in (release, kappa):
                researcher.open_job(job)
            ended: dict[str, float] = {}
            deadline = jobs_from + args.jobs_timeout
            while len(ended) < 2 and time.monotonic() < deadline:
                tick = time.monotonic()
                for job in (release, kappa):
                    if job not in ended and researcher.poll(job) not in ("queued", "running"):
                        ended[job] = time.monotonic()
                loads.append((tick, os.getloadavg()[0]))
                time.sleep(max(0.0, tick + 1 - time.monotonic()))
            jobs_to = time.monotonic()
            web_cpu = workers_cpu_seconds(gunicorn.pid) - web_cpu
            jobs_cpu = workers_cpu_seconds(workers[0].pid)  # the runs worker's pool
            stop.set()
            results = pending.get()
            # A job past the timeout is cancelled, so that its worker stops at its next report.
            for job in {release, kappa} - set(ended):
                researcher.cancel(job)
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        gunicorn.wait(timeout=30)
        stop_workers(workers)

    jobs = {str(job.pk): job for job in Job.objects.filter(pk__in=[release, kappa])}
    failures = [f for r in results for f in r["failures"]]
    due = [d for r in results for d in r["save_due"]]
    ms = [m for r in results for m in r["save_ms"]]
    alone = [m for d, m in zip(due, ms, strict=True) if baseline_from <= d < jobs_from]
    during = [m for d, m in zip(due, ms, strict=True) if jobs_from <= d < jobs_to]
    print(
        f"{args.clinicians} clinicians in {n} client processes; gunicorn {args.workers} workers "
        f"x {args.threads} threads; Celery runs worker x {args.celery_concurrency}, upkeep "
        f"worker, beat; {os.cpu_count()} CPUs"
    )
    print("autosave latency, open loop (from when each save was due):")
    print_latencies("alone", alone)
    print_latencies("jobs", during)
    p95_alone, p95_during = percentile(alone, 95), percentile(during, 95)
    print(f"autosave p95 with the jobs / alone: {p95_during / p95_alone:.2f}× (target ≤ 1.5×)")
    slowest_clinician = max(r["slowest_ms"] for r in results)
    by_kind: dict[str, float] = {}
    for what, took in researcher.requests:
        by_kind[what] = max(by_kind.get(what, 0.0), took)
    print("slowest single request (sent to answered):")
    print(f"  clinicians' (saves, pages, static files): {slowest_clinician:.0f} ms")
    for what, took in by_kind.items():
        count = sum(1 for w, _ in researcher.requests if w == what)
        print(f"  {what} (×{count}): {took:.0f} ms")
    slowest = max([slowest_clinician, *by_kind.values()])
    print(f"  of all: {slowest:.0f} ms (target ≤ 2,000 ms)")
    ok = not failures and slowest <= 2000 and p95_during <= 1.5 * p95_alone
    for name, job_id in (
        (f"release, {n_responses:,} responses", release),
        (f"κ_F1, n_sim={args.n_sim:,}", kappa),
    ):
        job = jobs[job_id]
        took = (
            (job.finished_at - job.created_at).total_seconds() if job.finished_at else float("nan")
        )
        ran = (
            (job.finished_at - job.started_at).total_seconds()
            if job.started_at and job.finished_at
            else float("nan")
        )
        values = [p for _, _, p in researcher.polls[job_id]]
        moving = sorted({p for _, state, p in researcher.polls[job_id] if state == "running"})
        rising = all(a <= b for a, b in zip(values, values[1:], strict=False))
        print(
            f"{name}: {job.state}{' — ' + job.error if job.error else ''}; {took:.1f} s from the "
            f"request ({ran:.1f} s running); the bar showed {len(moving)} distinct values while "
            f"running ({'never going back' if rising else 'WENT BACK'}): "
            f"{', '.join(map(str, moving[:12]))}{' …' if len(moving) > 12 else ''}"
        )
        ok = ok and job.state == Job.State.DONE and len(moving) >= 3 and rising
    base_load = [load for t, load in loads if t < jobs_from]
    job_load = [load for t, load in loads if t >= jobs_from]
    print(
        f"1-minute load average: alone {min(base_load):.1f}–{max(base_load):.1f}, with the jobs "
        f"{min(job_load):.1f}–{max(job_load):.1f}; after: {harness.load()}"
    )
    print(
        f"CPU while the jobs ran ({jobs_to - jobs_from:.0f} s): the runs worker's pool "
        f"{jobs_cpu:.0f} s, gunicorn's workers {web_cpu:.0f} s"
    )
    print(f"failed requests: {len(failures)} {failures[:3]}")
    ok = print_verified(database_url, results, failures) and ok
    if ok:
        shutil.rmtree(logs, ignore_errors=True)
    else:
        print(f"the Celery logs are kept in {logs}")
    print("targets:", "all met" if ok else "NOT all met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
