"""Researchers' CSV downloads from the web pages, recorded in the export audit log.

The file itself is annotation.csvsafe's (every cell safe to open in a spreadsheet, one
Content-Disposition): this module adds the audit log. A released study is a zip of such files
(analysis/release.py): `zip_attachment`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import IO, Any

import pandas as pd
from django.contrib.auth.models import AnonymousUser, User
from django.http import FileResponse, HttpResponse

from annotation.csvsafe import attachment_disposition, csv_attachment, csv_text, frame_csv
from annotation.models import Study

from .models import ExportLog
from .services import export_log_create, export_log_finish

ZIP_CONTENT_TYPE = "application/zip"


def table_download(
    *,
    user: User | AnonymousUser,
    study: Study,
    what: str,
    params: dict[str, Any],
    table: pd.DataFrame,
    filename: str,
) -> HttpResponse:
    """A computed table as a CSV download from the web pages, recorded in the export log."""
    log = export_log_create(
        user=user, study=study, channel=ExportLog.Channel.WEB, what=what, params=params
    )
    export_log_finish(log=log, rows=len(table))
    body = frame_csv(table)
    return csv_attachment(body, filename=filename)


def rows_download(
    *,
    user: User | AnonymousUser,
    study: Study,
    what: str,
    params: dict[str, Any],
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    filename: str,
) -> HttpResponse:
    """Rows under a header as a CSV download from the web pages, recorded in the export log."""
    log = export_log_create(
        user=user, study=study, channel=ExportLog.Channel.WEB, what=what, params=params
    )
    rows = list(rows)
    body = csv_text(header, rows)
    export_log_finish(log=log, rows=len(rows))
    return csv_attachment(body, filename=filename)


def zip_attachment(archive: IO[bytes], *, filename: str) -> FileResponse:
    """A zip file to save, streamed from an open file that is closed once sent."""
    response = FileResponse(archive, content_type=ZIP_CONTENT_TYPE)
    response["Content-Disposition"] = attachment_disposition(filename)
    return response
