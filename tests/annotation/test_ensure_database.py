"""`manage.py ensure_database` (run by bin/up before migrate) creates a missing PostgreSQL
database instead of letting migrate fail with a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

pytestmark = pytest.mark.slow  # creates and drops databases through `manage.py` processes

ROOT = Path(__file__).resolve().parents[2]


def _server_url(name: str, *, user: str | None = None) -> str:
    db = settings.DATABASES["default"]
    return (
        f"postgres://{user or db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{name}"
    )


def _manage(*args: str, database_url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _exists(name: str) -> bool:
    with psycopg.connect(_server_url("postgres").replace("postgres://", "postgresql://")) as c:
        return (
            c.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None
        )


def test_missing_database_is_created_once_then_left_alone():
    name = f"{settings.DATABASES['default']['NAME']}_ensure_{uuid.uuid4().hex[:8]}"
    url = _server_url(name)
    assert not _exists(name)
    try:
        first = _manage("ensure_database", database_url=url)
        assert first.returncode == 0, first.stderr
        assert f"created database '{name}'" in first.stdout
        assert _exists(name)
        again = _manage("ensure_database", database_url=url)
        assert again.returncode == 0 and again.stdout == ""
    finally:
        with psycopg.connect(
            _server_url("postgres").replace("postgres://", "postgresql://"), autocommit=True
        ) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}"')


def test_a_database_that_cannot_be_created_is_one_clear_line():
    result = _manage(
        "ensure_database", database_url=_server_url("mb_never_made", user="no_such_role")
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "database 'mb_never_made'" in lines[0] and "could not be created" in lines[0]
    assert "createdb -h" in lines[0]
