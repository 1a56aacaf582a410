"""The release page: a study's datasheet, read before preparing the study as a dataset (a zip
of what `manage.py release_study` writes; analysis/release.py), which a background job builds.
Researchers and admins only; every release is in the export audit log."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from accounts.roles import RESEARCHER, role_required
from analysis.datasheet import datasheet_blocks
from analysis.jobs.kinds import release_params
from analysis.jobs.services import JobRefused, job_digest, job_start
from analysis.models import ExportLog, Job
from analysis.release import release_datasheet_preview
from annotation.membership import study_for
from annotation.models import Study


def _study(request: HttpRequest, study_id: int) -> Study:
    return study_for(
        user=request.user,
        study_id=study_id,
        queryset=Study.objects.select_related("rubric").filter(kind=Study.Kind.RESPONSE_RATING),
    )


def _include_text(request: HttpRequest) -> bool:
    return request.GET.get("text", "1") != "0"


@require_GET
@role_required(RESEARCHER)
def release_page(request: HttpRequest, study_id: int) -> HttpResponse:
    """The datasheet of the release last prepared for the study as it is now, or why it was
    refused (409), or, when none was, the button that prepares one: nothing here builds it."""
    study = _study(request, study_id)
    include_text = _include_text(request)
    preview = release_datasheet_preview(study=study, include_text=include_text)
    context: dict[str, object] = {"study": study, "include_text": include_text}
    if preview.problem is not None:
        context["problem"] = preview.problem
        return render(request, "analysis/release.html", context, status=409)
    if preview.sheet is not None:
        context["blocks"] = datasheet_blocks(preview.sheet)
    return render(request, "analysis/release.html", context)


@require_POST
@role_required(RESEARCHER)
def release_start(request: HttpRequest, study_id: int) -> HttpResponse:
    """Start building the zip on a worker (or find the same one already started) and show its
    job: a large study's release takes longer than a web request may."""
    study = _study(request, study_id)
    include_text = request.POST.get("text", "1") != "0"
    params = release_params(study=study, include_text=include_text)
    try:
        job, _ = job_start(
            owner=request.user,
            kind=Job.Kind.RELEASE,
            params={**params, "channel": ExportLog.Channel.WEB},
            digest=job_digest(kind=Job.Kind.RELEASE, params=params),
            study=study,
        )
    except JobRefused as exc:
        messages.error(request, str(exc))
        return redirect("analysis:release", study_id=study.pk)
    return redirect("analysis:job", job_id=job.pk)
