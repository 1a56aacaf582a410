"""Admin pages for clinician work: assign, progress, reassign, reclaim, invite, audit trail.

Admins only (staff or the admin group); every write goes through a service and every read
through a selector (admin_selectors.py, selectors.py).
"""

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.views.decorators.http import require_POST

from accounts.roles import ADMIN, AuthenticatedHttpRequest, role_required
from accounts.tokens import password_token_generator
from accounts.users import user_password_token_issue

from .admin_selectors import (
    LABEL_CHANGE_HEADER,
    RATING_CHANGE_HEADER,
    AuditFilter,
    active_user_get,
    assign_defaults,
    assignment_get,
    audit_label_changes,
    audit_rating_changes,
    label_change_rows,
    manageable_user_ids,
    move_candidates,
    rating_change_rows,
    studies_all,
    studies_overview,
    study_get,
    study_steps,
)
from .csvsafe import csv_attachment, csv_text
from .escalation_selectors import escalations_open_count
from .forms import AssignForm, AuditFilterForm, ClinicianSampleForm, InviteForm, RaterChoiceForm
from .models import Study
from .selectors import (
    assignments_for_admin,
    clinician_progress,
    clinician_sample_current,
)
from .services import (
    assignment_reassign,
    assignment_reclaim,
    assignments_create,
    clinician_invite,
)
from .services.sampling import clinician_sample_draw
from .team_selectors import team_progress
from .topup import topup_summary

ASSIGNMENTS_SHOWN = 500


def study_from_request(request: HttpRequest) -> Study | None:
    """The study a manage page was asked about (?study= or a posted field), if it exists."""
    return study_get(pk=request.GET.get("study") or request.POST.get("study"))


# A one-time set-password link, kept in the session from the invite (or reset) until the study
# page shows it once: the invite redirects back to the page it came from, study and all.
PASSWORD_LINK_SESSION_KEY = "manage_password_link"


def _manage_url(study: Study | None, anchor: str = "") -> str:
    query = f"?study={study.pk}" if study else ""
    return f"{reverse('annotation:manage')}{query}{'#' + anchor if anchor else ''}"


def _overview(request: HttpRequest, *, status: int = 200, **extra) -> HttpResponse:
    study = study_from_request(request)
    shown = request.session.pop(PASSWORD_LINK_SESSION_KEY, None)
    if shown and "link" not in extra:
        extra.update(
            link_for=shown["username"], link=shown["link"], emailed_to=shown.get("emailed_to", "")
        )
    progress = clinician_progress(study=study)
    manageable = manageable_user_ids(
        actor=request.user, user_ids=[p.rater.user_id for p in progress if p.rater.user_id]
    )
    if study is None:
        # No study chosen: the studies, each with the step it is at, and the clinicians.
        context = {
            "studies": studies_overview(),
            "progress": progress,
            "manageable": manageable,
            "invite_form": extra.pop("invite_form", None) or InviteForm(),
            **extra,
        }
        return render(request, "annotation/manage/studies.html", context, status=status)
    # A page, not a dump: a large study's assignments are many thousands of rows.
    assignments = list(assignments_for_admin(study=study)[:ASSIGNMENTS_SHOWN])
    # Each row's reassign/reclaim menu: only clinicians who can take it, least loaded first.
    open_load = {
        p.rater.pk: p.counts.get("pending", 0) + p.counts.get("in_progress", 0) for p in progress
    }
    candidates = move_candidates(
        assignments=assignments, clinicians=[p.rater for p in progress], load=open_load
    )
    for a in assignments:
        a.stale = a.is_stale
        a.candidates = candidates[a.pk]
    # Responses added after assignment that clinicians have not seen (top-up).
    topup = topup_summary(study=study)
    context = {
        "studies": studies_all(),
        "study": study,
        "steps": study_steps(study=study, topup=topup),
        "topup": topup,
        "progress": progress,
        # Per site and per clinician of this study, with its deadline (the team page's tables).
        "team": team_progress(study=study),
        "escalations_open": escalations_open_count(study=study),
        "assignments": assignments,
        "assignments_shown": ASSIGNMENTS_SHOWN,
        # Said once above the table rather than in every row that cannot move.
        "unmovable": any(
            not a.part and (a.status == "pending" or a.stale) and not a.candidates
            for a in assignments
        ),
        "assign_form": extra.pop("assign_form", None)
        or AssignForm(initial=assign_defaults(study=study)),
        "invite_form": extra.pop("invite_form", None) or InviteForm(),
        "sample": clinician_sample_current(study=study),
        "sample_form": extra.pop("sample_form", None)
        or ClinicianSampleForm(initial={"study": study.pk}),
        # Reset links only where the signed-in admin may issue one (one query for all rows).
        "manageable": manageable,
        **extra,
    }
    return render(request, "annotation/admin_overview.html", context, status=status)


@role_required(ADMIN)
def overview(request: HttpRequest) -> HttpResponse:
    return _overview(request)


@require_POST
@role_required(ADMIN)
def assign(request: HttpRequest) -> HttpResponse:
    form = AssignForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            sample = clinician_sample_current(study=data["study"])
            if data["sample_only"] and sample is None:
                raise ValueError("the study has no clinician sample: draw one first")
            created = assignments_create(
                study=data["study"],
                clinicians=list(data["clinicians"]),
                overlap=data["overlap"],
                overlap_fraction=data["overlap_percent"] / 100,
                conversations=(
                    set(sample.conversations.values_list("pk", flat=True))
                    if data["sample_only"] and sample
                    else None
                ),
            )
        except ValueError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"{len(created)} assignments created.")
            return redirect(_manage_url(data["study"], "progress"))
    return _overview(request, assign_form=form, status=422)


