"""CSV downloads, built one way for every page and API endpoint that offers one.

Every cell goes through annotation.csvsafe (a cell starting with =, +, - or @ is not run as a
formula by a spreadsheet), and every download a researcher makes is in the export audit log.
A released study is a zip of such files (analysis/release.py): `zip_attachment`.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any, overload

import pandas as pd
from django.contrib.auth.models import AnonymousUser, User
from django.http import FileResponse, HttpResponse, StreamingHttpResponse

from annotation.csvsafe import frame_csv, safe_writer
from annotation.models import Study

from .models import ExportLog
from .services import export_log_create, export_log_finish

CSV_CONTENT_TYPE = "text/csv; charset=utf-8"
ZIP_CONTENT_TYPE = "application/zip"


@overload
def csv_attachment(body: str, *, filename: str) -> HttpResponse: ...
@overload
def csv_attachment(body: Iterator[str], *, filename: str) -> StreamingHttpResponse: ...
def csv_attachment(
    body: str | Iterator[str], *, filename: str
) -> HttpResponse | StreamingHttpResponse:
    """A CSV file to save: a whole body, or chunks streamed as they are produced."""
    response: HttpResponse | StreamingHttpResponse
    if isinstance(body, str):
        response = HttpResponse(body, content_type=CSV_CONTENT_TYPE)
    else:
        response = StreamingHttpResponse(body, content_type=CSV_CONTENT_TYPE)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


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
    buffer = io.StringIO()
    writer = safe_writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    export_log_finish(log=log, rows=len(rows))
    return csv_attachment(buffer.getvalue(), filename=filename)


def zip_attachment(archive: IO[bytes], *, filename: str) -> FileResponse:
    """A zip file to save, streamed from an open file that is closed once sent."""
    response = FileResponse(archive, content_type=ZIP_CONTENT_TYPE)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
