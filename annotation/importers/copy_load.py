"""Bulk inserts for the importers through PostgreSQL's COPY.

``bulk_insert(objs)`` stands in for ``Model.objects.bulk_create(objs)``: on PostgreSQL the rows
are streamed with ``COPY … FROM STDIN`` into a temporary staging table shaped like the target
and moved with one ``INSERT … SELECT``, so every constraint, index and foreign key of the
target checks them exactly as before; on SQLite it is bulk_create. Profiling an import of
10,000 conversations × 10 responses showed most of its time in bulk_create turning each object
into SQL parameters and PostgreSQL parsing multi-row INSERTs; COPY skips both.

Guarantees are those of the caller's transaction: the importers run in ``transaction.atomic``
and check everything they can before writing, so a COPY or INSERT that fails (a constraint, a
value too long for its column) raises Django's usual database error and the whole import is
rolled back — nothing is written (tests/annotation/test_copy_load.py).

Each object gets its ``pk`` as bulk_create gives it, in the caller's order (see _copy_rows for
why the order holds).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from django.db import connection, transaction
from django.db.models import DateTimeField, JSONField, Model
from django.utils import timezone

_M = TypeVar("_M", bound=Model)


def bulk_insert(objs: Sequence[_M], *, batch_size: int | None = None) -> Sequence[_M]:
    """Insert `objs` (all of one model, none saved yet) and set their primary keys; return them.

    Must run inside a transaction (the importers' ``atomic``): the staging table is dropped at
    the end, and a failure leaves the caller to roll back.
    """
    if not objs:
        return objs
    model = type(objs[0])
    if connection.vendor != "postgresql":
        return model._default_manager.bulk_create(objs, batch_size=batch_size)
    return _copy_insert(model, objs)


def bulk_insert_values(
    model: type[Model], columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> list[int]:
    """Insert rows given as tuples of values for `columns` (attnames: ``rating_id``, not
    ``rating``); every other column gets its field's default. Returns the new primary keys in
    the rows' order. For the large tables (responses, scores), where building a model object
    per row cost more than the COPY itself."""
    rows = list(rows)
    if not rows:
        return []
    if connection.vendor != "postgresql":
        objs = [model(**dict(zip(columns, row, strict=True))) for row in rows]
        return [obj.pk for obj in model._default_manager.bulk_create(objs)]
    given = {name: i for i, name in enumerate(columns)}
    now = timezone.now()
    # Callable[..., Any]: the lambdas bind their values as default arguments.
    getters: list[Callable[..., Any]] = []
    default: Any
    for field in _fields(model):
        if field.attname in given:
            index = given[field.attname]
            getters.append(lambda row, index=index: row[index])
            continue
        if isinstance(field, DateTimeField) and (field.auto_now or field.auto_now_add):
            default = now
        else:
            default = field.get_default()
            if isinstance(field, JSONField) and default is not None:
                default = json.dumps(default, cls=field.encoder)
        getters.append(lambda row, default=default: default)
    return _copy_rows(model, [[get(row) for get in getters] for row in rows])


#: PostgreSQL's own rule for when autovacuum re-analyzes a table (autovacuum_analyze_threshold
#: and autovacuum_analyze_scale_factor at their defaults): 50 rows + 10 % of the table.
ANALYZE_MIN_ROWS = 50
ANALYZE_SHARE = 0.10


def analyze_after_commit(written: Mapping[type[Model], int]) -> None:
    """After the caller's transaction commits, ANALYZE each table that it changed by more than
    PostgreSQL's autovacuum rule (ANALYZE_MIN_ROWS + ANALYZE_SHARE of the table's rows, counting
    ``written`` rows and whatever else was changed since the last ANALYZE), and each table of
    ``written`` that was never analyzed (callers list the small tables they touched, with 1).

    Why: right after a bulk load the planner has no statistics for the new rows (autovacuum is
    off on some servers and, where it is on, only catches up later): the report queries after
    an import ran 10x slower until an ANALYZE. PostgreSQL's documentation advises running
    ANALYZE after a bulk load. A rolled-back write analyzes nothing; SQLite is left alone.
    """
    if connection.vendor != "postgresql" or not any(written.values()):
        return
    transaction.on_commit(lambda: _analyze_stale(dict(written)))


def _analyze_stale(written: Mapping[type[Model], int]) -> None:
    with connection.cursor() as cursor:
        # Statistics views are read from a snapshot cached for the transaction: without a fresh
        # one, a second decision in the same transaction would count changes an ANALYZE made
        # since then has already cleared.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        for model, rows in written.items():
            table = model._meta.db_table
            cursor.execute(
                "SELECT c.reltuples, coalesce(s.n_mod_since_analyze, 0) FROM pg_class c "
                "LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = %s::regclass",
                [table],
            )
            reltuples, modified = cursor.fetchone()
            # reltuples is -1 before a table's first ANALYZE: the planner then guesses its size
            # from its pages (hundreds of rows for a table of five judges) and joins the small
            # lookup tables (raters, responders, the study, its rubric) in the wrong order, so a
            # never-analyzed table is analyzed whatever was written (a few ms for a small one).
            # The statistics counter may lag our own rows by up to a second: the larger counts.
            if reltuples < 0 or max(rows, modified) > (
                ANALYZE_MIN_ROWS + ANALYZE_SHARE * reltuples
            ):
                cursor.execute(f"ANALYZE {connection.ops.quote_name(table)}")


def _value_getters(model: type[Model], objs: Sequence[Model]) -> list[Callable[..., Any]]:
    """What bulk_create would write for each column, computed once per column where it can be.
    (Callable[..., Any]: the lambdas bind their values as default arguments.)"""
    now = timezone.now()
    getters: list[Callable[..., Any]] = []
    for field in _fields(model):
        attname = field.attname
        if isinstance(field, DateTimeField) and (field.auto_now or field.auto_now_add):
            for obj in objs:  # as pre_save would, so the objects match the stored rows
                setattr(obj, attname, now)
            getters.append(lambda obj, now=now: now)
        elif isinstance(field, JSONField):
            encoder = field.encoder

            def as_json(obj, attname=attname, encoder=encoder):
                value = getattr(obj, attname)
                return None if value is None else json.dumps(value, cls=encoder)

            getters.append(as_json)
        else:
            getters.append(lambda obj, attname=attname: getattr(obj, attname))
    return getters


def _fields(model: type[Model]) -> list:
    return [f for f in model._meta.concrete_fields if not f.primary_key]


def _copy_insert(model: type[_M], objs: Sequence[_M]) -> Sequence[_M]:
    getters = _value_getters(model, objs)
    ids = _copy_rows(model, [[get(obj) for get in getters] for obj in objs])
    for id_, obj in zip(ids, objs, strict=True):
        obj.pk = id_
        obj._state.adding = False
        obj._state.db = connection.alias
    return objs


def _copy_rows(model: type[Model], rows: list[list[Any]]) -> list[int]:
    """COPY `rows` (values of every non-key column, in field order) into a staging table, then
    INSERT … SELECT them in that order; return the new primary keys in the rows' order.

    The keys come from the table's sequence as each row is inserted, in the order of
    ``ORDER BY seq``; a sequence only grows, so the returned keys sorted ascending are the rows'
    keys in order whatever order RETURNING lists them in (taking them beforehand with one
    nextval per row cost a fifth of a second per 70,000 rows).
    """
    quote = connection.ops.quote_name
    pk_column = model._meta.pk.column
    assert pk_column is not None  # a concrete model's key is a column
    table = quote(model._meta.db_table)
    columns = ", ".join(quote(f.column) for f in _fields(model))
    stage = quote(f"_stage_{model._meta.db_table}")
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {stage}")
        cursor.execute(
            f"CREATE TEMPORARY TABLE {stage} AS SELECT 0 AS seq, {columns} FROM {table} "
            "WITH NO DATA"
        )
        with connection.wrap_database_errors:
            with cursor.copy(f"COPY {stage} (seq, {columns}) FROM STDIN") as copy:
                write = copy.write_row
                for seq, row in enumerate(rows):
                    write((seq, *row))
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {stage} ORDER BY seq "
            f"RETURNING {quote(pk_column)}"
        )
        ids = sorted(row[0] for row in cursor.fetchall())
        cursor.execute(f"DROP TABLE {stage}")
    if len(ids) != len(rows):  # cannot happen: an INSERT is all or nothing
        raise RuntimeError(f"{model._meta.db_table}: {len(ids)} rows inserted of {len(rows)}")
    return ids
