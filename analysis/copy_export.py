"""The long and wide score CSV straight from PostgreSQL's ``COPY (SELECT …) TO STDOUT``.

Same bytes as the Python path in analysis/export.py (tests/analysis/test_copy_export.py compares
them on a fixture full of awkward cells), at the speed of the database: the rows are joined,
sorted and formatted as CSV by PostgreSQL, and Python only passes the bytes on. Profiling the
Python path showed most of an export's time in building a tuple per score and formatting it
with the csv module; a `\\copy` of the same SELECT took a third of the time.

What the SQL has to reproduce exactly:

- Formula-safe cells (annotation/csvsafe.py): every text cell goes through ``SAFE``, the SQL form
  of csvsafe's rule written in its docstring. Numbers (ids, scores, positions) are not text and
  are never touched, as in Python.
- Empty text is written as nothing, like Python's csv module; COPY would write ``""`` for an
  empty string, so text cells are ``NULLIF(…, '')`` first (NULL is written as nothing).
- Quoting: COPY quotes a cell holding a delimiter, a quote, ``\\n`` or ``\\r``. Python's csv
  module (before 3.12) does not quote a lone ``\\r``, so export.py quotes those rows itself.
- Clinicians as their study code unless identified. Every clinician has one from the moment
  they joined the study (annotation.rater_codes), committed with or before their first work;
  the SELECT runs in a REPEATABLE READ snapshot first checked to hold no uncoded clinician, and
  one found (a bug of a write path) refuses the export (UncodedClinician) rather than write
  anything. A name never leaks through a missing code.
- Timestamps: ISO-8601 UTC to the microsecond when identified, otherwise the day (UTC).
- Which ratings count (annotation/analysed.py, the default "first" rule): no practice
  conversation, and a clinician's first rating of a response (judge runs keep every repeat).
- The column after it, a response's estimated time on task, is filled in identified exports
  only; those take the Python path, which computes it (export.long_csv).
- The final score of the response × attribute and its provenance
  (annotation.adjudication_selectors.final_scores, docs/adjudication.md) come last, the same on
  every row of that response and attribute; ``_final_columns`` is that selector's rule in SQL
  (the mean as float8, whose text is Python's shortest repr of the same double).

The header is written by Python (through csvsafe) so that it is the same text in both paths.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.db.models import Model

from analysis.copy_read import bind
from analysis.pseudonyms import UncodedClinician
from annotation.adjudication_selectors import ADJUDICATED, AWAITING, CONSENSUS, SINGLE
from annotation.csvsafe import safe_cell
from annotation.models import (
    Adjudication,
    AssignmentItem,
    Attribute,
    AttributeThreshold,
    Conversation,
    Rater,
    RaterCode,
    Rating,
    Responder,
    Response,
    Score,
    Study,
)

if TYPE_CHECKING:
    from analysis.export import ExportCount

# The header is yielded alone, then chunks of at most CHUNK_ROWS rows (as in export.py), so a
# download starts at once and memory stays at one chunk whatever the size of the study.
CHUNK_ROWS = 2000

# csvsafe's rule in SQL (see its docstring): a text cell starting with = + - @ tab CR or their
# full-width forms, and not a plain decimal number, gets one apostrophe in front; a ; or , that
# a formula character follows (after spaces and quotes) gets one after it, unless a plain
# number follows up to the next separator (rule 5: a ;-separated spreadsheet splits there).
_DANGEROUS = "^[-=+@\t\r\uff1d\uff0b\uff0d\uff20]"
_NUMBER = "^[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?$"
_GAP = '[ \t\r\n"]*'
_INNER = (
    f"([,;])(?={_GAP}[-=+@\uff1d\uff0b\uff0d\uff20])"
    f"(?!{_GAP}[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?{_GAP}([,;]|$))"
)
# The separator matched, then the apostrophe (regexp_replace's back reference).
_INNER_REPLACEMENT = "\\1'"


def safe(expression: str) -> str:
    """SQL for the formula-safe, empty-as-NULL form of a text expression."""
    value = f"NULLIF({expression}, '')"
    inner = f"regexp_replace({value}, {_literal(_INNER)}, {_literal(_INNER_REPLACEMENT)}, 'g')"
    return (
        f"CASE WHEN {value} ~ {_literal(_DANGEROUS)} AND {value} !~ {_literal(_NUMBER)} "
        f"THEN '''' || {inner} ELSE {inner} END"
    )


def _literal(text: str) -> str:
    """A standard-conforming SQL string literal (only quotes need doubling)."""
    return "'" + text.replace("'", "''") + "'"


def _table(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _stamp(column: str, *, identified: bool) -> str:
    if identified:
        return f"""to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""
    return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


