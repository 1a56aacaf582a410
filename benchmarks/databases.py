"""A throwaway PostgreSQL database per benchmark, on the server DATABASE_URL points at."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def database_env(name: str) -> dict[str, str]:
    """The environment of a `manage.py` subprocess that works on database `name`."""
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    return {**os.environ, "DATABASE_URL": base.rsplit("/", 1)[0] + "/" + name}


def database_recreate(name: str) -> None:
    """Drop database `name` if it exists, create it and migrate it."""
    for sql in (f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}"):
        subprocess.run(
            ["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-c", sql],
            check=True,
        )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0", "--skip-checks"],
        cwd=ROOT,
        env=database_env(name),
        check=True,
    )
