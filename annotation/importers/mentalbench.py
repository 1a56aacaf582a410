"""MentalBench-100k conversations: CSV or JSONL with `context`, `response` (the human reference)
and one column per model (paper Table 5), optional id, condition labels and source dataset.

Rows are numbered as a spreadsheet shows them (CSV header = row 1) and JSONL lines from 1.
"""

import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..csvsafe import cell_unescaped
from .base import ImportProblem, require_readable
from .limits import (
    ID_MAX_CHARS,
    KEY_MAX_CHARS,
    SOURCE_MAX_CHARS,
    ImportLimits,
    check_cells,
    check_columns,
    check_file_size,
    check_same_columns,
    check_text,
    json_depth_exceeds,
)

ID_COLUMNS = ("id", "conv_id", "convid", "conversation_id")
CONDITION_COLUMNS = ("condition_1", "condition_2", "condition_3")
META_COLUMNS = {"context", "response", "conditions", "condition", "source", "source_dataset"}
MAX_CONDITIONS = 3


@dataclass
class ConversationRecord:
    row: int
    external_id: str
    context: str
    conditions: list[str]
    source: str
    # responder key → text; "original" is the dataset's human reference response.
    responses: dict[str, str] = field(default_factory=dict)


def _text(
    value: object, *, file: str, row: int, column: str, required: bool, limits: ImportLimits
) -> str:
    if isinstance(value, str):
        check_text(value, file=file, row=row, column=column, limits=limits)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise ImportProblem("missing value", file=file, row=row, column=column)
        return ""
    if not isinstance(value, str):
        raise ImportProblem(
            f"expected text, got {type(value).__name__} {value!r}",
            file=file,
            row=row,
            column=column,
        )
    return value.strip()


def _conditions(raw: dict, *, file: str, row: int, limits: ImportLimits) -> list[str]:
    labels: list[str] = []
    for column in CONDITION_COLUMNS:
        if column in raw:
            value = _text(
                raw[column], file=file, row=row, column=column, required=False, limits=limits
            )
            if value:
                labels.append(value)
    for column in ("conditions", "condition"):
        if column not in raw or raw[column] in (None, ""):
            continue
        value = raw[column]
        if isinstance(value, list):
            if not all(isinstance(v, str) for v in value):
                raise ImportProblem("expected a list of labels", file=file, row=row, column=column)
            for label in value:
                check_text(label, file=file, row=row, column=column, limits=limits)
            labels.extend(v.strip() for v in value if v.strip())
        elif isinstance(value, str):
            labels.extend(v.strip() for v in value.replace("|", ";").split(";") if v.strip())
        else:
            raise ImportProblem(
                f"expected text or a list, got {type(value).__name__}",
                file=file,
                row=row,
                column=column,
            )
    if len(labels) > MAX_CONDITIONS:
        raise ImportProblem(
            f"{len(labels)} condition labels given, at most {MAX_CONDITIONS} allowed",
            file=file,
            row=row,
            column="conditions",
        )
    return labels


def _record(
    raw: dict, *, file: str, row: int, columns: list[str], limits: ImportLimits
) -> ConversationRecord:
    lowered = {c.strip().lower(): c for c in columns}
    get = {c.strip().lower(): raw.get(c) for c in columns}
    context = _text(
        get["context"], file=file, row=row, column=lowered["context"], required=True, limits=limits
    )
    id_column = next((c for c in ID_COLUMNS if c in lowered), None)
    if id_column:
        raw_id = get[id_column]
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
            raise ImportProblem(
                f"expected an id, got {raw_id!r}", file=file, row=row, column=lowered[id_column]
            )
        external_id = str(raw_id).strip()
        if not external_id:
            raise ImportProblem("missing id", file=file, row=row, column=lowered[id_column])
        check_text(external_id, file=file, row=row, column=lowered[id_column], limits=limits)
        if len(external_id) > ID_MAX_CHARS:
            raise ImportProblem(
                f"the id is {len(external_id):,} characters, more than the {ID_MAX_CHARS} an id "
                "may have",
                file=file,
                row=row,
                column=lowered[id_column],
            )
    else:
        # Without an id column the context itself identifies the conversation, so re-importing
        # the same file (in any row order) finds the same conversations.
        external_id = "ctx-" + hashlib.sha1(context.encode()).hexdigest()[:16]
    source = _text(
        get.get("source") or get.get("source_dataset"),
        file=file,
        row=row,
        column="source",
        required=False,
        limits=limits,
    )
    if len(source) > SOURCE_MAX_CHARS:
        raise ImportProblem(
            f"the source is {len(source):,} characters, more than the {SOURCE_MAX_CHARS} a source "
            "may have",
            file=file,
            row=row,
            column="source",
        )
    record = ConversationRecord(
        row=row,
        external_id=external_id,
        context=context,
        conditions=_conditions(get, file=file, row=row, limits=limits),
        source=source,
    )
    skip = META_COLUMNS | set(ID_COLUMNS) | set(CONDITION_COLUMNS)
    for key, column in lowered.items():
        if key in skip:
            continue
        text = _text(get[key], file=file, row=row, column=column, required=False, limits=limits)
        responder_key = "original" if key == "response" else key
        if text:
            record.responses[responder_key] = text
    if "response" in lowered:
        reference = _text(
            get["response"],
            file=file,
            row=row,
            column=lowered["response"],
            required=False,
            limits=limits,
        )
        if reference:
            record.responses["original"] = reference
    return record