def _from_where(joins: str = "") -> str:
    return f"""
        FROM {_table(Score)} s
        JOIN {_table(Rating)} ra ON ra.id = s.rating_id
        JOIN {_table(Response)} rp ON rp.id = ra.response_id
        JOIN {_table(Conversation)} c ON c.id = rp.conversation_id
        JOIN {_table(Rater)} rt ON rt.id = ra.rater_id
        LEFT JOIN {_table(RaterCode)} rc ON rc.rater_id = ra.rater_id AND rc.study_id = c.study_id
        {joins}
        WHERE c.study_id = %(study)s AND ra.status = %(complete)s
          AND NOT c.practice AND (ra.run_id IS NOT NULL OR ra.repeat = 0)"""


def _rater(*, identified: bool) -> tuple[str, str]:
    """SQL for the rater's label and the rater part of the sort order (see export.py: codes
    sort pseudonymous rows, never names)."""
    if identified:
        return "rt.name", "rt.name"
    clinician = _literal(Rater.Kind.CLINICIAN)
    return (
        f"CASE WHEN rt.kind = {clinician} THEN rc.code ELSE rt.name END",
        "rt.kind, rc.number, rt.name",
    )


def _spreads_sql() -> str:
    """(response, attribute) → lowest, highest, mean (float8) and number of the clinicians'
    scores that count, over the study (annotation.adjudication_selectors._spreads)."""
    return f"""
        SELECT ra.response_id, s.attribute_id, min(s.value) AS lo, max(s.value) AS hi,
               avg(s.value)::float8 AS mean, count(*) AS n
        FROM {_table(Score)} s
        JOIN {_table(Rating)} ra ON ra.id = s.rating_id
        JOIN {_table(Response)} rp ON rp.id = ra.response_id
        JOIN {_table(Conversation)} c ON c.id = rp.conversation_id
        JOIN {_table(Rater)} rt ON rt.id = ra.rater_id
        WHERE c.study_id = %(study)s AND ra.status = %(complete)s AND NOT c.practice
          AND ra.run_id IS NULL AND ra.repeat = 0 AND rt.kind = %(clinician)s
        GROUP BY ra.response_id, s.attribute_id"""


def _final_joins(response: str, attribute: str) -> str:
    """LEFT JOINs of the clinicians' spread (sp), the adjudication (adj) and the attribute's
    threshold (th) of the (response, attribute) the SQL expressions name; plain equality joins,
    so the planner joins them by hash or merge whatever the study's size."""
    return f"""
        LEFT JOIN ({_spreads_sql()}) sp
          ON sp.response_id = {response} AND sp.attribute_id = {attribute}
        LEFT JOIN {_table(Adjudication)} adj
          ON adj.study_id = %(study)s AND adj.response_id = {response}
         AND adj.attribute_id = {attribute}
        LEFT JOIN {_table(AttributeThreshold)} th
          ON th.study_id = %(study)s AND th.attribute_id = {attribute}"""


