"""The released MentalAlign-70k workbooks (shared data/mentalalign70k/README.md).

`ConvID`, `context`, then one column per response key: `human_response_<key>` in the human
workbook, `judge_response_<key>` in a judge's; each cell holds JSON (sometimes fenced, sometimes
broken). Header names may carry a leading space.
"""

from dataclasses import dataclass
from pathlib import Path

from .base import ImportProblem, require_readable

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


def read_workbook(path: Path, *, kind: str) -> Workbook:
    import openpyxl  # imported here: only imports need it

    require_readable(path)
    file = str(path)
    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many unrelated types for a non-workbook
        raise ImportProblem(
            f"not a readable .xlsx workbook ({type(exc).__name__})", file=file
        ) from None
    try:
        rows = book.worksheets[0].iter_rows(values_only=True)
        header = next(rows, None)
        if header is None:
            raise ImportProblem("empty workbook", file=file)
        names = [str(h) if h is not None else "" for h in header]
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
        id_index, context_index = stripped.index("ConvID"), stripped.index("context")
        contexts: dict[str, tuple[int, str]] = {}
        cells: list[Cell] = []
        for number, values in enumerate(rows, start=2):
            if values is None or all(v is None for v in values):
                continue
            conv_id = values[id_index]
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
            if conv_key in contexts:
                raise ImportProblem(
                    f"duplicate ConvID {conv_key} (first at row {contexts[conv_key][0]})",
                    file=file,
                    row=number,
                    column="ConvID",
                )
            context = values[context_index]
            if not isinstance(context, str) or not context.strip():
                raise ImportProblem(
                    f"expected the conversation's text, got {context!r}",
                    file=file,
                    row=number,
                    column="context",
                )
            contexts[conv_key] = (number, context.strip())
            for index, column, responder in response_columns:
                raw = values[index] if index < len(values) else None
                if raw is not None and not isinstance(raw, str):
                    raw = str(raw)
                cells.append(Cell(number, column, conv_key, responder, raw))
        return Workbook(file, contexts, cells, [r for _, _, r in response_columns])
    finally:
        book.close()
