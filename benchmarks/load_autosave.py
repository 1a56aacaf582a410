"""Load benchmark for clinician autosave (docs/benchmarks.md, "Clinician rating: autosave load").

50 simulated clinicians, each with a logged-in session, load their rating page and then save one
score per second against gunicorn + PostgreSQL on 127.0.0.1. Afterwards the database is checked:
every acknowledged save must be stored exactly once (final values match the last acknowledged
save of each field; the audit trail holds one change per acknowledged change; one rating per
clinician and response).

    .venv/bin/python -m benchmarks.load_autosave [--clinicians 50] [--seconds 60] [--workers 3]
        [--threads 8] [--client-processes 5] [--db NAME] [--sqlite]

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

from benchmarks import harness
from benchmarks.harness import ROOT, percentile

ITEM = re.compile(r'"item": "([^"]+)", "attribute": "(\d+)"')
STATIC = re.compile(r'<(?:script|link)[^>]+(?:src|href)="(/static/[^"]+)"')


def workers_cpu_seconds(master: int) -> float:
    """User + system CPU of gunicorn's workers so far."""
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

    from annotation.models import Conversation, Rater, Responder, Response
    from annotation.roles import CLINICIAN, role_add
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
        self.page_ms: list[float] = []
        self.page_bytes: list[int] = []  # bytes over the wire per page load (HTML + static)
        self.cache: set[str] = set()  # static URLs this "browser" may keep for good
        self.acked: list[tuple[str, int, int]] = []  # (item token, attribute id, score), in order
        self.failures: list[str] = []

    def load_page(self, scheduled: float) -> list[tuple[str, int]]:
        """The rating page as a browser loads it: the HTML (compressed when the server does),
        then every script and style sheet it names that is not in this clinician's cache yet.
        Hashed static files are cached for good (Cache-Control: immutable), so a repeat load
        asks only for the HTML. Timed from when the load was due (open loop)."""
        response = self.client.get(f"/rate/{self.token}/")
        response.raise_for_status()
        wire = response.num_bytes_downloaded
        for url in STATIC.findall(response.text):
            if url in self.cache:
                continue
            asset = self.client.get(url)
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
                response = self.client.post(f"/rate/{self.token}/save", data=data, headers=headers)
            except httpx.HTTPError as exc:
                self.failures.append(repr(exc))
                continue
            self.save_ms.append((time.monotonic() - scheduled) * 1000)
            if response.status_code == 200 and "All changes saved" in response.text:
                self.acked.append((item, attribute, score))
            else:
                self.failures.append(f"{response.status_code} {response.text[:80]}")


def drive(base: str, sessions: list[tuple[str, str]], seconds: int, seed: float) -> dict:
    """One client process: its clinicians as threads; returns what they measured."""
    stop = threading.Event()
    rng = random.Random(seed)
    clinicians = [
        Clinician(base, session, token, stop, random.Random(rng.random()))
        for session, token in sessions
    ]
    for c in clinicians:
        c.start()
    time.sleep(seconds)
    stop.set()
    for c in clinicians:
        c.join()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "save_ms": [ms for c in clinicians for ms in c.save_ms],
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clinicians", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=60)
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
    harness.add_database_argument(parser, "mentalbench_bench")
    args = parser.parse_args()

    if args.sqlite:
        database_url = create_sqlite_database()
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
    os.environ.update(env)
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env,
        check=True,
    )  # fmt: skip
    sessions = seed(args.clinicians)

    gunicorn = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "mentalbench.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(args.workers),
            "-k",
            "gthread",
            "--threads",
            str(args.threads),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
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
    for name, values in (("autosave", saves), ("page load", pages)):
        print(
            f"{name:10s} n={len(values):5d}  p50={percentile(values, 50):6.1f} ms  "
            f"p95={percentile(values, 95):6.1f} ms  p99={percentile(values, 99):6.1f} ms  "
            f"mean={statistics.mean(values):6.1f} ms"
        )
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
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
