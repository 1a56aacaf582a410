"""The test databases: migrated once, copied for each test process (docs/testing.md).

pytest-django migrates a fresh database for every xdist worker, and `bin/test` does it again for
the SQLite pass: every migration of every app, about ten CPU seconds each time, most of it
Python building the migration states. Here the first worker to get there migrates a template
instead, and every worker's database is a copy of it (PostgreSQL's CREATE DATABASE … TEMPLATE, a
file copy on SQLite), which takes a fraction of a second.

The template is kept for the next run under a name that says what it was built from: a hash of
the project's source (models, migrations, the receivers of post_migrate), the installed
packages' versions (the third-party apps' migrations) and the Python version. Whatever the
migrations could depend on changes the hash, and a different hash builds a new template (and
drops the old one), so a kept template is never stale; a fresh clone on a fresh database server
(CI) builds it once per run. `--create-db`, `--reuse-db` and `--nomigrations` keep
pytest-django's own handling.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import shutil
import sys
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[1]
# The first-party packages whose code the migrated database can depend on.
SOURCE_PACKAGES = ("mentalbench", "scoring", "annotation", "judging", "analysis", "accounts")


def fingerprint() -> str:
    """What the migrated database is built from, hashed (see the module's docstring)."""
    from django.conf import settings

    digest = hashlib.sha256()
    digest.update(sys.version.encode())
    digest.update(repr(settings.INSTALLED_APPS).encode())
    digest.update(settings.DATABASES["default"]["ENGINE"].encode())
    versions = sorted(
        f"{dist.metadata['Name']}=={dist.version}" for dist in importlib.metadata.distributions()
    )
    digest.update("\n".join(versions).encode())
    for package in SOURCE_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def is_sqlite(settings_dict: dict) -> bool:
    return settings_dict["ENGINE"].endswith("sqlite3")


def worker_database_name(settings_dict: dict) -> str:
    """This process's test database, as Django names it (pytest-django's xdist suffix and the
    SQLite file of tests/conftest.py are in TEST NAME by now)."""
    return settings_dict["TEST"].get("NAME") or "test_" + settings_dict["NAME"]


def migrate_into(connection, name: str, *, verbosity: int) -> None:
    """Create the test database `name` and migrate it, as Django's test runner would; the
    connection then points at it, closed."""
    original = connection.settings_dict["TEST"].get("NAME")
    connection.settings_dict["TEST"]["NAME"] = name
    try:
        connection.creation.create_test_db(
            verbosity=verbosity, autoclobber=True, serialize=False, keepdb=False
        )
    finally:
        connection.settings_dict["TEST"]["NAME"] = original
        connection.close()


def point_at(connection, name: str) -> None:
    """Make `name` the database the connection (and the settings, which Celery workers started
    by tests read) uses, as Django's create_test_db does for the database it creates."""
    from django.conf import settings

    connection.close()
    settings.DATABASES[connection.alias]["NAME"] = name
    connection.settings_dict["NAME"] = name


# ------------------------------------------------------------------------------ PostgreSQL


def postgres_admin(settings_dict: dict):
    """An autocommit connection to the server's `postgres` database (CREATE DATABASE cannot run
    inside a transaction, nor while connected to the database it copies)."""
    import psycopg

    params = {
        "dbname": "postgres",
        "host": settings_dict.get("HOST") or None,
        "port": settings_dict.get("PORT") or None,
        "user": settings_dict.get("USER") or None,
        "password": settings_dict.get("PASSWORD") or None,
    }
    return psycopg.connect(
        autocommit=True, **{key: value for key, value in params.items() if value is not None}
    )


def postgres_setup(connection, *, verbosity: int) -> None:
    from psycopg import sql

    settings_dict = connection.settings_dict
    target = worker_database_name(settings_dict)
    stem = f"test_{settings_dict['NAME']}_tpl_"
    template = stem + fingerprint()
    with postgres_admin(settings_dict) as admin:
        # One process at a time: the first builds the template, the others wait for it. The
        # lock goes with the admin connection.
        admin.execute("SELECT pg_advisory_lock(hashtext(%s))", [stem])
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template])
        if exists.fetchone() is None:
            stale = admin.execute(
                "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", [stem]
            ).fetchall()
            for (name,) in stale:
                admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            # Built under another name and renamed when done: a build that dies half-way
            # leaves no template that looks complete.
            building = template + "_building"
            migrate_into(connection, building, verbosity=verbosity)
            admin.execute(
                sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                    sql.Identifier(building), sql.Identifier(template)
                )
            )
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(target))
        )
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(target), sql.Identifier(template)
            )
        )
    point_at(connection, target)


