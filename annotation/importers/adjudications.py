"""Adjudications as a release writes them (``adjudications.csv``, docs/release.md): one row per
response and attribute an adjudicator settled, the response named by conversation id and
responder key.

Rows are numbered as a spreadsheet shows them (header = row 1). Everything is checked before
anything is written: the service (annotation/services/adjudication_import.py) writes.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from ..adjudication_selectors import RELEASE_ADJUDICATION_COLUMNS
from ..csvsafe import cell_unescaped
from .base import ImportProblem, require_readable
from .limits import ImportLimits, check_cells, check_columns, check_file_size, check_text

#: The columns, in the order a release writes them; a file must have every one.
COLUMNS = RELEASE_ADJUDICATION_COLUMNS
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}


@dataclass(frozen=True)
class AdjudicationRecord:
    row: int
    conversation: str
    responder: str
    attribute: str
    final_score: int
    reason: str
    reason_text: str
    rubric_needs_change: bool


def _record(values: dict[str, str], *, file: str, row: int) -> AdjudicationRecord:
    for column in ("conversation", "responder", "attribute", "final_score"):
        if not values[column].strip():
            raise ImportProblem("missing value", file=file, row=row, column=column)
    try:
        score = int(values["final_score"].strip())
    except ValueError:
        raise ImportProblem(
            f"expected a whole number, got {values['final_score']!r}",
            file=file,
            row=row,
            column="final_score",
        ) from None
    change = values["rubric_needs_change"].strip().lower()
    if change not in _TRUE | _FALSE:
        raise ImportProblem(
            f"expected true or false, got {values['rubric_needs_change']!r}",
            file=file,
            row=row,
            column="rubric_needs_change",
        )
    return AdjudicationRecord(
        row=row,
        conversation=values["conversation"].strip(),
        responder=values["responder"].strip(),
        attribute=values["attribute"].strip(),
        final_score=score,
        reason=values["reason"].strip(),
        reason_text=values["reason_text"].strip(),
        rubric_needs_change=change in _TRUE,
    )


def read_adjudications(
    path: Path, *, limits: ImportLimits | None = None
) -> list[AdjudicationRecord]:
    """Every row of the file, checked: the columns, a whole-number score, true/false, no
    response and attribute twice. Raises ImportProblem naming the file, row and column."""
    limits = limits or ImportLimits.from_settings()
    file = str(path)
    require_readable(path)
    check_file_size(path.stat().st_size, file=file, limits=limits)
    csv.field_size_limit(limits.max_cell_chars + 1)
    records: list[AdjudicationRecord] = []
    seen: dict[tuple[str, str, str], int] = {}
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None:
                raise ImportProblem("no rows", file=file)
            header = [cell_unescaped(c).strip().lower() for c in header]
            check_columns(len(header), file=file, row=1, limits=limits)
            missing = [c for c in COLUMNS if c not in header]
            if missing:
                raise ImportProblem(
                    f"the header lacks {', '.join(missing)} (expected {', '.join(COLUMNS)})",
                    file=file,
                    row=1,
                )
            cells = 0
            for number, raw in enumerate(reader, start=2):
                if not raw:
                    continue
                cells += len(header)
                check_cells(cells, file=file, row=number, limits=limits)
                if len(raw) > len(header):
                    raise ImportProblem("more cells than header columns", file=file, row=number)
                padded = [cell_unescaped(v) for v in raw] + [""] * (len(header) - len(raw))
                values = dict(zip(header, padded, strict=True))
                for column in COLUMNS:
                    check_text(values[column], file=file, row=number, column=column, limits=limits)
                record = _record(values, file=file, row=number)
                key = (record.conversation, record.responder, record.attribute)
                if key in seen:
                    raise ImportProblem(
                        f"conversation {key[0]!r}, responder {key[1]!r}, attribute {key[2]!r} "
                        f"is adjudicated twice (first in row {seen[key]})",
                        file=file,
                        row=number,
                    )
                seen[key] = number
                records.append(record)
    except UnicodeDecodeError:
        raise ImportProblem("not UTF-8 text", file=file) from None
    except csv.Error as exc:
        raise ImportProblem(f"malformed CSV ({exc})", file=file) from None
    return records
