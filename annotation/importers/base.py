"""What every importer shares: one error type that names file, row and column."""

import hashlib
from pathlib import Path


class ImportProblem(Exception):
    """Bad input; the message is one line naming the file, row and column where known."""

    def __init__(self, message: str, *, file: str, row: int | None = None, column: str = ""):
        self.file, self.row, self.column, self.reason = file, row, column, message
        where = [file]
        if row is not None:
            where.append(f"row {row}")
        if column:
            where.append(f"column {column.strip()!r}")
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
