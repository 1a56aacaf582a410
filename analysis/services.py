"""The analysis app's only writes: the export audit log (ExportLog)."""

from __future__ import annotations

from collections.abc import Iterator

from analysis.export import ExportCount
from analysis.models import ExportLog
from annotation.models import Study


def export_log_create(
    *, user, study: Study | None, channel: str, what: str, params: dict | None = None
) -> ExportLog:
    """Record an export as it starts, so a download that is cut off is still in the log."""
    return ExportLog.objects.create(
        user=user if user is not None and user.is_authenticated else None,
        study=study,
        channel=channel,
        what=what,
        params=params or {},
    )


def export_log_finish(*, log: ExportLog, rows: int) -> None:
    log.rows = rows
    log.save(update_fields=["rows"])


def export_logged(*, chunks: Iterator[str], count: ExportCount, log: ExportLog) -> Iterator[str]:
    """Pass a streaming export through and store its row count once it is fully sent."""
    yield from chunks
    export_log_finish(log=log, rows=count.rows)
