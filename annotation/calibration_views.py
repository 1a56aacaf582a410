"""Pages for training, top-up assignments and time on task (admins), and the practice feedback
a clinician sees after submitting a practice conversation. Writes go through services."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from accounts.roles import ADMIN, CLINICIAN, AuthenticatedHttpRequest, role_required

from .admin_views import study_from_request
from .calibration_forms import (
    CalibrationSettingsForm,
    ClinicianChoiceForm,
    PracticeMarkForm,
    RaterForm,
    ReferenceCsvForm,
)
from .calibration_selectors import (
    reference_grid,
    reference_grid_cells,
    study_choices,
    time_on_task_rows,
)
from .models import Assignment, Study
from .selectors import assignment_get_for_user
from .topup import topup_assign, topup_summary
from .training import (
    ReferenceProblems,
    calibration_settings_get,
    calibration_settings_set,
    practice_assign,
    practice_conversations_mark,
    practice_feedback,
    reference_csv_rows,
    reference_scores_set,
    training_let_through,
    training_overview,
)

MAX_REFERENCE_CSV_BYTES = 2_000_000


# --- Clinicians ----------------------------------------------------------------------------------


@role_required(CLINICIAN)
def feedback(request: HttpRequest, token: str) -> HttpResponse:
    """A submitted practice conversation beside its reference scores (own assignments only)."""
    assignment = assignment_get_for_user(user=request.user, token=token)
    if (
        assignment.kind != Assignment.Kind.PRACTICE
        or assignment.status != Assignment.Status.SUBMITTED
    ):
        raise Http404("No feedback for this conversation")
    return render(
        request,
        "annotation/practice_feedback.html",
        {"page": practice_feedback(assignment=assignment)},
    )


# --- Admins: training ----------------------------------------------------------------------------


def _training_page(request: HttpRequest, study: Study | None, *, status: int = 200, **forms):
    context: dict = {
        "studies": study_choices(kind=Study.Kind.RESPONSE_RATING),
        "study": study,
    }
    if study is not None:
        rule = calibration_settings_get(study=study)
        conversations, results = training_overview(study=study)
        context.update(
            settings_form=forms.get("settings_form")
            or CalibrationSettingsForm(
                initial={
                    "pass_mean_abs_diff": rule.pass_mean_abs_diff,
                    "pass_max_diff": rule.pass_max_diff,
                    "retest_count": rule.retest_count,
                    "retest_gap": rule.retest_gap,
                }
            ),
            mark_form=forms.get("mark_form") or PracticeMarkForm(),
            csv_form=forms.get("csv_form") or ReferenceCsvForm(),
            assign_form=forms.get("assign_form") or ClinicianChoiceForm(),
            conversations=conversations,
            results=results,
            grid=reference_grid(study=study),
            rule=rule,
            problems=forms.get("problems"),
        )
    return render(request, "annotation/manage/training.html", context, status=status)


@role_required(ADMIN)
def training(request: AuthenticatedHttpRequest) -> HttpResponse:
    study = study_from_request(request)
    if request.method != "POST":
        return _training_page(request, study)
    if study is None:
        messages.error(request, "Choose a study.")
        return redirect("annotation:manage_training")
    back = f"{reverse('annotation:manage_training')}?study={study.pk}"
    action = request.POST.get("action", "")
    form: forms.Form
    try:
        if action == "settings":
            form = CalibrationSettingsForm(request.POST)
            if not form.is_valid():
                return _training_page(request, study, status=422, settings_form=form)
            calibration_settings_set(study=study, **form.cleaned_data)
            messages.success(request, "Pass rule and repeats saved.")
        elif action == "mark":
            form = PracticeMarkForm(request.POST)
            if not form.is_valid():
                return _training_page(request, study, status=422, mark_form=form)
            ids = form.cleaned_data["conversations"].replace(",", "\n").splitlines()
            marked = practice_conversations_mark(study=study, external_ids=ids)
            messages.success(request, f"{len(marked)} conversations are practice conversations.")
        elif action == "references":
            n = reference_scores_set(
                study=study, rows=_grid_rows(request, study), user=request.user
            )
            messages.success(request, f"{n} reference scores saved.")
        elif action == "csv":
            form = ReferenceCsvForm(request.POST, request.FILES)
            if not form.is_valid():
                return _training_page(request, study, status=422, csv_form=form)
            upload = form.cleaned_data["file"]
            if upload.size > MAX_REFERENCE_CSV_BYTES:
                raise ReferenceProblems(
                    [
                        f"{upload.name}: {upload.size:,} bytes, more than the "
                        f"{MAX_REFERENCE_CSV_BYTES:,} a reference file may have"
                    ]  # fmt: skip
                )
            try:
                text = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                raise ReferenceProblems([f"{upload.name}: not UTF-8 text"]) from None
            rows = reference_csv_rows(text=text, file=upload.name)
            n = reference_scores_set(study=study, rows=rows, user=request.user, file=upload.name)
            messages.success(request, f"{n} reference scores imported from {upload.name}.")
        elif action == "assign":
            form = ClinicianChoiceForm(request.POST)
            if not form.is_valid():
                return _training_page(request, study, status=422, assign_form=form)
            created = practice_assign(study=study, clinicians=list(form.cleaned_data["clinicians"]))
            messages.success(request, f"{len(created)} practice assignments created.")
        elif action == "let_through":
            form = RaterForm(request.POST)
            if not form.is_valid():
                messages.error(request, "Choose a clinician.")
            else:
                training_let_through(
                    study=study, rater=form.cleaned_data["rater"], user=request.user
                )
                messages.success(request, f"{form.cleaned_data['rater']} may start real work.")
        else:
            messages.error(request, "Unknown action.")
            return _training_page(request, study, status=400)
    except ReferenceProblems as exc:
        return _training_page(request, study, status=422, problems=exc.problems)
    except ValueError as exc:
        return _training_page(request, study, status=422, problems=[str(exc)])
    return redirect(back)


def _grid_rows(request: HttpRequest, study: Study) -> list[tuple[int, str, str, str, str]]:
    """The filled cells of the reference grid as reference_scores_set rows (blank: unchanged)."""
    cells = reference_grid_cells(study=study)
    rows: list[tuple[int, str, str, str, str]] = []
    problems: list[str] = []
    # QueryDict.items gives each key's last value: a str (the stubs allow an empty list).
    posted = cast(Iterable[tuple[str, str]], request.POST.items())
    for key, value in posted:
        if not key.startswith("ref-") or not value.strip():
            continue
        cell = cells.get(key)
        if cell is None:
            problems.append(f"the form: {key!r} is not a practice response's attribute")
            continue
        rows.append((len(rows) + 1, *cell, value.strip()))
    if problems:
        raise ReferenceProblems(problems)
    if not rows:
        raise ReferenceProblems(["the form: no reference score was entered"])
    return rows


# --- Admins: top-up and time on task -------------------------------------------------------------


@role_required(ADMIN)
def topup(request: AuthenticatedHttpRequest) -> HttpResponse:
    study = study_from_request(request)
    if request.method == "POST":
        if study is None:
            messages.error(request, "Choose a study.")
            return redirect("annotation:manage")
        done = topup_assign(study=study, user=request.user)
        messages.success(
            request,
            f"{done.items} responses given to {done.clinicians} clinicians in "
            f"{done.assignments} conversations: unstarted ones got them in place, the others as "
            "a new task each; submitted work stays submitted.",
        )
        return redirect(f"{reverse('annotation:manage')}?study={study.pk}")
    summary = topup_summary(study=study) if study else None
    return render(
        request,
        "annotation/manage/topup.html",
        {"study": study, "summary": summary, "studies": study_choices()},
    )


TIME_ROWS_SHOWN = 500


@role_required(ADMIN)
def time_on_task(request: HttpRequest) -> HttpResponse:
    study = study_from_request(request)
    rows = time_on_task_rows(study=study, limit=TIME_ROWS_SHOWN) if study is not None else []
    return render(
        request,
        "annotation/manage/time_on_task.html",
        {"study": study, "rows": rows, "studies": study_choices(), "shown": TIME_ROWS_SHOWN},
    )
