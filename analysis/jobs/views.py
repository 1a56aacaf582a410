"""A person's background jobs: the list, a job's page (its progress bar polled with htmx while it
runs), cancel and the result's download. Only the job's owner reaches a job."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.files.storage import default_storage
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from accounts.roles import RESEARCHER, role_required
from analysis.downloads import zip_attachment
from analysis.forms import BOOTSTRAP_CHOICES
from analysis.jobs.selectors import job_get_for_user, jobs_of
from analysis.jobs.services import job_cancel
from analysis.models import Job

if TYPE_CHECKING:
    from django_htmx.middleware import HtmxDetails

    class HtmxHttpRequest(HttpRequest):
        """A request through django_htmx's middleware (settings.MIDDLEWARE)."""

        htmx: HtmxDetails


# The bar's poll: often enough that it moves, rare enough that 20 open job pages cost little.
POLL_SECONDS = 1


def _number(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def kappa_f1_numbers(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The κ_F1 result's table, as the evaluation page showed it."""
    return [
        ("Items", _number(result["n_items"])),
        ("Weighted F1", _number(result["f1"])),
        ("F1_random = Σ p_c² (closed form)", _number(result["f1_random"])),
        ("κ_F1 = (F1 − F1_random) / (1 − F1_random)", _number(result["kappa_f1"])),
        (f"Simulated random F1 (mean of {result['n_sim']})", _number(result["sim_mean"])),
        ("Simulated SD", _number(result["sim_sd"])),
        ("Simulated − closed form, in standard errors", _number(result["sim_z"])),
    ]


def report_dashboard_url(job: Job) -> str | None:
    """The dashboard address that shows a report job's report (from the cache once the job is
    done), or None when the dashboard cannot ask for its parameters (an API job's resamples
    the dashboard does not offer)."""
    if job.study_id is None:
        return None
    filters, report = job.params.get("filters", {}), job.params.get("report", {})
    n_boot = report.get("n_boot")
    if n_boot not in dict(BOOTSTRAP_CHOICES) or report.get("two_stage"):
        return None
    query = QueryDict(mutable=True)
    for name in ("condition", "source", "clinician"):
        if filters.get(name):
            query[name] = filters[name]
    query.setlist("judge", list(filters.get("judges") or []))
    if filters.get("clinician_ratings"):
        query["clinician_ratings"] = filters["clinician_ratings"]
    if report.get("as_published"):
        query["as_published"] = "on"
    query["bootstrap"] = str(n_boot)
    query["seed"] = str(report.get("seed", 0))
    return f"{reverse('analysis:dashboard', args=[job.study_id])}?{query.urlencode()}"


def _context(job: Job) -> dict[str, Any]:
    context: dict[str, Any] = {"job": job, "poll": job.is_active, "poll_seconds": POLL_SECONDS}
    if job.kind == Job.Kind.KAPPA_F1 and job.state == Job.State.DONE and job.result:
        context["numbers"] = kappa_f1_numbers(job.result)
        context["proportions"] = [
            (name, _number(value)) for name, value in job.result["proportions"].items()
        ]
    if job.kind == Job.Kind.REPORT:
        context["dashboard_url"] = report_dashboard_url(job)
        if job.state == Job.State.DONE and job.result:
            context["reliability"] = [
                {**row, **{k: _number(row.get(k)) for k in ("icc_c1", "ci_low", "ci_high")}}
                for row in job.result.get("reliability", [])
            ]
    return context


@require_GET
@role_required(RESEARCHER)
def job_list(request: HttpRequest) -> HttpResponse:
    return render(request, "analysis/jobs.html", {"jobs": jobs_of(user=request.user)[:100]})


@require_GET
@role_required(RESEARCHER)
def job_detail(request: HtmxHttpRequest, job_id: str) -> HttpResponse:
    job = job_get_for_user(user=request.user, job_id=job_id)
    template = "analysis/_job_status.html" if request.htmx else "analysis/job.html"
    return render(request, template, _context(job))


@require_POST
@role_required(RESEARCHER)
def job_cancel_view(request: HttpRequest, job_id: str) -> HttpResponse:
    job = job_get_for_user(user=request.user, job_id=job_id)
    if job_cancel(job=job):
        messages.success(request, "Cancelled: the worker stops within a second or two.")
    else:
        messages.info(request, "The job had already ended.")
    return redirect("analysis:job", job_id=job.pk)


@require_GET
@role_required(RESEARCHER)
def job_download(request: HttpRequest, job_id: str) -> FileResponse:
    job = job_get_for_user(user=request.user, job_id=job_id)
    if not job.can_download:
        raise Http404("This job has no result to download (not finished, or deleted).")
    # Only the release keeps a file so far, and it is a zip.
    return zip_attachment(
        default_storage.open(job.result_file.name or "", "rb"), filename=job.result_name
    )
