"""The adjudicators' pages: a study's queue of disagreements and one response's adjudication
(docs/adjudication.md). An adjudicator of the study or a platform admin opens them; for anyone
else the study does not exist (404, annotation.membership)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from .adjudication_selectors import adjudication_page, adjudication_queue
from .forms import AdjudicationSaveForm
from .membership import ADJUDICATOR as ADJUDICATOR_ROLE
from .membership import studies_for, study_for
from .models import Adjudication, Study
from .roles import ADJUDICATOR, role_required
from .services.adjudication import AdjudicationRefused, adjudication_save

if TYPE_CHECKING:
    from django_htmx.middleware import HtmxDetails

    class HtmxHttpRequest(HttpRequest):
        htmx: HtmxDetails


def _study(request: HttpRequest, study_id: int) -> Study:
    return study_for(
        user=request.user,
        study_id=study_id,
        roles=(ADJUDICATOR_ROLE,),
        queryset=Study.objects.filter(kind=Study.Kind.RESPONSE_RATING),
    )


@require_GET
@role_required(ADJUDICATOR)
def index(request: HttpRequest) -> HttpResponse:
    # Distortion studies too: their queue is the labels' (label_adjudication_views).
    studies = studies_for(user=request.user, roles=(ADJUDICATOR_ROLE,)).filter(
        kind__in=(Study.Kind.RESPONSE_RATING, Study.Kind.DISTORTION_LABELLING)
    )
    return render(request, "annotation/adjudicate_index.html", {"studies": studies})


@require_GET
@role_required(ADJUDICATOR)
def queue(request: HttpRequest, study_id: int) -> HttpResponse:
    study = _study(request, study_id)
    rows = adjudication_queue(study=study)
    return render(
        request,
        "annotation/adjudicate_queue.html",
        {
            "study": study,
            "rows": rows,
            "open": sum(not row.adjudicated for row in rows),
        },
    )


def _page(request: HttpRequest, study: Study, response_id: int, *, status: int = 200, **extra):
    context = {
        "page": adjudication_page(study=study, response_id=response_id),
        "reasons": Adjudication.Reason.choices,
        **extra,
    }
    return render(request, "annotation/adjudicate.html", context, status=status)


@require_http_methods(["GET", "POST"])
@role_required(ADJUDICATOR)
def response_page(request: HtmxHttpRequest, study_id: int, response_id: int) -> HttpResponse:
    """GET: the page. POST: one attribute's adjudication, saved (htmx: the save state as a
    fragment; without JavaScript: back to the page)."""
    study = _study(request, study_id)
    if request.method == "GET":
        return _page(request, study, response_id)
    page = adjudication_page(study=study, response_id=response_id)  # 404 for another study's
    form = AdjudicationSaveForm(request.POST)
    error = None
    if not form.is_valid():
        error = "; ".join(
            f"{name}: {' '.join(map(str, errs))}" for name, errs in form.errors.items()
        )
    else:
        data = form.cleaned_data
        try:
            adjudication_save(
                study=study,
                response_id=page.response_id,
                attribute_id=data["attribute"],
                score=data["score"],
                reason=data["reason"],
                reason_text=data["reason_text"],
                rubric_needs_change=data["rubric_needs_change"],
                user=request.user,
            )
        except AdjudicationRefused as exc:
            error = str(exc)
    if request.htmx:
        return render(
            request,
            "annotation/_adjudication_state.html",
            {"error": error},
            status=400 if error else 200,
        )
    if error:
        return _page(request, study, response_id, status=400, error=error)
    messages.success(request, "Adjudication saved.")
    return redirect(
        f"{request.path}#attribute-{form.cleaned_data['attribute']}",
    )
