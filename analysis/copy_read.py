"""Integer rows of a query as a NumPy array, read with PostgreSQL's binary COPY.

The report's selector reads one row of five integer ids per score. Building a Python tuple per
row and then an array from them took most of the time of a report at paper scale (2.9 million
scores); ``COPY (…) TO STDOUT (FORMAT binary)`` of the same query arrives as fixed-size records
that NumPy reads in one call. Other databases, and any row that is not what is expected (a NULL),
take the plain path: the result is the same array.
"""

from __future__ import annotations

import numpy as np
import psycopg
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import QuerySet

# Binary COPY: an 11-byte signature, 4 bytes of flags, 4 bytes of header extension length (0),
# then per row a 16-bit field count and per field a 32-bit length and the value; a 16-bit -1
# ends the data. Every value here is cast to int8, so every row has the same size.
_HEADER = 19
_TRAILER = 2


def int_rows(rows: QuerySet, width: int) -> np.ndarray:
    """The rows of a values_list queryset of `width` integer columns, as an (n, width) int64
    array, in the queryset's order."""
    if connection.vendor != "postgresql":
        return _plain(rows, width)
    try:
        sql, params = rows.query.sql_with_params()
    except EmptyResultSet:  # a filter that can match nothing (e.g. an empty IN list)
        return np.empty((0, width), dtype=np.int64)
    names = ", ".join(f"c{i}" for i in range(width))
    casts = ", ".join(f"c{i}::int8" for i in range(width))
    statement = bind(
        f"COPY (SELECT {casts} FROM ({sql}) AS q({names})) TO STDOUT (FORMAT binary)", params
    )
    chunks = []
    with connection.cursor() as cursor, connection.wrap_database_errors:
        with cursor.copy(statement) as copy:
            for data in copy:
                chunks.append(bytes(data))
    data = b"".join(chunks)
    record = np.dtype(
        [("count", ">i2")]
        + [
            (f, t) for i in range(width) for f, t in ((f"len{i}", ">i4"), (f"v{i}", ">i8"))
        ]  # fmt: skip
    )
    body = len(data) - _HEADER - _TRAILER
    if body < 0 or body % record.itemsize:
        return _plain(rows, width)  # a NULL (shorter record): the plain path says what it is
    records = np.frombuffer(data, dtype=record, offset=_HEADER, count=body // record.itemsize)
    lengths_ok = all((records[f"len{i}"] == 8).all() for i in range(width))
    if not lengths_ok or not (records["count"] == width).all():
        return _plain(rows, width)
    out = np.empty((len(records), width), dtype=np.int64)
    for i in range(width):
        out[:, i] = records[f"v{i}"]
    return out


def bind(query: str, params) -> str:
    """`query` with its parameters bound as SQL literals by psycopg. COPY takes no server-side
    parameters, and Django's debugging cursor (DEBUG, tests counting queries) passes a COPY
    statement on without its parameters."""
    connection.ensure_connection()
    return psycopg.ClientCursor(connection.connection).mogrify(query, params)


def _plain(rows: QuerySet, width: int) -> np.ndarray:
    return np.array(list(rows), dtype=np.int64).reshape(-1, width)
