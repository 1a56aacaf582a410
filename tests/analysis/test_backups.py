"""Backups as docs/operations.md tells them: a pg_dump restored into a fresh database gives the
same reliability report byte for byte, and so does a SQLite file copied with SQLite's backup API.

The reports run as `manage.py` subprocesses on each database, as a researcher runs them.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
REPORT = ("reliability_report", "--study", "Small study", "--bootstrap", "200", "--seed", "7")


def _postgres_url(name: str) -> str:
    database = settings.DATABASES["default"]
    user = database["USER"] or "postgres"
    password = f":{database['PASSWORD']}" if database["PASSWORD"] else ""
    host, port = database["HOST"] or "127.0.0.1", database["PORT"] or 5432
    return f"postgres://{user}{password}@{host}:{port}/{name}"


def _report(database_url: str, *options: str) -> bytes:
    done = subprocess.run(
        [sys.executable, "manage.py", *REPORT, *options],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.count(b"\n") > 7, done.stdout  # one row per judge × attribute, at least
    return done.stdout


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command[0]}: {done.stderr}"


@pytest.mark.slow
def test_a_pg_dump_restored_into_a_fresh_database_gives_the_same_report(
    transactional_db, small_study, tmp_path
):
    # transactional_db: the study is committed, so pg_dump (another connection) sees it.
    source = _postgres_url(connection.settings_dict["NAME"])
    before = {fmt: _report(source, "--format", fmt) for fmt in ("csv", "table")}

    dump = tmp_path / "mentalbench.dump"
    restored = f"{connection.settings_dict['NAME']}_restored_{uuid.uuid4().hex[:8]}"
    _run("pg_dump", "--format=custom", "--no-owner", f"--file={dump}", "--dbname", source)
    _run("createdb", "--maintenance-db", source, restored)
    try:
        _run(
            "pg_restore",
            "--no-owner",
            "--exit-on-error",
            "--dbname",
            _postgres_url(restored),
            str(dump),
        )
        after = {fmt: _report(_postgres_url(restored), "--format", fmt) for fmt in before}
    finally:
        _run("dropdb", "--maintenance-db", source, "--if-exists", restored)
    assert after == before


@pytest.mark.slow
def test_a_sqlite_backup_gives_the_same_report(tmp_path):
    """The embedded file: a study written to SQLite (a copy of the PostgreSQL rows would need the
    same models, so the study is built there by the same fixture code in a subprocess), copied
    with the backup API while a connection holds it open, reports the same."""
    original = tmp_path / "db.sqlite3"
    url = f"sqlite:///{original}"
    env = {**os.environ, "DATABASE_URL": url}
    for command in (["migrate", "--noinput", "-v0"],):
        done = subprocess.run(
            [sys.executable, "manage.py", *command], cwd=ROOT, env=env, capture_output=True
        )
        assert done.returncode == 0, done.stderr.decode()
    build = (
        "import django; django.setup(); "
        "from tests.factories import small_study_make; small_study_make()"
    )
    done = subprocess.run(
        [sys.executable, "-c", build],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "mentalbench.settings"},
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr.decode()
    before = _report(url, "--format", "csv")

    writer = sqlite3.connect(original)  # the platform still has the file open
    copy = tmp_path / "backup.sqlite3"
    target = sqlite3.connect(copy)
    with target:
        writer.backup(target)
    target.close()
    writer.close()
    assert _report(f"sqlite:///{copy}", "--format", "csv") == before
