"""The analysis app's only writes: the export audit log (ExportLog)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib.auth.models import AnonymousUser, User

from analysis.export import ExportCount, long_csv, wide_csv
from analysis.models import ExportLog
from annotation.models import Study


def export_log_create(
    *,
    user: User | AnonymousUser | None,
    study: Study | None,
    channel: str,
    what: str,
    params: dict[str, Any] | None = None,
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


def ratings_export_start(
    *, user: User | AnonymousUser | None, study: Study, wide: bool, identified: bool, channel: str
) -> tuple[str, Iterator[str]]:
    """Start a logged export of every score of `study`: the audit row is written now, its row
    count once the last chunk is sent. Returns what was exported ("ratings-long"/"-wide") and
    the CSV chunks. The caller has already checked that `user` may see `identified` data."""
    what = "ratings-wide" if wide else "ratings-long"
    count = ExportCount()
    log = export_log_create(
        user=user, study=study, channel=channel, what=what, params={"identified": identified}
    )
    chunks = (wide_csv if wide else long_csv)(study=study, count=count, identified=identified)
    return what, export_logged(chunks=chunks, count=count, log=log)
