"""The release page: a study's datasheet, read before downloading the study as a dataset (a zip
of what `manage.py release_study` writes; analysis/release.py). Researchers and admins only;
every download is in the export audit log."""

from __future__ import annotations

from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.text import slugify
from django.views.decorators.http import require_GET

from analysis.datasheet import datasheet_blocks
from analysis.downloads import zip_attachment
from analysis.models import ExportLog
from analysis.release import ReleaseProblem, release_datasheet_preview, release_zip
from analysis.services import export_log_create, export_log_finish
from annotation.models import Study
from annotation.roles import RESEARCHER, role_required


def _study(study_id: int) -> Study:
    return get_object_or_404(
        Study.objects.select_related("rubric"), pk=study_id, kind=Study.Kind.RESPONSE_RATING
    )


def _include_text(request: HttpRequest) -> bool:
    return request.GET.get("text", "1") != "0"


@require_GET
@role_required(RESEARCHER)
def release_page(request: HttpRequest, study_id: int) -> HttpResponse:
    study = _study(study_id)
    include_text = _include_text(request)
    try:
        sheet = release_datasheet_preview(study=study, include_text=include_text)
    except ReleaseProblem as exc:
        context = {"study": study, "problem": str(exc), "include_text": include_text}
        return render(request, "analysis/release.html", context, status=409)
    context = {"study": study, "blocks": datasheet_blocks(sheet), "include_text": include_text}
    return render(request, "analysis/release.html", context)


@require_GET
@role_required(RESEARCHER)
def release_download(request: HttpRequest, study_id: int) -> HttpResponse | FileResponse:
    study = _study(study_id)
    include_text = _include_text(request)
    # Logged as it starts, like every download, so one that fails or is cut off is logged too.
    log = export_log_create(
        user=request.user,
        study=study,
        channel=ExportLog.Channel.WEB,
        what="release",
        params={"include_text": include_text},
    )
    try:
        archive, summary = release_zip(study=study, include_text=include_text)
    except ReleaseProblem as exc:
        return HttpResponse(
            f"Not released: {exc}\n", status=409, content_type="text/plain; charset=utf-8"
        )
    export_log_finish(log=log, rows=summary.counts.get("conversations", 0))
    return zip_attachment(archive, filename=f"{slugify(study.name) or 'study'}-release.zip")
