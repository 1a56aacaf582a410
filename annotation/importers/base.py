"""What every importer shares: one error type that names file, row and column."""

import hashlib
from pathlib import Path

MAX_SHOWN_COLUMN = 60
MAX_SHOWN_REASON = 300


def _shorten(text: str, limit: int) -> str:
    # A hostile file may put megabytes into a header or cell; the message quotes only a start.
    text = " ".join(text.splitlines())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ImportProblem(Exception):
    """Bad input; the message is one line naming the file, row and column where known."""

    def __init__(self, message: str, *, file: str, row: int | None = None, column: str = ""):
        message = _shorten(message, MAX_SHOWN_REASON)
        column = _shorten(column.strip(), MAX_SHOWN_COLUMN)
        self.file, self.row, self.column, self.reason = file, row, column, message
        where = [file]
        if row is not None:
            where.append(f"row {row}")
        if column:
            where.append(f"column {column!r}")
        super().__init__(f"{', '.join(where)}: {message}")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def require_readable(path: Path) -> None:
    if not path.exists():
        raise ImportProblem("file not found", file=str(path))
    if not path.is_file():
        raise ImportProblem("not a regular file", file=str(path))
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ImportProblem(f"cannot be read ({exc.strerror})", file=str(path)) from None
