"""The adjudicators' pages: a study's queue of escalations and disagreements, one response's
adjudication, and the decision on an escalation (docs/adjudication.md). An adjudicator of the
study or a platform admin opens them; the study's lead reads the queue (the escalations they
are told of), without the links to settle anything; for anyone else the study does not exist
(404, annotation.membership)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.roles import ADJUDICATOR, RESEARCHER, role_required

from .adjudication_selectors import adjudication_page, adjudication_queue
from .escalation_selectors import (
    escalation_next_open,
    escalations_for_queue,
    escalations_for_response,
)
from .forms import AdjudicationSaveForm, EscalationDecisionForm
from .membership import ADJUDICATOR as ADJUDICATOR_ROLE
from .membership import LEAD, studies_for, study_for
from .models import Adjudication, Escalation, Study
from .services.adjudication import AdjudicationRefused, adjudication_save
from .services.escalation import EscalationRefused, escalation_decide

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_htmx.middleware import HtmxDetails

    class HtmxHttpRequest(HttpRequest):
        htmx: HtmxDetails

    class AuthenticatedHtmxRequest(HtmxHttpRequest):
        user: User


def save_state(request: HttpRequest, error: str | None) -> HttpResponse:
    """An htmx save's answer: the form's save state, or why nothing was saved (400)."""
    status = 400 if error else 200
    return render(request, "annotation/_adjudication_state.html", {"error": error}, status=status)


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
@role_required(ADJUDICATOR, RESEARCHER)  # RESEARCHER: the gate a study's lead passes
def queue(request: HttpRequest, study_id: int) -> HttpResponse:
    study = study_for(user=request.user, study_id=study_id, roles=(ADJUDICATOR_ROLE, LEAD))
    if study.kind == Study.Kind.DISTORTION_LABELLING:
        # A labelling study's queue is of messages (label_adjudication_views), which decides
        # who may read it.
        return redirect("annotation:adjudicate_labels_queue", study_id=study.pk)
    rows = adjudication_queue(study=study)
    escalations = escalations_for_queue(study=study)
    return render(
        request,
        "annotation/adjudicate_queue.html",
        {
            "study": study,
            "rows": rows,
            "open": sum(not row.adjudicated for row in rows),
            "escalations": escalations,
            "escalations_open": sum(e.is_open for e in escalations),
            # A lead who does not adjudicate the study reads the queue without its links.
            "adjudicates": studies_for(user=request.user, roles=(ADJUDICATOR_ROLE,))
            .filter(pk=study.pk)
            .exists(),
        },
    )


def _page(request: HttpRequest, study: Study, response_id: int, *, status: int = 200, **extra):
    page = adjudication_page(study=study, response_id=response_id)
    escalations = escalations_for_response(study=study, response_id=response_id)
    context = {
        "page": page,
        "reasons": Adjudication.Reason.choices,
        "escalations": escalations,
        "decisions": Escalation.Decision.choices,
        # Open escalations come before any disagreement: the next one, where any is left.
        "next_escalation": escalation_next_open(study=study, after_response_id=response_id),
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
        return save_state(request, error)
    if error:
        return _page(request, study, response_id, status=400, error=error)
    messages.success(request, "Adjudication saved.")
    return redirect(
        f"{request.path}#attribute-{form.cleaned_data['attribute']}",
    )


@require_POST
@role_required(ADJUDICATOR)
def escalation_decision(
    request: AuthenticatedHtmxRequest, study_id: int, escalation_id: int
) -> HttpResponse:
    """An adjudicator's decision on one escalation (htmx: the save state as a fragment; without
    JavaScript: back to the response's page, or the page again with why)."""
    study = _study(request, study_id)
    escalation = (
        Escalation.objects.filter(pk=escalation_id, study=study).values("response_id").first()
    )
    if escalation is None:
        raise Http404("No such escalation in this study")
    form = EscalationDecisionForm(request.POST)
    error = None
    if not form.is_valid():
        error = "; ".join(" ".join(map(str, errs)) for errs in form.errors.values())
    else:
        try:
            escalation_decide(
                study=study,
                escalation_id=escalation_id,
                decision=form.cleaned_data["decision"],
                note=form.cleaned_data["note"],
                user=request.user,
            )
        except EscalationRefused as exc:
            error = str(exc)
    if request.htmx:
        return save_state(request, error)
    response_id = escalation["response_id"]
    if error:
        return _page(request, study, response_id, status=400, error=error)
    messages.success(request, "Decision saved: the escalation is closed.")
    return redirect(
        reverse("annotation:adjudicate", args=[study.pk, response_id])
        + f"#escalation-{escalation_id}"
    )
