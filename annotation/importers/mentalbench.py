"""MentalBench-100k conversations: CSV or JSONL with `context`, `response` (the human reference)
and one column per model (paper Table 5), optional id, condition labels and source dataset.

Rows are numbered as a spreadsheet shows them (CSV header = row 1) and JSONL lines from 1.
"""

import csv
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from .base import ImportProblem, require_readable

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


def _text(value: object, *, file: str, row: int, column: str, required: bool) -> str:
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


def _conditions(raw: dict, *, file: str, row: int) -> list[str]:
    labels: list[str] = []
    for column in CONDITION_COLUMNS:
        if column in raw:
            value = _text(raw[column], file=file, row=row, column=column, required=False)
            if value:
                labels.append(value)
    for column in ("conditions", "condition"):
        if column not in raw or raw[column] in (None, ""):
            continue
        value = raw[column]
        if isinstance(value, list):
            if not all(isinstance(v, str) for v in value):
                raise ImportProblem("expected a list of labels", file=file, row=row, column=column)
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


def _record(raw: dict, *, file: str, row: int, columns: list[str]) -> ConversationRecord:
    lowered = {c.strip().lower(): c for c in columns}
    get = {c.strip().lower(): raw.get(c) for c in columns}
    context = _text(get["context"], file=file, row=row, column=lowered["context"], required=True)
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
    )
    record = ConversationRecord(
        row=row,
        external_id=external_id,
        context=context,
        conditions=_conditions(get, file=file, row=row),
        source=source,
    )
    skip = META_COLUMNS | set(ID_COLUMNS) | set(CONDITION_COLUMNS)
    for key, column in lowered.items():
        if key in skip:
            continue
        text = _text(get[key], file=file, row=row, column=column, required=False)
        responder_key = "original" if key == "response" else key
        if text:
            record.responses[responder_key] = text
    if "response" in lowered:
        reference = _text(
            get["response"], file=file, row=row, column=lowered["response"], required=False
        )
        if reference:
            record.responses["original"] = reference
    return record


def read_conversations(path: Path) -> list[ConversationRecord]:
    """Parse the whole file first, so a bad row aborts before anything is written."""
    require_readable(path)
    file = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".json"):
        raise ImportProblem(f"unsupported file type {suffix!r} (use .csv or .jsonl)", file=file)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportProblem(f"not UTF-8 text (byte {exc.start})", file=file) from None

    rows: list[tuple[int, dict]] = []
    if suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        columns = [c for c in (reader.fieldnames or [])]
        try:
            for number, raw in enumerate(reader, start=2):
                if None in raw:
                    raise ImportProblem("more cells than header columns", file=file, row=number)
                rows.append((number, raw))
        except csv.Error as exc:
            raise ImportProblem(f"malformed CSV ({exc})", file=file, row=reader.line_num) from None
    else:
        columns_seen: dict[str, None] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ImportProblem(f"invalid JSON ({exc.msg})", file=file, row=number) from None
            if not isinstance(raw, dict):
                raise ImportProblem("expected a JSON object per line", file=file, row=number)
            columns_seen.update(dict.fromkeys(raw))
            rows.append((number, raw))
        columns = list(columns_seen)

    if not rows:
        raise ImportProblem("no rows", file=file)
    if "context" not in {c.strip().lower() for c in columns}:
        raise ImportProblem(
            "required column 'context' is missing", file=file, row=1, column="context"
        )
    records: list[ConversationRecord] = []
    first_row: dict[str, int] = {}
    for number, raw in rows:
        record = _record(raw, file=file, row=number, columns=columns)
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
