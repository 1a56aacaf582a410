"""The adjudicators' pages for distortion labels: a study's queue of user messages whose
clinicians disagree, and one message's adjudication (docs/adjudication.md, "Distortion
labels"). An adjudicator of the study or a platform admin opens them; for anyone else the study
does not exist (404, annotation.membership)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from accounts.roles import ADJUDICATOR, role_required

from .adjudication_views import save_state
from .forms import LabelAdjudicationForm
from .label_adjudication_selectors import label_adjudication_page, label_adjudication_queue
from .membership import ADJUDICATOR as ADJUDICATOR_ROLE
from .membership import study_for
from .models import Adjudication, Study
from .services.label_adjudication import LabelAdjudicationRefused, label_adjudication_save

if TYPE_CHECKING:
    from django_htmx.middleware import HtmxDetails

    class HtmxHttpRequest(HttpRequest):
        htmx: HtmxDetails


def _study(request: HttpRequest, study_id: int) -> Study:
    return study_for(
        user=request.user,
        study_id=study_id,
        roles=(ADJUDICATOR_ROLE,),
        queryset=Study.objects.filter(kind=Study.Kind.DISTORTION_LABELLING),
    )


@require_GET
@role_required(ADJUDICATOR)
def queue(request: HttpRequest, study_id: int) -> HttpResponse:
    study = _study(request, study_id)
    rows = label_adjudication_queue(study=study)
    return render(
        request,
        "annotation/label_adjudication_queue.html",
        {"study": study, "rows": rows, "open": sum(not row.adjudicated for row in rows)},
    )


def _page(request: HttpRequest, study: Study, conversation_id: int, *, status=200, **extra):
    context = {
        "page": label_adjudication_page(study=study, conversation_id=conversation_id),
        "reasons": Adjudication.Reason.choices,
        **extra,
    }
    return render(request, "annotation/label_adjudication.html", context, status=status)


@require_http_methods(["GET", "POST"])
@role_required(ADJUDICATOR)
def message_page(request: HtmxHttpRequest, study_id: int, conversation_id: int) -> HttpResponse:
    """GET: the page. POST: the message's adjudicated label(s), saved (htmx: the save state as
    a fragment; without JavaScript: back to the page). Refused: 400, nothing written."""
    study = _study(request, study_id)
    if request.method == "GET":
        return _page(request, study, conversation_id)
    label_adjudication_page(study=study, conversation_id=conversation_id)  # 404 if not ours
    form = LabelAdjudicationForm(request.POST, scheme=study.label_scheme)
    error = None
    if not form.is_valid():
        error = "; ".join(
            " ".join(map(str, errs)) if name == "__all__" else f"{name}: {' '.join(map(str, errs))}"
            for name, errs in form.errors.items()
        )
    else:
        data = form.cleaned_data
        try:
            label_adjudication_save(
                study=study,
                conversation_id=conversation_id,
                labels=data["labels"],
                reason=data["reason"],
                reason_text=data["reason_text"],
                user=request.user,
            )
        except LabelAdjudicationRefused as exc:
            error = str(exc)
    if request.htmx:
        return save_state(request, error)
    if error:
        return _page(request, study, conversation_id, status=400, error=error)
    messages.success(request, "Adjudication saved.")
    return redirect(request.path)