def _decoded_lines(handle: BinaryIO, *, file: str) -> Iterator[str]:
    """The file's lines as text, one at a time, so a large file is never held whole; a byte
    that is not UTF-8 is named by line and byte offset."""
    offset = 0
    for number, raw in enumerate(handle, start=1):
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise ImportProblem(
                f"not UTF-8 text (line {number}, byte {offset + exc.start})", file=file
            ) from None
        offset += len(raw)
        yield line


def _csv_rows(
    handle: BinaryIO, *, file: str, limits: ImportLimits
) -> tuple[list[str], list[tuple[int, dict]]]:
    # The csv module's own field limit is process-wide; set to ours it stops a giant cell while
    # it is being read instead of after.
    csv.field_size_limit(limits.max_cell_chars + 1)
    reader = csv.reader(_decoded_lines(handle, file=file))
    rows: list[tuple[int, dict]] = []
    try:
        columns = next(reader, None)
        if columns is None:
            raise ImportProblem("no rows", file=file)
        # A CSV this platform wrote has an apostrophe before every cell a spreadsheet would
        # run as a formula (annotation/csvsafe.py); it comes off here, so such a file reads
        # back as the text that was written.
        columns = [cell_unescaped(c) for c in columns]
        check_columns(len(columns), file=file, row=1, limits=limits)
        _check_header(columns, file=file, limits=limits)
        _check_collisions(columns, file=file)
        cells = 0
        for number, values in enumerate(reader, start=2):
            if not values:
                continue  # a blank line, as csv.DictReader skips them
            cells += len(columns)
            check_cells(cells, file=file, row=number, limits=limits)
            if len(values) > len(columns):
                raise ImportProblem("more cells than header columns", file=file, row=number)
            values = [cell_unescaped(v) for v in values]
            padded = values + [None] * (len(columns) - len(values))
            rows.append((number, dict(zip(columns, padded, strict=True))))
    except csv.Error as exc:
        row = reader.line_num
        if "field larger than field limit" in str(exc):
            raise ImportProblem(
                f"a cell is longer than the limit of {limits.max_cell_chars:,} characters "
                "(IMPORT_MAX_CELL_CHARS)",
                file=file,
                row=row,
            ) from None
        raise ImportProblem(f"malformed CSV ({exc})", file=file, row=row) from None
    return columns, rows


def _unique_object(pairs: list[tuple[str, object]]) -> dict:
    seen: dict[str, str] = {}
    for key, _ in pairs:
        folded = key.strip().lower()
        if folded in seen:
            raise _DuplicateKey(seen[folded], key)
        seen[folded] = key
    return dict(pairs)


class _DuplicateKey(ValueError):
    def __init__(self, first: str, second: str):
        super().__init__(first, second)
        self.first, self.second = first, second


