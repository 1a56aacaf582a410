"""How much one imported file may hold, and the checks that refuse more before it is read.

The numbers come from settings (IMPORT_* in the environment, docs/importing.md). The importers
stay free of Django: they take an `ImportLimits`, and only `ImportLimits.from_settings()` reads
the settings.
"""

import re
import zipfile
from dataclasses import dataclass

from .base import ImportProblem

# Lengths of the columns imported text lands in (Conversation.external_id, Responder.key,
# Conversation.source); tests/annotation/test_import_limits.py keeps them equal to the models.
ID_MAX_CHARS = 200
KEY_MAX_CHARS = 100
SOURCE_MAX_CHARS = 100

# A real workbook's XML compresses about 3–10:1 (the released MentalAlign-70k files at most
# 10.4:1); 100:1 on a large member is a zip bomb, not a spreadsheet.
XLSX_MAX_RATIO = 100
XLSX_RATIO_CHECK_FROM_BYTES = 1 << 20

# PostgreSQL text cannot hold NUL, and UTF-8 cannot encode a lone surrogate (JSON "\ud800"):
# either would fail deep inside the database write instead of naming the cell.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class ImportLimits:
    max_file_bytes: int
    max_uncompressed_bytes: int
    max_cells: int
    max_columns: int
    max_responders_per_study: int
    max_cell_chars: int
    max_json_depth: int

    @classmethod
    def from_settings(cls) -> "ImportLimits":
        from django.conf import settings

        return cls(
            max_file_bytes=settings.IMPORT_MAX_FILE_BYTES,
            max_uncompressed_bytes=settings.IMPORT_MAX_UNCOMPRESSED_BYTES,
            max_cells=settings.IMPORT_MAX_CELLS,
            max_columns=settings.IMPORT_MAX_COLUMNS,
            max_responders_per_study=settings.IMPORT_MAX_RESPONDERS_PER_STUDY,
            max_cell_chars=settings.IMPORT_MAX_CELL_CHARS,
            max_json_depth=settings.IMPORT_MAX_JSON_DEPTH,
        )


def check_file_size(size: int, *, file: str, limits: ImportLimits) -> None:
    if size > limits.max_file_bytes:
        raise ImportProblem(
            f"the file is {size:,} bytes, more than the import limit of "
            f"{limits.max_file_bytes:,} bytes (IMPORT_MAX_FILE_BYTES)",
            file=file,
        )


def check_text(
    value: str, *, file: str, row: int | None, column: str, limits: ImportLimits
) -> None:
    """Refuse a cell that is too long or that the database cannot store."""
    if len(value) > limits.max_cell_chars:
        raise ImportProblem(
            f"the cell is {len(value):,} characters, more than the limit of "
            f"{limits.max_cell_chars:,} (IMPORT_MAX_CELL_CHARS)",
            file=file,
            row=row,
            column=column,
        )
    bad = _UNSTORABLE.search(value)
    if bad:
        what = "a NUL byte" if bad.group() == "\x00" else "an unpaired UTF-16 surrogate"
        raise ImportProblem(
            f"contains {what} at character {bad.start() + 1}, which cannot be stored",
            file=file,
            row=row,
            column=column,
        )


def check_cells(cells: int, *, file: str, row: int, limits: ImportLimits) -> None:
    if cells > limits.max_cells:
        raise ImportProblem(
            f"the file holds more than {limits.max_cells:,} cells (rows × columns; "
            "IMPORT_MAX_CELLS): split it or raise the limit",
            file=file,
            row=row,
        )


def check_columns(count: int, *, file: str, row: int, limits: ImportLimits) -> None:
    if count > limits.max_columns:
        raise ImportProblem(
            f"{count:,} columns, more than the limit of {limits.max_columns:,} "
            "(IMPORT_MAX_COLUMNS)",
            file=file,
            row=row,
        )


def check_same_columns(names: list[str], *, file: str) -> None:
    """Refuse two header names that mean the same column (case and surrounding spaces ignored):
    reading a file by name would otherwise keep one of them silently."""
    first: dict[str, str] = {}
    for name in names:
        key = name.strip().lower()
        if key in first:
            raise ImportProblem(
                f"columns {first[key]!r} and {name!r} name the same column (names are compared "
                "ignoring case and surrounding spaces); rename or remove one",
                file=file,
                row=1,
                column=name,
            )
        first[key] = name


def json_depth_exceeds(line: str, limit: int) -> bool:
    """Whether a JSON text nests arrays/objects deeper than `limit`, found without parsing it
    (the parser itself recurses, and a line of ten thousand '[' would exhaust the stack)."""
    if line.count("[") + line.count("{") <= limit:
        return False
    depth = 0
    for char in _STRINGS.sub("", line):
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def check_zip(path_or_file, *, file: str, limits: ImportLimits) -> None:
    """Refuse an .xlsx whose members would unpack to more than the limit, or that compresses
    like a zip bomb, before any XML is parsed. zipfile stops at each member's declared size
    (and fails the CRC past it), so the declared sizes checked here are what will be read."""
    try:
        with zipfile.ZipFile(path_or_file) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ImportProblem(
            f"not a readable .xlsx workbook ({type(exc).__name__}: not a zip archive)", file=file
        ) from None
    total = sum(m.file_size for m in members)
    if total > limits.max_uncompressed_bytes:
        largest = max(members, key=lambda m: m.file_size)
        raise ImportProblem(
            f"the workbook unpacks to {total:,} bytes ({largest.filename} alone "
            f"{largest.file_size:,}), more than the limit of {limits.max_uncompressed_bytes:,} "
            "(IMPORT_MAX_UNCOMPRESSED_BYTES)",
            file=file,
        )
    for member in members:
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size >= XLSX_RATIO_CHECK_FROM_BYTES and ratio > XLSX_MAX_RATIO:
            raise ImportProblem(
                f"{member.filename} is compressed {ratio:,.0f}:1 (a real workbook stays under "
                f"{XLSX_MAX_RATIO}:1): refusing a possible zip bomb",
                file=file,
            )