@require_POST
@role_required(ADMIN)
def sample_draw(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = ClinicianSampleForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            sample = clinician_sample_draw(
                study=data["study"],
                size=data["size"],
                method=data["method"],
                seed=data["seed"],
                user=request.user,
            )
        except ValueError as exc:
            # A refused stratification is the method's fault, not the size's.
            form.add_error("method" if "stratif" in str(exc) else "size", str(exc))
        else:
            messages.success(request, f"Drew {sample.describe()}.")
            return redirect(_manage_url(data["study"], "sample"))
    return _overview(request, sample_form=form, status=422)


def _rater_action(request: HttpRequest, pk: int, action) -> HttpResponse:
    assignment = assignment_get(pk=pk)
    if assignment is None:
        raise Http404("No such assignment")
    form = RaterChoiceForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a clinician.")
    else:
        try:
            action(assignment=assignment, rater=form.cleaned_data["rater"])
        except ValueError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Assignment given to {form.cleaned_data['rater']}.")
    return redirect(_manage_url(assignment.conversation.study, "progress"))


@require_POST
@role_required(ADMIN)
def reassign(request: HttpRequest, pk: int) -> HttpResponse:
    return _rater_action(request, pk, assignment_reassign)


@require_POST
@role_required(ADMIN)
def reclaim(request: HttpRequest, pk: int) -> HttpResponse:
    return _rater_action(request, pk, assignment_reclaim)


def _password_link(request: AuthenticatedHttpRequest, user: User) -> str:
    # Raises PermissionDenied (403) for an account the signed-in admin may not manage.
    uidb64, token = user_password_token_issue(actor=request.user, user=user)
    path = reverse("annotation:password_set", kwargs={"uidb64": uidb64, "token": token})
    return request.build_absolute_uri(path)


def _show_link_once(
    request: AuthenticatedHttpRequest, user: User, *, emailed_to: str = ""
) -> HttpResponse:
    """Back to the study page the request came from, which shows the link once."""
    request.session[PASSWORD_LINK_SESSION_KEY] = {
        "username": user.get_username(),
        "link": _password_link(request, user),
        "emailed_to": emailed_to,
    }
    return redirect(_manage_url(study_from_request(request), "password-link-card"))


@require_POST
@role_required(ADMIN)
def invite(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = InviteForm(request.POST)
    if form.is_valid():
        try:
            user = clinician_invite(
                username=form.cleaned_data["username"],
                email=form.cleaned_data["email"],
                study=study_from_request(request),
            )
        except ValueError as exc:
            form.add_error("username", str(exc))
        else:
            return _show_link_once(request, user, emailed_to=user.email)
    return _overview(request, invite_form=form, status=422)


@require_POST
@role_required(ADMIN)
def reset_link(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    # Issuing the link changes nothing yet; it works once, until the password is set.
    user = active_user_get(pk=pk)
    if user is None:
        raise Http404("No such account")
    return _show_link_once(request, user)


AUDIT_PAGE_SIZE = 50


@role_required(ADMIN)
def audit(request: HttpRequest) -> HttpResponse:
    """Newest change first, narrowed by the filters; the CSV downloads hold the same changes,
    oldest first (a log read forward)."""
    form = AuditFilterForm(request.GET or None)
    valid = form.is_valid() if form.is_bound else True
    data = form.cleaned_data if form.is_bound and valid else {}
    where = AuditFilter(
        study=data.get("study"),
        clinician=data.get("clinician"),
        conversation=data.get("conversation", ""),
        date_from=data.get("date_from"),
        date_to=data.get("date_to"),
    )
    wanted = request.GET.get("format")
    if wanted in ("csv", "labels-csv"):
        if not valid:
            problems = "; ".join(
                f"{field}: {' '.join(str(e) for e in errors)}"
                for field, errors in form.errors.items()
            )
            return HttpResponse(
                f"Not exported, the filters are wrong: {problems}",
                status=400,
                content_type="text/plain; charset=utf-8",
            )
        if wanted == "labels-csv":
            body = csv_text(
                LABEL_CHANGE_HEADER,
                label_change_rows(changes=audit_label_changes(where=where, newest_first=False)),
            )
            return csv_attachment(body, filename="label-changes.csv")
        body = csv_text(
            RATING_CHANGE_HEADER,
            rating_change_rows(changes=audit_rating_changes(where=where, newest_first=False)),
        )
        return csv_attachment(body, filename="rating-changes.csv")
    changes = audit_rating_changes(where=where, newest_first=True)
    labels = audit_label_changes(where=where, newest_first=True)
    # The filters in the pager's and the downloads' links (without the page numbers).
    kept = {k: v for k, v in request.GET.items() if k in form.fields and v}
    return render(
        request,
        "annotation/admin_audit.html",
        {
            "form": form,
            "valid": valid,
            "filtered": bool(kept),
            "query": urlencode(kept),
            "changes": Paginator(changes, AUDIT_PAGE_SIZE).get_page(request.GET.get("page")),
            "label_changes": Paginator(labels, AUDIT_PAGE_SIZE).get_page(request.GET.get("lpage")),
            "study": where.study,
        },
        status=200 if valid else 400,
    )


class PasswordSetView(auth_views.PasswordResetConfirmView):
    template_name = "registration/password_set.html"
    success_url = reverse_lazy("annotation:password_set_done")
    # Voided by any change of the account's rights, not only by a new password.
    token_generator = password_token_generator


def password_set_done(request: HttpRequest) -> HttpResponse:
    return render(request, "registration/password_set_done.html")