# ------------------------------------------------------------------------------ SQLite


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def sqlite_setup(connection, *, verbosity: int, templates: Path) -> None:
    target = Path(worker_database_name(connection.settings_dict))
    stem = f"{Path(connection.settings_dict['NAME']).stem}-"
    template = templates / f"{stem}{fingerprint()}.sqlite3"
    templates.mkdir(parents=True, exist_ok=True)
    with file_lock(templates / f"{stem}lock"):
        if not template.exists():
            for stale in templates.glob(f"{stem}*.sqlite3*"):
                stale.unlink()
            building = template.with_name(template.name + ".building")
            migrate_into(connection, str(building), verbosity=verbosity)
            # The last connection closed has folded the write-ahead log into the file.
            building.replace(template)
    for leftover in (target, *(Path(f"{target}{suffix}") for suffix in ("-wal", "-shm"))):
        leftover.unlink(missing_ok=True)
    shutil.copyfile(template, target)
    point_at(connection, str(target))


def setup(*, verbosity: int, templates: Path) -> list[tuple]:
    """The test database of this process, a copy of the migrated template; returns what Django's
    teardown_databases takes."""
    from django.db import connections

    [alias] = connections  # the project has one database
    connection = connections[alias]
    old_name = connection.settings_dict["NAME"]
    if is_sqlite(connection.settings_dict):
        sqlite_setup(connection, verbosity=verbosity, templates=templates)
    else:
        postgres_setup(connection, verbosity=verbosity)
    return [(connection, old_name, True)]


# ------------------------------------------------------------------------------ flushing


# The tables post_migrate fills (content types and permissions) hashed as migrate left them,
# by database alias: taken once the test database exists (`seeded_remember`).
SEEDED: dict[str, list[tuple[str, str]]] = {}


def post_migrate_tables() -> list[str]:
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType

    return [ContentType._meta.db_table, Permission._meta.db_table]


def tables_digest(connection, tables: list[str]) -> list[tuple[str, str]]:
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            " UNION ALL ".join(
                f"(SELECT %s, md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                f"FROM {quote(table)} t)"
                for table in tables
            ),
            tables,
        )
        return cursor.fetchall()


def seeded_remember(connection) -> None:
    """Remember what post_migrate put in the fresh test database (PostgreSQL only), for
    `flush`. Only where post_migrate's receivers are Django's two (content types, permissions):
    another receiver might fill tables `flush` would not refill."""
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes
    from django.db.models.signals import post_migrate

    # Django keeps (key, weak reference or function, is async) per receiver.
    refs = [entry[1] for entry in post_migrate.receivers]
    receivers = {ref() if isinstance(ref, weakref.ReferenceType) else ref for ref in refs}
    if connection.vendor == "postgresql" and receivers == {create_permissions, create_contenttypes}:
        SEEDED[connection.alias] = tables_digest(connection, post_migrate_tables())


def flush(connection) -> bool:
    """Empty the test database after a transactional test, as Django's TransactionTestCase
    leaves it: every table empty but the content types and permissions post_migrate makes.

    Django truncates every table (67 here) and then runs post_migrate to make the content types
    and permissions again: about 0.7 CPU seconds a test, over half of it in PostgreSQL, and
    seconds of wall time on a busy disk. A test fills a few tables; this deletes the rows of
    those and leaves the content types and permissions where they are unchanged, which is the
    state Django's flush ends in. Returns False, having changed nothing, where it cannot tell
    (not PostgreSQL, the content types or permissions changed, a constraint refused): the
    caller then flushes as Django does.
    """
    from django.db import DatabaseError, transaction

    seeded = SEEDED.get(connection.alias)
    if seeded is None or tables_digest(connection, post_migrate_tables()) != seeded:
        return False
    kept = set(post_migrate_tables())
    tables = [
        table
        for table in connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        if table not in kept
    ]
    quote = connection.ops.quote_name
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(
                " UNION ALL ".join(
                    f"(SELECT %s WHERE EXISTS (SELECT 1 FROM {quote(table)}))" for table in tables
                ),
                tables,
            )
            filled = [table for (table,) in cursor.fetchall()]
            # Django's foreign keys are deferrable: checked at commit, when every row that
            # points at a deleted one is gone too.
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
            for table in filled:
                cursor.execute(f"DELETE FROM {quote(table)}")
    except DatabaseError:
        return False
    return True
