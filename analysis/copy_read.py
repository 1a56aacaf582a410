"""A study's scores as NumPy arrays, read with PostgreSQL's binary COPY, one row per rating.

The reports read every score of a study: 2.9 million at paper scale. Through the DB-API every
row becomes a Python tuple of Python ints, and even a binary COPY hands each row to Python as
one protocol message, which took longer than the query itself. So PostgreSQL packs each
rating's scores into one fixed-size record (``packed_rating_scores``), and NumPy reads the
stream in blocks as it arrives, so the raw bytes of the whole result are never held at once.
Other databases, and a result whose records are not all the expected size, take the plain
row-by-row read (``plain_columns``): the arrays are the same either way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import QuerySet

from annotation.models import Rating

# Binary COPY: an 11-byte signature, 4 bytes of flags, 4 bytes of header extension length (0),
# then per row a 16-bit field count and per field a 32-bit length and the value; a 16-bit -1
# ends the data.
_HEADER = 19
_BLOCK = 8 << 20  # parse every ~8 MB that arrived


class _NotFixedSize(Exception):
    """A record that is not the expected size: the plain path reads the rows instead."""


def _records(statement: str, record: np.dtype) -> Iterator[np.ndarray]:
    """The records of a binary COPY, in blocks of about _BLOCK bytes (each block a copy, so
    the stream's buffer is released as it goes). Raises _NotFixedSize when the stream is not
    a whole number of `record`s (the caller checks each record's field sizes)."""
    buffer = bytearray()
    header_left = _HEADER

    def take(usable: int) -> np.ndarray:
        block = np.frombuffer(bytes(buffer[:usable]), dtype=record)
        del buffer[:usable]
        return block

    with connection.cursor() as cursor, connection.wrap_database_errors:
        with cursor.copy(statement) as copy:
            for data in copy:
                if header_left:
                    skip = min(header_left, len(data))
                    header_left -= skip
                    data = data[skip:]
                buffer += data
                if len(buffer) >= _BLOCK:
                    yield take(len(buffer) - len(buffer) % record.itemsize)
    usable = len(buffer) - 2  # the 16-bit end marker
    if header_left or usable < 0 or usable % record.itemsize or buffer[usable:] != b"\xff\xff":
        raise _NotFixedSize
    if usable:
        yield take(usable)


def bind(query: str, params: Sequence[object] | Mapping[str, object]) -> str:
    """`query` with its parameters bound as SQL literals by psycopg. COPY takes no server-side
    parameters, and Django's debugging cursor (DEBUG, tests counting queries) passes a COPY
    statement on without its parameters."""
    connection.ensure_connection()
    return psycopg.ClientCursor(connection.connection).mogrify(query, params)


def plain_columns(rows: QuerySet[Any, Any], width: int) -> list[np.ndarray]:
    """The columns of a ``values_list`` queryset of ``width`` integer columns, one int64 array
    per column, read row by row (any database; the packed read's fallback)."""
    table = np.array(list(rows), dtype=np.int64).reshape(-1, width)
    return [table[:, i].copy() for i in range(width)]


@dataclass(frozen=True)
class RatingScores:
    """Scores with the ids of their rating: ``rating_columns`` hold one value per rating
    (conversation, responder, rater ids); ``at`` gives each score's rating as an index into
    them; ``attribute`` and ``value`` are per score."""

    rating_columns: tuple[np.ndarray, np.ndarray, np.ndarray]
    at: np.ndarray
    attribute: np.ndarray
    value: np.ndarray


def packed_rating_scores(ratings: QuerySet[Rating], *, per_rating: int) -> RatingScores | None:
    """The scores of ``ratings`` (a Rating queryset) with their ratings' conversation,
    responder and rater ids, read as one row per rating on PostgreSQL; None where that is not
    possible (the caller then reads the score rows).

    Every row crossing from PostgreSQL to Python costs about a microsecond in the driver, and
    a rating has one score row per attribute: PostgreSQL packs a rating's scores into one
    array of ``attribute_id << 16 | value`` (a value is a 16-bit SmallIntegerField), padded
    with zeros to ``per_rating`` entries so that every record has the same size and NumPy
    reads them in blocks. A rating with more scores than ``per_rating`` makes the whole read
    fall back. Ratings come in id order: which responders and conversations come first sets
    their order in the bootstrap's arrays, so it must not depend on the query plan.
    """
    if connection.vendor != "postgresql" or per_rating < 1:
        return None
    empty = np.empty(0, dtype=np.int64)
    try:
        sql, params = ratings.values("id").query.sql_with_params()
    except EmptyResultSet:
        return RatingScores((empty, empty, empty), empty, empty, empty)
    n = int(per_rating)
    statement = bind(
        f"""COPY (
            SELECT rp.conversation_id::int8, rp.responder_id::int8, r.rater_id::int8,
                   packed.n, packed.items
            FROM (
                SELECT s.rating_id, count(*)::int8 AS n,
                       (array_agg((s.attribute_id::int8 << 16) | (s.value::int8 & 65535))
                        || array_fill(0::int8, ARRAY[{n}]))[1:{n}] AS items
                FROM annotation_score s WHERE s.rating_id IN ({sql})
                GROUP BY s.rating_id
            ) AS packed
            JOIN annotation_rating r ON r.id = packed.rating_id
            JOIN annotation_response rp ON rp.id = r.response_id
            ORDER BY packed.rating_id
        ) TO STDOUT (FORMAT binary)""",
        params,
    )
    element = np.dtype([("len", ">i4"), ("v", ">i8")])
    record = np.dtype(
        [
            ("count", ">i2"),
            ("len0", ">i4"), ("conversation", ">i8"),
            ("len1", ">i4"), ("responder", ">i8"),
            ("len2", ">i4"), ("rater", ">i8"),
            ("len3", ">i4"), ("n", ">i8"),
            ("len4", ">i4"), ("ndim", ">i4"), ("flags", ">i4"), ("oid", ">u4"),
            ("dim", ">i4"), ("lbound", ">i4"), ("items", element, (n,)),
        ]
    )  # fmt: skip

    def fixed_size(block: np.ndarray) -> bool:
        return bool(
            (block["count"] == 5).all()
            and all((block[f"len{i}"] == 8).all() for i in range(4))
            and (block["len4"] == record["items"].itemsize + 20).all()
            and (block["ndim"] == 1).all()
            and (block["flags"] == 0).all()  # no NULL element
            and (block["dim"] == n).all()
            and (block["items"]["len"] == 8).all()
            and (block["n"] <= n).all()  # nothing cut off by the padding's [1:n]
        )

    blocks: list[np.ndarray] = []
    fixed = True
    try:
        for block in _records(statement, record):  # read to the end: a COPY cannot stop midway
            fixed = fixed and fixed_size(block)
            if fixed:
                blocks.append(block[["conversation", "responder", "rater", "items"]])
    except _NotFixedSize:
        return None
    if not fixed:
        return None
    if not blocks:
        return RatingScores((empty, empty, empty), empty, empty, empty)
    rows = np.concatenate(blocks)
    packed = rows["items"]["v"].astype(np.int64).ravel()  # n entries per rating
    used = packed != 0  # the padding (no attribute has id 0)
    at = np.repeat(np.arange(len(rows), dtype=np.int64), n)[used]
    packed = packed[used]
    value = (packed & 0xFFFF).astype(np.uint16).view(np.int16).astype(np.int64)
    columns = (
        rows["conversation"].astype(np.int64),
        rows["responder"].astype(np.int64),
        rows["rater"].astype(np.int64),
    )
    return RatingScores(columns, at, packed >> 16, value)
