"""A study's team page (/manage/studies/<id>/team/): its members, their progress per site and
per clinician, adding and removing members.

For platform admins and the study's leads (annotation.membership.study_led_for: 404 for anyone
else, as for a study that does not exist). The writes are membership's services; the reads
team_selectors'.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from accounts.roles import AuthenticatedHttpRequest, is_admin

from .escalation_selectors import escalations_open_count
from .forms import MemberAddForm, MemberInviteForm, ThresholdsForm
from .membership import (
    led_study_ids,
    member_add_by_username,
    member_get,
    member_remove_checked,
    study_led_for,
)
from .models import Study, StudyMember
from .services import clinician_invite
from .services.adjudication import AdjudicationRefused, adjudication_thresholds_set
from .team_selectors import team_members, team_progress


def _team_url(study: Study, anchor: str = "members") -> str:
    return f"{reverse('annotation:manage_team', args=[study.pk])}#{anchor}"


def _page(
    request: AuthenticatedHttpRequest,
    study: Study,
    form: MemberAddForm,
    *,
    invite_form: MemberInviteForm | None = None,
    thresholds_form: ThresholdsForm | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "invite_form": invite_form or MemberInviteForm(),
        "thresholds_form": thresholds_form or ThresholdsForm(study=study),
        "study": study,
        "is_admin": is_admin(request.user),
        "members": team_members(study=study, viewer=request.user),
        "team": team_progress(study=study),
        "form": form,
        "escalations_open": escalations_open_count(study=study),
    }
    return render(request, "annotation/team.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def team(request: AuthenticatedHttpRequest, study_id: int) -> HttpResponse:
    study = study_led_for(user=request.user, study_id=study_id)
    if request.method != "POST":
        return _page(request, study, MemberAddForm())
    form = MemberAddForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            member, created = member_add_by_username(
                study=study, username=data["username"], role=data["role"], site=data["site"]
            )
        except ValueError as exc:
            form.add_error("username", str(exc))
        else:
            who, role = member.user.get_username(), member.role
            site = f" (site: {member.site})" if member.site else ""
            messages.success(
                request,
                f"{who} added as {role}{site}."
                if created
                else f"{who} was already {role} in this study{site}.",
            )
            return redirect(_team_url(study))
    return _page(request, study, form, status=422)


@require_POST
@login_required
def invite(request: AuthenticatedHttpRequest, study_id: int) -> HttpResponse:
    """A new clinician on the team: the account, its membership at its site, and the e-mailed
    invitation (its set-password link goes to the address only, never to the page)."""
    study = study_led_for(user=request.user, study_id=study_id)
    form = MemberInviteForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            user = clinician_invite(
                username=data["username"], email=data["email"], study=study, site=data["site"]
            )
        except ValueError as exc:
            form.add_error("username", str(exc))
        else:
            messages.success(
                request,
                f"{user.get_username()} is invited: the set-password link is on its way to "
                f"{user.email}.",
            )
            return redirect(_team_url(study))
    return _page(request, study, MemberAddForm(), invite_form=form, status=422)


@require_POST
@login_required
def member_remove(request: AuthenticatedHttpRequest, study_id: int, member_id: int) -> HttpResponse:
    study = study_led_for(user=request.user, study_id=study_id)
    member: StudyMember = member_get(study=study, member_id=member_id)
    try:
        member_remove_checked(member=member, actor=request.user)
    except ValueError as exc:
        messages.error(request, str(exc))
        return redirect(_team_url(study))
    messages.success(request, f"{member.user.get_username()} is no longer {member.role} here.")
    # A lead who left (another lead remains) may no longer open this page.
    if study.pk not in led_study_ids(user=request.user):
        return redirect("home")
    return redirect(_team_url(study))


@require_POST
@login_required
def thresholds(request: AuthenticatedHttpRequest, study_id: int) -> HttpResponse:
    """The study's adjudication thresholds, set by its lead (or a platform admin)."""
    study = study_led_for(user=request.user, study_id=study_id)
    form = ThresholdsForm(request.POST, study=study)
    if form.is_valid():
        try:
            adjudication_thresholds_set(
                study=study,
                study_threshold=form.cleaned_data["study_threshold"],
                per_attribute=form.per_attribute(),
            )
        except AdjudicationRefused as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, "Adjudication thresholds saved.")
            return redirect(_team_url(study, "thresholds"))
    return _page(request, study, MemberAddForm(), thresholds_form=form, status=422)