def _final_columns() -> tuple[str, str]:
    """SQL of the final score (float8, NULL while awaiting adjudication or with nothing to
    settle) and its provenance (NULL with nothing), over _final_joins: the rule of
    annotation.adjudication_selectors.final_scores."""
    agree = "sp.hi - sp.lo < COALESCE(th.points, %(threshold)s)"
    score = f"""CASE WHEN adj.id IS NOT NULL THEN adj.final_score::float8
                    WHEN sp.n = 1 THEN sp.lo::float8
                    WHEN {agree} THEN sp.mean END"""
    provenance = f"""CASE WHEN adj.id IS NOT NULL THEN {_literal(ADJUDICATED)}
                    WHEN sp.n = 1 THEN {_literal(SINGLE)}
                    WHEN {agree} THEN {_literal(CONSENSUS)}
                    WHEN sp.n > 1 THEN {_literal(AWAITING)} END"""
    return score, provenance


def _final_scores_sql() -> str:
    """One row per (response, attribute) of the study that clinicians scored or an adjudicator
    settled: ``final_score`` and ``provenance`` (_final_columns). Parameters: study, complete,
    clinician, threshold (the study's)."""
    score, provenance = _final_columns()
    keys = f"""
        SELECT response_id, attribute_id FROM ({_spreads_sql()}) k
        UNION
        SELECT response_id, attribute_id FROM {_table(Adjudication)} WHERE study_id = %(study)s"""
    return f"""
        SELECT k.response_id, k.attribute_id, {score} AS final_score, {provenance} AS provenance
        FROM ({keys}) k
        {_final_joins("k.response_id", "k.attribute_id")}"""


def long_sql(*, identified: bool) -> str:
    label, rater_order = _rater(identified=identified)
    joins = (
        f"JOIN {_table(Responder)} rs ON rs.id = rp.responder_id "
        f"JOIN {_table(Attribute)} at ON at.id = s.attribute_id "
        + _final_joins("ra.response_id", "s.attribute_id")
    )
    final_score, provenance = _final_columns()
    return f"""
        SELECT %(name)s::text, {safe("c.external_id")}, ra.response_id, {safe("rs.key")},
               {safe("rs.family")}, {safe(label)}, {safe("rt.kind")}, {safe("ra.source")},
               ra.run_id, ra.repeat, {safe("at.name")}, s.value, {safe("ra.rationale")},
               (SELECT ai.position FROM {_table(AssignmentItem)} ai
                 WHERE ai.assignment_id = ra.assignment_id AND ai.response_id = ra.response_id
                 LIMIT 1),
               {_stamp("ra.created_at", identified=identified)},
               {_stamp("ra.updated_at", identified=identified)},
               NULL,  -- active_seconds: pseudonymous exports leave it empty
               {final_score}, {provenance}
        {_from_where(joins)}
        ORDER BY c.id, rs.key, {rater_order}, ra.run_id, ra.repeat, at.position"""


