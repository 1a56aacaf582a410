"""Every score of a study as CSV, streamed in constant memory.

The same generators feed `manage.py export_ratings`, the dashboard's download button and the
API. Rows come from a server-side cursor (``QuerySet.iterator(chunk_size=…)``), are formatted
into a small buffer and yielded a chunk at a time, so memory does not grow with the study.
On PostgreSQL the rows come from ``COPY (SELECT …) TO STDOUT`` instead (analysis/copy_export.py):
the same bytes at the database's speed; the Python path below serves SQLite and is the reference
the COPY path is tested against. Only complete ratings are exported (drafts are a clinician's
unfinished work; invalid ratings have no scores — their raw text is in the admin).

By default clinicians appear as their study code (C01, …) and the timestamps as days; with
``identified=True`` (admins and users given the permission, audited by the caller) as their
names with exact timestamps. See analysis/pseudonyms.py.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.models import CharField, F, FilteredRelation, Func, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import TruncDate

from analysis import copy_export
from analysis.pseudonyms import RaterLabels
from annotation.adjudication_selectors import final_scores
from annotation.analysed import analysed_ratings_q
from annotation.csvsafe import safe_writer
from annotation.models import AssignmentItem, Rating, Responder, Score, Study
from annotation.time_on_task import response_active_seconds

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler, _AsSqlType

#: The last columns of the long CSV (see LONG_COLUMNS).
FINAL_COLUMNS = ("final_score", "final_score_provenance")
LONG_COLUMNS = (
    "study",
    "conversation",
    "response",
    "responder",
    "responder_family",
    "rater",
    "rater_kind",
    "rating_source",
    "run",
    "repeat",
    "attribute",
    "score",
    "rationale",
    "position",
    "created_at",
    "updated_at",
    # After the others, so that readers of the earlier columns are unaffected; identified
    # exports only.
    "active_seconds",
    # The final score of the row's response × attribute and where it came from
    # (docs/adjudication.md): the same on every row of that response and attribute, judges'
    # rows included; empty where no clinician scored it and nothing was adjudicated.
    *FINAL_COLUMNS,
)
#: Appended to the wide CSV per (responder, attribute) cell, final scores first, then their
#: provenance: ``<responder>_<attribute>`` + each suffix.
WIDE_FINAL_SUFFIXES = ("_final_score", "_final_score_provenance")
WIDE_KEYS = (
    "study",
    "conversation",
    "source",
    "conditions",
    "rater",
    "rater_kind",
    "run",
    "repeat",
)
CHUNK_ROWS = 2000


class IsoTimestamp(Func):
    """A timestamp as ISO-8601 UTC text, formatted by the database.

    Parsing 700k timestamps into datetimes and formatting them again took half the export's
    time; PostgreSQL's to_char does it for free. Other databases return their own text form.
    """

    output_field = CharField()

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> _AsSqlType:
        return self.as_sql(
            compiler,
            connection,
            template="to_char(%(expressions)s AT TIME ZONE 'UTC', "
            '\'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\')',
            **extra,
        )

    def as_sql(
        self,
        compiler: SQLCompiler,
        connection: BaseDatabaseWrapper,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra: Any,
    ) -> _AsSqlType:
        return super().as_sql(
            compiler,
            connection,
            function=function,
            template=template or "%(expressions)s",
            arg_joiner=arg_joiner,
            **extra,
        )


@dataclass
class ExportCount:
    """Filled in while a generator runs; read it after the last chunk for the audit log."""

    rows: int = 0
    done: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _scores(study: Study) -> QuerySet[Score]:
    # Real ratings only: never practice, and a clinician's first rating of each response.
    return Score.objects.filter(
        analysed_ratings_q("rating__"),
        rating__response__conversation__study=study,
        rating__status=Rating.Status.COMPLETE,
    )


def _day(field: F) -> TruncDate:
    """The day (UTC) of a timestamp: enough to study drift, without showing how long a
    clinician spent on each response."""
    return TruncDate(field, tzinfo=UTC)


def _with_rater_order(
    rows: QuerySet[Score], study: Study, identified: bool
) -> tuple[QuerySet[Score], tuple[str, ...]]:
    """The scores with their rater's study code joined, and the rater part of the sort order.

    Pseudonymous exports sort clinicians by code, not by name: rows sorted by name would let a
    reader work out the alphabetical order of the people behind the codes.
    """
    if identified:
        return rows, ("rating__rater__name",)
    rows = rows.annotate(
        study_code=FilteredRelation(
            "rating__rater__codes", condition=Q(rating__rater__codes__study=study)
        )
    )
    return rows, ("rating__rater__kind", "study_code__number", "rating__rater__name")


class _Writer:
    """safe_writer that also quotes cells holding a carriage return.

    Python's csv module (before 3.12) quotes a cell with a line feed but not one with a lone
    carriage return, which readers then take for the end of the row (rationales typed in a
    browser's text box may hold one). Such rows are written with a CR LF line terminator, which
    makes the module quote them, and then ended with a plain LF like every other row — the
    same bytes as PostgreSQL's COPY writes.
    """

    def __init__(self, buffer: io.StringIO) -> None:
        self._buffer = buffer
        self._writer = safe_writer(buffer, lineterminator="\n")
        self._scratch = io.StringIO()
        self._cr_writer = safe_writer(self._scratch, lineterminator="\r\n")

    def writerow(self, row: Iterable[Any]) -> None:
        if any(type(v) is str and "\r" in v for v in row):
            self._cr_writer.writerow(row)
            self._buffer.write(_flush(self._scratch)[:-2] + "\n")
        else:
            self._writer.writerow(row)


def _flush(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text


def _final_value(score: float | None) -> float | int | str:
    """A final score as the COPY path writes it (float8 text): whole numbers without a
    decimal point, others as the shortest text of the double, nothing when awaiting."""
    if score is None:
        return ""
    return int(score) if float(score).is_integer() else score


def _finals_by_response(study: Study) -> dict[tuple[int, str], tuple[float | int | str, str]]:
    """(response id, attribute) → (final score, provenance) of every pair with one."""
    return {
        (row.response_id, row.attribute): (_final_value(row.final_score), row.provenance)
        for row in final_scores(study=study)
    }


def _use_copy() -> bool:
    return connection.vendor == "postgresql"


def _header(row: Iterable[Any]) -> str:
    buffer = io.StringIO()
    _Writer(buffer).writerow(row)
    return buffer.getvalue()


def long_csv(
    *, study: Study, count: ExportCount | None = None, identified: bool = False
) -> Iterator[str]:
    """One CSV row per score (header first), in chunks of text: by COPY on PostgreSQL."""
    if not _use_copy() or identified:
        # Identified exports carry each response's estimated time on task, computed in Python
        # from the audit trail (annotation/time_on_task.py); they are rare and audited.
        return long_csv_python(study=study, count=count, identified=identified)
    return copy_export.copy_csv(
        study=study,
        query=copy_export.long_sql(identified=identified),
        params={},
        identified=identified,
        header=_header(LONG_COLUMNS),
        count=count if count is not None else ExportCount(),
    )


def long_csv_python(
    *, study: Study, count: ExportCount | None = None, identified: bool = False
) -> Iterator[str]:
    """long_csv computed in Python (any database)."""
    count = count if count is not None else ExportCount()
    labels = RaterLabels(identified=identified)
    stamp = IsoTimestamp if identified else _day
    # Presentation position of the response in the clinician's assignment (None for imported
    # and judge ratings, which have no assignment).
    position = AssignmentItem.objects.filter(
        assignment_id=OuterRef("rating__assignment_id"), response_id=OuterRef("rating__response_id")
    ).values("position")[:1]
    scores, rater_order = _with_rater_order(_scores(study), study, identified)
    rows = (
        scores.annotate(
            position=Subquery(position),
            rated_at=stamp(F("rating__created_at")),
            changed_at=stamp(F("rating__updated_at")),
        )
        .order_by(
            "rating__response__conversation_id",
            "rating__response__responder__key",
            *rater_order,
            "rating__run_id",
            "rating__repeat",
            "attribute__position",
        )
        .values_list(
            "rating__response__conversation__external_id",
            "rating__response_id",
            "rating__response__responder__key",
            "rating__response__responder__family",
            "rating__rater_id",
            "rating__rater__name",
            "rating__rater__kind",
            "rating__source",
            "rating__run_id",
            "rating__repeat",
            "attribute__name",
            "value",
            "rating__rationale",
            "position",
            "rated_at",
            "changed_at",
            "rating__assignment_id",
        )
    )
    finals = _finals_by_response(study)
    # Time on task per response (annotation/time_on_task.py): shown only where clinicians are
    # identified, for the same reason pseudonymous timestamps are days.
    seconds = (
        response_active_seconds(assignments=Q(conversation__study=study)) if identified else {}
    )
    buffer = io.StringIO()
    writer = _Writer(buffer)
    writer.writerow(LONG_COLUMNS)
    yield _flush(buffer)
    name = study.name
    for conversation, response, responder, family, rater_id, rater, kind, *rest in rows.iterator(
        chunk_size=CHUNK_ROWS
    ):
        rater = labels.label(study_id=study.pk, rater_id=rater_id, name=rater, kind=kind)
        active = seconds.get((rest[-1], response), "")
        final = finals.get((response, rest[3]), ("", ""))
        writer.writerow(
            (
                name, conversation, response, responder, family, rater, kind, *rest[:-1],
                active, *final,
            )
        )  # fmt: skip
        count.rows += 1
        if count.rows % CHUNK_ROWS == 0:
            yield _flush(buffer)
    count.done = True
    tail = _flush(buffer)
    if tail:
        yield tail


def wide_columns(*, study: Study) -> tuple[list[str], list[tuple[str, str]]]:
    """Header of the wide CSV and its (responder, attribute) value columns."""
    responders = list(
        Responder.objects.filter(responses__conversation__study=study)
        .distinct()
        .order_by("-is_reference", "key")
        .values_list("key", flat=True)
    )
    attributes = list(study.rubric.attributes.order_by("position").values_list("name", flat=True))
    cells = [(r, a) for r in responders for a in attributes]
    finals = [f"{r}_{a}{suffix}" for suffix in WIDE_FINAL_SUFFIXES for r, a in cells]
    return [*WIDE_KEYS, *(f"{r}_{a}" for r, a in cells), *finals], cells


def wide_csv(
    *, study: Study, count: ExportCount | None = None, identified: bool = False
) -> Iterator[str]:
    """One row per conversation × rating (rater, run, repeat), one column per responder ×
    attribute: the MentalBench-100k layout (one row per context, a column per model). By COPY
    on PostgreSQL."""
    if not _use_copy():
        return wide_csv_python(study=study, count=count, identified=identified)
    header, cells = wide_columns(study=study)
    responder_ids = dict(Responder.objects.values_list("key", "pk"))
    attribute_ids = dict(study.rubric.attributes.values_list("name", "pk"))
    return copy_export.copy_csv(
        study=study,
        query=copy_export.wide_sql(
            identified=identified,
            cells=[(responder_ids[r], attribute_ids[a]) for r, a in cells],
        ),
        params={},
        identified=identified,
        header=_header(header),
        count=count if count is not None else ExportCount(),
    )


def wide_csv_python(
    *, study: Study, count: ExportCount | None = None, identified: bool = False
) -> Iterator[str]:
    """wide_csv computed in Python (any database)."""
    count = count if count is not None else ExportCount()
    labels = RaterLabels(identified=identified)
    header, cells = wide_columns(study=study)
    index = {cell: i for i, cell in enumerate(cells)}
    scores, rater_order = _with_rater_order(_scores(study), study, identified)
    rows = scores.order_by(
        "rating__response__conversation_id",
        *rater_order,
        "rating__run_id",
        "rating__repeat",
    ).values_list(
        "rating__response__conversation_id",
        "rating__response__conversation__external_id",
        "rating__response__conversation__source",
        "rating__response__conversation__conditions",
        "rating__rater_id",
        "rating__rater__name",
        "rating__rater__kind",
        "rating__run_id",
        "rating__repeat",
        "rating__response__responder__key",
        "attribute__name",
        "value",
    )
    by_conversation: dict[str, list[object]] = {}
    for row in final_scores(study=study):
        i = index.get((row.responder, row.attribute))
        if i is not None:
            cell = by_conversation.setdefault(row.conversation, [""] * (2 * len(cells)))
            cell[i], cell[len(cells) + i] = _final_value(row.final_score), row.provenance
    no_finals: list[object] = [""] * (2 * len(cells))
    buffer = io.StringIO()
    writer = _Writer(buffer)
    writer.writerow(header)
    yield _flush(buffer)
    current: tuple[object, ...] | None = None
    keys: tuple[object, ...] = ()
    values: list[object] = []
    for (
        conv_id,
        ext,
        source,
        conditions,
        rater_id,
        rater,
        kind,
        run,
        repeat,
        resp,
        attr,
        value,
    ) in rows.iterator(chunk_size=CHUNK_ROWS):
        group = (conv_id, rater, run, repeat)
        if group != current:
            if current is not None:
                writer.writerow((*keys, *values))
                count.rows += 1
                if count.rows % CHUNK_ROWS == 0:
                    yield _flush(buffer)
            current = group
            label = labels.label(study_id=study.pk, rater_id=rater_id, name=rater, kind=kind)
            keys = (study.name, ext, source, ";".join(conditions or []), label, kind, run, repeat)
            values = [*([""] * len(cells)), *by_conversation.get(ext, no_finals)]
        values[index[(resp, attr)]] = value
    if current is not None:
        writer.writerow((*keys, *values))
        count.rows += 1
    count.done = True
    tail = _flush(buffer)
    if tail:
        yield tail
