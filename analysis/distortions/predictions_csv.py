"""Reading a classifier's predictions (columns ``true`` and ``predicted``) from a CSV file or an
upload, for analysis.distortions.evaluation.kappa_f1_report."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from analysis.distortions.labels import Kind


class PredictionsCsvError(ValueError):
    """A predictions CSV that cannot be read; the message names file, line and column."""


_SEPARATORS = (";", "|")


def read_predictions_csv(
    file: str | os.PathLike[str] | IO[str],
    *,
    kind: Kind | None = None,
    labels: Sequence[str] | None = None,
    max_rows: int | None = None,
    max_labels: int | None = None,
    name: str | None = None,
) -> tuple[list[str] | list[list[str]], list[str] | list[list[str]], Kind, list[str]]:
    """(y_true, y_pred, kind, labels) from a CSV with columns ``true`` and ``predicted``.

    Multi-label cells separate labels with ";" or "|". ``kind`` defaults to multilabel if any
    cell has a separator, else binary for ≤ 2 distinct labels, else multiclass. With ``labels``
    every cell must use them (case-insensitively; returned in the given spelling). Errors are
    one line naming the file, the line (header = line 1) and the column.

    ``max_rows`` and ``max_labels`` are checked while reading, before any array exists: the
    statistics hold items × labels indicators, so a file of a few kilobytes with a new label on
    every line would otherwise ask for memory quadratic in its size. ``name`` is the file's name
    in messages (an upload's stream has none of its own).
    """
    if name is None:
        name = str(file) if isinstance(file, str | os.PathLike) else getattr(file, "name", "<csv>")
    if isinstance(file, str | os.PathLike):
        try:
            text = Path(file).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise PredictionsCsvError(f"{name}: cannot read: {exc}") from None
        handle: IO[str] = io.StringIO(text)
    else:
        handle = file
    reader = csv.reader(handle)
    try:
        header = next(reader)
    except StopIteration:
        raise PredictionsCsvError(
            f"{name}: empty file, expected a header with true,predicted"
        ) from None
    except csv.Error as exc:
        raise PredictionsCsvError(f"{name}: line 1: {exc}") from None
    header_keys = [h.strip().lstrip("\ufeff").casefold() for h in header]
    index = {}
    for column in ("true", "predicted"):
        if column not in header_keys:
            found = ", ".join(h.strip() for h in header) or "nothing"
            raise PredictionsCsvError(f"{name}: missing column {column!r} (header: {found})")
        index[column] = header_keys.index(column)
    known = {lab.casefold(): lab for lab in labels} if labels is not None else None
    cells: dict[str, list[list[str]]] = {"true": [], "predicted": []}
    distinct: set[str] = set()
    multi_seen = False
    try:
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue  # blank line
            if max_rows is not None and len(cells["true"]) >= max_rows:
                raise PredictionsCsvError(
                    f"{name}: line {line}: more than {max_rows:,} data rows, the most one file "
                    "may have"
                )
            for column, j in index.items():
                raw = row[j].strip() if j < len(row) else ""
                if not raw:
                    raise PredictionsCsvError(f"{name}: line {line}, column {column!r}: empty cell")
                parts = [raw]
                for sep in _SEPARATORS:
                    parts = [piece for part in parts for piece in part.split(sep)]
                parts = [part.strip() for part in parts]
                if len(parts) > 1:
                    multi_seen = True
                    if kind in ("binary", "multiclass"):
                        raise PredictionsCsvError(
                            f"{name}: line {line}, column {column!r}: several labels in a "
                            f"{kind} file: {raw!r}"
                        )
                if not all(parts):
                    raise PredictionsCsvError(
                        f"{name}: line {line}, column {column!r}: empty label in {raw!r}"
                    )
                if known is not None:
                    missing = [part for part in parts if part.casefold() not in known]
                    if missing:
                        raise PredictionsCsvError(
                            f"{name}: line {line}, column {column!r}: unknown label "
                            f"{missing[0]!r} (known: {', '.join(labels or [])})"
                        )
                    parts = [known[part.casefold()] for part in parts]
                distinct.update(parts)
                if max_labels is not None and len(distinct) > max_labels:
                    raise PredictionsCsvError(
                        f"{name}: line {line}, column {column!r}: more than {max_labels} "
                        "distinct labels, the most one file may have"
                    )
                cells[column].append(list(dict.fromkeys(parts)))
    except csv.Error as exc:
        raise PredictionsCsvError(f"{name}: line {reader.line_num}: {exc}") from None
    if not cells["true"]:
        raise PredictionsCsvError(f"{name}: no data rows")
    seen = sorted({lab for col in cells.values() for s in col for lab in s})
    resolved: Kind
    if kind is not None:
        resolved = kind
    elif multi_seen:
        resolved = "multilabel"
    else:
        resolved = "binary" if len(seen) <= 2 else "multiclass"
    classes = list(labels) if labels is not None else seen
    if resolved == "binary" and len(classes) > 2:
        raise PredictionsCsvError(f"{name}: binary task but {len(classes)} labels: {classes}")
    if resolved == "multilabel":
        return cells["true"], cells["predicted"], resolved, classes
    return (
        [s[0] for s in cells["true"]],
        [s[0] for s in cells["predicted"]],
        resolved,
        classes,
    )
