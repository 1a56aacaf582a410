"""Every score of a study as CSV, streamed in constant memory.

The same generators feed `manage.py export_ratings`, the dashboard's download button and the
API. Rows come from a server-side cursor (``QuerySet.iterator(chunk_size=…)``), are formatted
into a small buffer and yielded a chunk at a time, so memory does not grow with the study.
Only complete ratings are exported (drafts are a clinician's unfinished work; invalid ratings
have no scores — their raw text is in the admin).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db.models import CharField, F, Func, OuterRef, QuerySet, Subquery

from annotation.csvsafe import safe_writer
from annotation.models import AssignmentItem, Rating, Responder, Score, Study

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
)
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

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(
            compiler,
            connection,
            template="to_char(%(expressions)s AT TIME ZONE 'UTC', "
            '\'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\')',
            **extra,
        )

    def as_sql(self, compiler, connection, template=None, **extra):
        return super().as_sql(compiler, connection, template=template or "%(expressions)s", **extra)


@dataclass
class ExportCount:
    """Filled in while a generator runs; read it after the last chunk for the audit log."""

    rows: int = 0
    done: bool = False
    extra: dict = field(default_factory=dict)


def _scores(study: Study) -> QuerySet[Score]:
    return Score.objects.filter(
        rating__response__conversation__study=study, rating__status=Rating.Status.COMPLETE
    )


def _flush(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text


def long_csv(*, study: Study, count: ExportCount | None = None) -> Iterator[str]:
    """One CSV row per score (header first), in chunks of text."""
    count = count if count is not None else ExportCount()
    # Presentation position of the response in the clinician's assignment (None for imported
    # and judge ratings, which have no assignment).
    position = AssignmentItem.objects.filter(
        assignment_id=OuterRef("rating__assignment_id"), response_id=OuterRef("rating__response_id")
    ).values("position")[:1]
    rows = (
        _scores(study)
        .annotate(
            position=Subquery(position),
            rated_at=IsoTimestamp(F("rating__created_at")),
            changed_at=IsoTimestamp(F("rating__updated_at")),
        )
        .order_by(
            "rating__response__conversation_id",
            "rating__response__responder__key",
            "rating__rater__name",
            "rating__run_id",
            "rating__repeat",
            "attribute__position",
        )
        .values_list(
            "rating__response__conversation__external_id",
            "rating__response_id",
            "rating__response__responder__key",
            "rating__response__responder__family",
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
        )
    )
    buffer = io.StringIO()
    writer = safe_writer(buffer, lineterminator="\n")
    writer.writerow(LONG_COLUMNS)
    yield _flush(buffer)
    name = study.name
    for row in rows.iterator(chunk_size=CHUNK_ROWS):
        writer.writerow((name, *row))
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
    return [*WIDE_KEYS, *(f"{r}_{a}" for r, a in cells)], cells


def wide_csv(*, study: Study, count: ExportCount | None = None) -> Iterator[str]:
    """One row per conversation × rating (rater, run, repeat), one column per responder ×
    attribute: the MentalBench-100k layout (one row per context, a column per model)."""
    count = count if count is not None else ExportCount()
    header, cells = wide_columns(study=study)
    index = {cell: i for i, cell in enumerate(cells)}
    rows = (
        _scores(study)
        .order_by(
            "rating__response__conversation_id",
            "rating__rater__name",
            "rating__run_id",
            "rating__repeat",
        )
        .values_list(
            "rating__response__conversation_id",
            "rating__response__conversation__external_id",
            "rating__response__conversation__source",
            "rating__response__conversation__conditions",
            "rating__rater__name",
            "rating__rater__kind",
            "rating__run_id",
            "rating__repeat",
            "rating__response__responder__key",
            "attribute__name",
            "value",
        )
    )
    buffer = io.StringIO()
    writer = safe_writer(buffer, lineterminator="\n")
    writer.writerow(header)
    yield _flush(buffer)
    current: tuple | None = None
    keys: tuple = ()
    values: list[object] = []
    for (
        conv_id,
        ext,
        source,
        conditions,
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
            keys = (study.name, ext, source, ";".join(conditions or []), rater, kind, run, repeat)
            values = [""] * len(cells)
        values[index[(resp, attr)]] = value
    if current is not None:
        writer.writerow((*keys, *values))
        count.rows += 1
    count.done = True
    tail = _flush(buffer)
    if tail:
        yield tail
