"""The released MentalAlign-70k workbooks (shared data/mentalalign70k/README.md).

`ConvID`, `context`, then one column per response key: `human_response_<key>` in the human
workbook, `judge_response_<key>` in a judge's; each cell holds JSON (sometimes fenced, sometimes
broken). Header names may carry a leading space.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .base import ImportProblem, require_readable
from .limits import (
    ID_MAX_CHARS,
    KEY_MAX_CHARS,
    ImportLimits,
    check_cells,
    check_columns,
    check_file_size,
    check_same_columns,
    check_text,
    check_zip,
)

PREFIXES = {"human": "human_response_", "judge": "judge_response_"}


@dataclass
class Cell:
    row: int  # as a spreadsheet shows it: header = row 1
    column: str  # the header exactly as written
    conversation: str
    responder: str
    raw: str | None


@dataclass
class Workbook:
    file: str
    contexts: dict[str, tuple[int, str]]  # ConvID → (row, context)
    cells: list[Cell]
    responders: list[str]


def read_workbook(path: Path, *, kind: str, limits: ImportLimits | None = None) -> Workbook:
    """Read and check the first sheet. The zip is checked (sizes, compression ratio) before any
    XML is parsed; rows are read one at a time and refused as soon as a limit is passed."""
    import openpyxl  # imported here: only imports need it

    limits = limits or ImportLimits.from_settings()
    require_readable(path)
    file = str(path)
    check_file_size(path.stat().st_size, file=file, limits=limits)
    check_zip(path, file=file, limits=limits)
    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many unrelated types for a non-workbook
        raise ImportProblem(
            f"not a readable .xlsx workbook ({type(exc).__name__})", file=file
        ) from None
    try:
        if not book.worksheets:
            raise ImportProblem("the workbook has no worksheet", file=file)
        sheet = book.worksheets[0]
        # The sheet's declared <dimension> is not trusted: too small, openpyxl would silently
        # drop the rows beyond it; too large, it would pad every row to 16,384 columns.
        sheet.reset_dimensions()
        rows = _sheet_rows(sheet.iter_rows(values_only=True), file=file)
        _, header = next(rows, (1, None))
        if header is None:
            raise ImportProblem("empty workbook", file=file)
        check_columns(len(header), file=file, row=1, limits=limits)
        names = [str(h) if h is not None else "" for h in header]
        for name in names:
            check_text(name, file=file, row=1, column=name, limits=limits)
        stripped = [n.strip() for n in names]
        for required in ("ConvID", "context"):
            if required not in stripped:
                raise ImportProblem(
                    f"required column {required!r} is missing", file=file, row=1, column=required
                )
        prefix = PREFIXES[kind]
        response_columns = [
            (i, names[i], s[len(prefix) :]) for i, s in enumerate(stripped) if s.startswith(prefix)
        ]
        if not response_columns:
            raise ImportProblem(
                f"no {prefix}<key> columns: is this a {kind} workbook?", file=file, row=1
            )
        for _, column, responder in response_columns:
            if not responder or len(responder) > KEY_MAX_CHARS:
                raise ImportProblem(
                    f"the responder key after {prefix!r} must have 1 to {KEY_MAX_CHARS} "
                    f"characters, not {len(responder):,}",
                    file=file,
                    row=1,
                    column=column,
                )
        check_same_columns(
            [
                n
                for n in names
                if n.strip() in ("ConvID", "context") or n.strip().startswith(prefix)
            ],
            file=file,
        )
        id_index, context_index = stripped.index("ConvID"), stripped.index("context")
        contexts: dict[str, tuple[int, str]] = {}
        cells: list[Cell] = []
        cell_count = 0
        for number, values in rows:
            check_columns(len(values), file=file, row=number, limits=limits)
            # Each row counts as wide as the header, empty or not, so a sheet of a million
            # blank rows is refused like a million full ones.
            cell_count += max(len(header), len(values))
            check_cells(cell_count, file=file, row=number, limits=limits)
            if all(v is None for v in values):
                continue
            conv_id = _at(values, id_index)
            if isinstance(conv_id, float) and conv_id.is_integer():
                conv_id = int(conv_id)
            if (
                isinstance(conv_id, bool)
                or not isinstance(conv_id, int | str)
                or (isinstance(conv_id, str) and not conv_id.strip())
            ):
                raise ImportProblem(
                    f"expected a conversation id, got {conv_id!r}",
                    file=file,
                    row=number,
                    column="ConvID",
                )
            conv_key = str(conv_id).strip()
            check_text(conv_key, file=file, row=number, column="ConvID", limits=limits)
            if len(conv_key) > ID_MAX_CHARS:
                raise ImportProblem(
                    f"the id is {len(conv_key):,} characters, more than the {ID_MAX_CHARS} an id "
                    "may have",
                    file=file,
                    row=number,
                    column="ConvID",
                )
            if conv_key in contexts:
                raise ImportProblem(
                    f"duplicate ConvID {conv_key} (first at row {contexts[conv_key][0]})",
                    file=file,
                    row=number,
                    column="ConvID",
                )
            context = _at(values, context_index)
            if not isinstance(context, str) or not context.strip():
                raise ImportProblem(
                    f"expected the conversation's text, got {context!r}",
                    file=file,
                    row=number,
                    column="context",
                )
            check_text(context, file=file, row=number, column="context", limits=limits)
            contexts[conv_key] = (number, context.strip())
            for index, column, responder in response_columns:
                raw = _at(values, index)
                if raw is not None and not isinstance(raw, str):
                    raw = str(raw)
                if raw is not None:
                    check_text(raw, file=file, row=number, column=column, limits=limits)
                cells.append(Cell(number, column, conv_key, responder, raw))
        return Workbook(file, contexts, cells, [r for _, _, r in response_columns])
    finally:
        book.close()


def _at(values: tuple, index: int) -> object:
    # Without a trusted dimension, openpyxl gives each row only up to its last filled cell.
    return values[index] if index < len(values) else None


def _sheet_rows(rows: Iterator[tuple], *, file: str) -> Iterator[tuple[int, tuple]]:
    """(spreadsheet row number, values); broken sheet XML becomes an ImportProblem naming the
    last row that could be read, instead of whatever openpyxl happens to raise."""
    number = 0
    while True:
        try:
            values = next(rows)
        except StopIteration:
            return
        except Exception as exc:  # openpyxl raises many unrelated types for broken XML
            detail = str(exc).splitlines()[0] if str(exc) else ""
            raise ImportProblem(
                f"the worksheet XML is corrupt after row {number} ({type(exc).__name__}"
                + (f": {detail}" if detail else "")
                + ")",
                file=file,
                row=number + 1,
            ) from None
        number += 1
        yield number, values