def _jsonl_rows(
    handle: BinaryIO, *, file: str, limits: ImportLimits
) -> tuple[list[str], list[tuple[int, dict]]]:
    rows: list[tuple[int, dict]] = []
    columns: dict[str, str] = {}  # folded name -> the name as first written
    cells = 0
    for number, line in enumerate(_decoded_lines(handle, file=file), start=1):
        if not line.strip():
            continue
        if json_depth_exceeds(line, limits.max_json_depth):
            raise ImportProblem(
                f"JSON nested more than {limits.max_json_depth} levels deep "
                "(IMPORT_MAX_JSON_DEPTH)",
                file=file,
                row=number,
            )
        try:
            raw = json.loads(line, object_pairs_hook=_unique_object)
        except _DuplicateKey as exc:
            raise ImportProblem(
                f"keys {exc.first!r} and {exc.second!r} name the same column (names are "
                "compared ignoring case and surrounding spaces); rename or remove one",
                file=file,
                row=number,
                column=exc.second,
            ) from None
        except json.JSONDecodeError as exc:
            raise ImportProblem(f"invalid JSON ({exc.msg})", file=file, row=number) from None
        except ValueError as exc:  # e.g. an integer of more digits than Python will convert
            raise ImportProblem(f"invalid JSON ({exc})", file=file, row=number) from None
        if not isinstance(raw, dict):
            raise ImportProblem("expected a JSON object per line", file=file, row=number)
        for key in raw:
            folded = key.strip().lower()
            if folded not in columns:
                columns[folded] = key
                check_columns(len(columns), file=file, row=number, limits=limits)
                _check_header([key], file=file, limits=limits, row=number)
            elif columns[folded] != key:
                raise ImportProblem(
                    f"key {key!r} and key {columns[folded]!r} of an earlier line name the same "
                    "column (names are compared ignoring case and surrounding spaces)",
                    file=file,
                    row=number,
                    column=key,
                )
        cells += len(raw)
        check_cells(cells, file=file, row=number, limits=limits)
        rows.append((number, raw))
    _check_collisions(list(columns.values()), file=file, row=None)
    return list(columns.values()), rows


def _check_header(columns: list[str], *, file: str, limits: ImportLimits, row: int = 1) -> None:
    """Every column name becomes a responder key unless it is a known one: it must fit the
    key's column and be storable."""
    for position, name in enumerate(columns, start=1):
        check_text(name, file=file, row=row, column=name, limits=limits)
        if not name.strip():
            raise ImportProblem(
                f"column {position} has no name", file=file, row=row, column=f"#{position}"
            )
        if len(name.strip()) > KEY_MAX_CHARS:
            raise ImportProblem(
                f"the column name is {len(name.strip()):,} characters, more than the "
                f"{KEY_MAX_CHARS} a responder key may have",
                file=file,
                row=row,
                column=name,
            )


def _check_collisions(columns: list[str], *, file: str, row: int | None = 1) -> None:
    check_same_columns(columns, file=file)
    folded = {c.strip().lower(): c for c in columns}
    if "response" in folded and "original" in folded:
        raise ImportProblem(
            f"columns {folded['response']!r} and {folded['original']!r} both hold the human "
            "reference response; keep one",
            file=file,
            row=row,
            column=folded["original"],
        )


def read_conversations(
    path: Path, *, limits: ImportLimits | None = None
) -> list[ConversationRecord]:
    """Parse the whole file first, so a bad row aborts before anything is written. The file is
    read line by line and refused as soon as it passes a limit (`ImportLimits`)."""
    limits = limits or ImportLimits.from_settings()
    require_readable(path)
    file = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".json"):
        raise ImportProblem(f"unsupported file type {suffix!r} (use .csv or .jsonl)", file=file)
    check_file_size(path.stat().st_size, file=file, limits=limits)
    with path.open("rb") as handle:
        if suffix == ".csv":
            columns, rows = _csv_rows(handle, file=file, limits=limits)
        else:
            columns, rows = _jsonl_rows(handle, file=file, limits=limits)

    if not rows:
        raise ImportProblem("no rows", file=file)
    if "context" not in {c.strip().lower() for c in columns}:
        raise ImportProblem(
            "required column 'context' is missing", file=file, row=1, column="context"
        )
    records: list[ConversationRecord] = []
    first_row: dict[str, int] = {}
    for number, raw in rows:
        record = _record(raw, file=file, row=number, columns=columns, limits=limits)
        if record.external_id in first_row:
            raise ImportProblem(
                f"duplicate conversation {record.external_id!r} (first at row "
                f"{first_row[record.external_id]})",
                file=file,
                row=number,
            )
        first_row[record.external_id] = number
        records.append(record)
    return records