def wide_sql(*, identified: bool, cells: list[tuple[int, int]]) -> str:
    """One row per conversation × rating group, one aggregate per (responder id, attribute id)
    cell, in the header's order; then the conversation's final score of each cell and then
    their provenance, computed once per conversation and joined to each of its rows."""
    label, rater_order = _rater(identified=identified)
    values = "".join(
        f",\n max(s.value) FILTER (WHERE rp.responder_id = {int(r)} "
        f"AND s.attribute_id = {int(a)}) AS v{n}"
        for n, (r, a) in enumerate(cells)
    )
    conditions = (
        "(SELECT string_agg(e.value, ';' ORDER BY e.n) FROM jsonb_array_elements_text("
        "CASE WHEN jsonb_typeof(c.conditions) = 'array' THEN c.conditions END"
        ") WITH ORDINALITY AS e(value, n))"
    )
    order = rater_order.split(", ")
    keys = "".join(f", {expression} AS k{n}" for n, expression in enumerate(order))
    grouped = f"""
        SELECT c.id AS cid{keys}, %(name)s::text AS o0, {safe("c.external_id")} AS o1,
               {safe("c.source")} AS o2, {safe(conditions)} AS o3, {safe(label)} AS o4,
               {safe("rt.kind")} AS o5, ra.run_id AS o6, ra.repeat AS o7{values}
        {_from_where()}
        GROUP BY c.id, rt.id, rc.id, ra.run_id, ra.repeat"""
    columns = [f"w.o{n}" for n in range(8)] + [f"w.v{n}" for n in range(len(cells))]
    join = ""
    if cells:
        # Per conversation, not per rating group: aggregating per score row would repeat the
        # same work for every rater's row.
        per_conversation = ",\n".join(
            [
                f"max(fs.final_score) FILTER (WHERE r2.responder_id = {int(r)} "
                f"AND fs.attribute_id = {int(a)}) AS f{n}"
                for n, (r, a) in enumerate(cells)
            ]
            + [
                f"max(fs.provenance) FILTER (WHERE r2.responder_id = {int(r)} "
                f"AND fs.attribute_id = {int(a)}) AS p{n}"
                for n, (r, a) in enumerate(cells)
            ]
        )
        join = f"""LEFT JOIN (
            SELECT r2.conversation_id, {per_conversation}
            FROM ({_final_scores_sql()}) fs
            JOIN {_table(Response)} r2 ON r2.id = fs.response_id
            GROUP BY r2.conversation_id
        ) cf ON cf.conversation_id = w.cid"""
        columns += [f"cf.f{n}" for n in range(len(cells))]
        columns += [f"cf.p{n}" for n in range(len(cells))]
    order_by = ", ".join(["w.cid", *(f"w.k{n}" for n in range(len(order))), "w.o6", "w.o7"])
    return f"""
        SELECT {", ".join(columns)}
        FROM ({grouped}) w
        {join}
        ORDER BY {order_by}"""


def _uncoded_clinician_sql() -> str:
    return f"""
        SELECT ra.rater_id {_from_where()}
            AND rt.kind = %(clinician)s AND rc.id IS NULL
        LIMIT 1"""


@contextmanager
def _snapshot() -> Iterator[None]:
    """One consistent view of the study for the check and the COPY. Inside a caller's
    transaction (tests, or a caller that wants its own snapshot) the caller's isolation holds."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def copy_csv(
    *,
    study: Study,
    query: str,
    params: dict[str, Any],
    identified: bool,
    header: str,
    count: ExportCount,
) -> Iterator[str]:
    """Header, then the rows of `query` as CSV in chunks of CHUNK_ROWS; `count.rows` counts the
    rows sent. Reads only: UncodedClinician if the snapshot holds a clinician without a code."""
    params = {
        **params,
        "study": study.pk,
        "complete": Rating.Status.COMPLETE,
        "clinician": Rater.Kind.CLINICIAN,
        "name": safe_cell(study.name) or None,
        "threshold": study.adjudication_threshold,
    }
    statement = f"COPY ({query}) TO STDOUT WITH (FORMAT csv)"
    with _snapshot():
        with connection.cursor() as cursor:
            if not identified:
                cursor.execute(_uncoded_clinician_sql(), params)
                uncoded = cursor.fetchone()
                if uncoded is not None:
                    raise UncodedClinician(study_id=study.pk, rater_id=uncoded[0])
            yield header
            yield from _stream(cursor, statement, params, count)
            count.done = True


def _stream(
    cursor: CursorWrapper, statement: str, params: dict[str, Any], count: ExportCount
) -> Iterator[str]:
    buffer = bytearray()
    rows = 0
    with connection.wrap_database_errors, cursor.copy(bind(statement, params)) as copy:
        # Each COPY data message is one row.
        for data in copy:
            buffer += data
            rows += 1
            if rows == CHUNK_ROWS:
                count.rows += rows
                rows = 0
                yield buffer.decode()
                buffer.clear()
    count.rows += rows
    if buffer:
        yield buffer.decode()
