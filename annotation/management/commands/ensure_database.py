"""`manage.py ensure_database`: create the PostgreSQL database DATABASE_URL names if it is missing.

`bin/up` runs it before `migrate`, so pointing the platform at a fresh PostgreSQL server is
enough (migrate alone stops with a traceback when the database does not exist). It connects to
the server's maintenance database, as Django's test runner does to create test databases. SQLite
needs nothing: the file is created on first use.
"""

from __future__ import annotations

import warnings
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection


class Command(BaseCommand):
    help = "Create the PostgreSQL database named in DATABASE_URL when it does not exist yet."

    def handle(self, *args: Any, **options: Any) -> None:
        # Django warns when the maintenance database is unreachable and falls back to the named
        # one; the error below already says what went wrong, in one line.
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="django.db")
        if connection.vendor != "postgresql":
            return
        params = connection.settings_dict
        name = params["NAME"]
        where = f"{params.get('HOST') or 'localhost'}:{params.get('PORT') or 5432}"
        try:
            with connection._nodb_cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
                if cursor.fetchone():
                    return
                # CREATE DATABASE takes no parameters: the name is quoted as an identifier.
                cursor.execute(f"CREATE DATABASE {connection.ops.quote_name(name)}")
        except DatabaseError as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CommandError(
                f"database {name!r} on {where} does not exist and could not be created "
                f"({reason}); create it with: createdb -h {where.split(':')[0]} "
                f"-p {where.split(':')[1]} -U {params.get('USER') or 'postgres'} {name}"
            ) from None
        self.stdout.write(f"created database {name!r} on {where}")
