"""The released MentalAlign-70k workbooks (shared data/mentalalign70k/README.md).

`ConvID`, `context`, then one column per response key: `human_response_<key>` in the human
workbook, `judge_response_<key>` in a judge's; each cell holds JSON (sometimes fenced, sometimes
broken). Header names may carry a leading space.

A human workbook written by `release_study` has one more column, `Clinician` (a study code such
as C01): one row per clinician and conversation, so one ConvID may appear once per clinician.
Its cells may also hold a marker instead of scores: `[not rated]` (the clinician gave no
submitted rating of that response) or `[flagged]` (they set the conversation aside). A marker
is read as exactly that, never as a score. See docs/release.md.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
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

# A code names a rater together with the study's name (a rater's name holds 200 characters).
CODE_MAX_CHARS = 16
PREFIXES = {"human": "human_response_", "judge": "judge_response_"}
CLINICIAN_COLUMN = "Clinician"
NOT_RATED = "[not rated]"
FLAGGED = "[flagged]"


@dataclass
class Cell:
    row: int  # as a spreadsheet shows it: header = row 1
    column: str  # the header exactly as written
    conversation: str
    responder: str
    raw: str | None
    clinician: str = ""  # the Clinician column's code; "" in a workbook without one


@dataclass
class Workbook:
    file: str
    contexts: dict[str, tuple[int, str]]  # ConvID → (row, context)
    cells: list[Cell]
    responders: list[str]
    # The codes of a workbook with a Clinician column, in the order first seen; else empty.
    clinicians: list[str] = field(default_factory=list)

    def for_clinician(self, code: str) -> "Workbook":
        """The rows of one clinician, as a workbook of its own (one rater per workbook)."""
        cells = [c for c in self.cells if c.clinician == code]
        ids = {c.conversation for c in cells}
        contexts = {k: v for k, v in self.contexts.items() if k in ids}
        return Workbook(self.file, contexts, cells, self.responders, [code])


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
        columns = _columns(header, kind=kind, file=file, limits=limits)
        return _read_rows(rows, columns, file=file, limits=limits)
    finally:
        book.close()


@dataclass
class _Columns:
    """Where a workbook's header puts what the importer reads."""

    width: int  # of the header
    conv_id: int
    context: int
    clinician: int | None  # the Clinician column of a human workbook written by release_study
    responses: list[tuple[int, str, str]]  # (index, header as written, responder key)


def _columns(header: tuple, *, kind: str, file: str, limits: ImportLimits) -> _Columns:
    """Where the header puts each column, once it is checked: its size, the required columns,
    the responder keys, no column named twice."""
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
        [n for n in names if n.strip() in ("ConvID", "context") or n.strip().startswith(prefix)],
        file=file,
    )
    return _Columns(
        width=len(header),
        conv_id=stripped.index("ConvID"),
        context=stripped.index("context"),
        clinician=(
            stripped.index(CLINICIAN_COLUMN)
            if kind == "human" and CLINICIAN_COLUMN in stripped
            else None
        ),
        responses=response_columns,
    )


def _read_rows(
    rows: Iterator[tuple[int, tuple]], columns: _Columns, *, file: str, limits: ImportLimits
) -> Workbook:
    """The rows after the header, each checked, and across rows: one row per clinician and
    conversation, one context per conversation."""
    seen: dict[tuple[str, str], int] = {}  # (clinician, ConvID) → row
    clinicians: dict[str, None] = {}
    contexts: dict[str, tuple[int, str]] = {}
    cells: list[Cell] = []
    cell_count = 0
    for number, values in rows:
        check_columns(len(values), file=file, row=number, limits=limits)
        # Each row counts as wide as the header, empty or not, so a sheet of a million
        # blank rows is refused like a million full ones.
        cell_count += max(columns.width, len(values))
        check_cells(cell_count, file=file, row=number, limits=limits)
        if all(v is None for v in values):
            continue
        conv_key = _conversation_key(values, columns.conv_id, file=file, row=number)
        clinician = ""
        if columns.clinician is not None:
            clinician = _clinician(values, columns.clinician, file=file, row=number)
            clinicians.setdefault(clinician)
        check_text(conv_key, file=file, row=number, column="ConvID", limits=limits)
        if len(conv_key) > ID_MAX_CHARS:
            raise ImportProblem(
                f"the id is {len(conv_key):,} characters, more than the {ID_MAX_CHARS} an id "
                "may have",
                file=file,
                row=number,
                column="ConvID",
            )
        if (clinician, conv_key) in seen:
            raise ImportProblem(
                f"duplicate ConvID {conv_key}"
                + (f" for clinician {clinician}" if clinician else "")
                + f" (first at row {seen[(clinician, conv_key)]})",
                file=file,
                row=number,
                column="ConvID",
            )
        seen[(clinician, conv_key)] = number
        context = _at(values, columns.context)
        if not isinstance(context, str) or not context.strip():
            raise ImportProblem(
                f"expected the conversation's text, got {context!r}",
                file=file,
                row=number,
                column="context",
            )
        check_text(context, file=file, row=number, column="context", limits=limits)
        if conv_key in contexts and contexts[conv_key][1] != context.strip():
            raise ImportProblem(
                f"the context of ConvID {conv_key} differs from the one at row "
                f"{contexts[conv_key][0]}",
                file=file,
                row=number,
                column="context",
            )
        contexts.setdefault(conv_key, (number, context.strip()))
        for index, column, responder in columns.responses:
            raw = _at(values, index)
            if raw is not None and not isinstance(raw, str):
                raw = str(raw)
            if raw is not None:
                check_text(raw, file=file, row=number, column=column, limits=limits)
            cells.append(Cell(number, column, conv_key, responder, raw, clinician))
    return Workbook(file, contexts, cells, [r for _, _, r in columns.responses], list(clinicians))


def _conversation_key(values: tuple, index: int, *, file: str, row: int) -> str:
    """A row's ConvID as text: a whole number a spreadsheet stored as a float reads as its
    integer, anything but a number or non-blank text is refused."""
    conv_id = _at(values, index)
    if isinstance(conv_id, float) and conv_id.is_integer():
        conv_id = int(conv_id)
    if (
        isinstance(conv_id, bool)
        or not isinstance(conv_id, int | str)
        or (isinstance(conv_id, str) and not conv_id.strip())
    ):
        raise ImportProblem(
            f"expected a conversation id, got {conv_id!r}", file=file, row=row, column="ConvID"
        )
    return str(conv_id).strip()


def _clinician(values: tuple, index: int, *, file: str, row: int) -> str:
    code = _at(values, index)
    if not isinstance(code, str) or not code.strip() or len(code.strip()) > CODE_MAX_CHARS:
        raise ImportProblem(
            f"expected a clinician's code of 1 to {CODE_MAX_CHARS} characters, got {code!r}",
            file=file,
            row=row,
            column=CLINICIAN_COLUMN,
        )
    return code.strip()


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
