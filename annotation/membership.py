"""Who sees which study: per-study membership (docs/membership.md).

Platform admins (staff accounts and the *admin* group) see and manage every study. A
platform-wide researcher (the *researcher* group, which only platform admins grant) reads every
study's results: an instance that serves one lab needs nothing more. Everyone else sees exactly
the studies they are members of (annotation.models.StudyMember), in the roles they hold there;
a study they are not a member of is not shown to them at all, not even its name.

Every view, API endpoint, export and download that names a study reads it through study_for
(404 when the person may not see it), and every list of studies through studies_for.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404

from accounts.roles import ADMIN, RESEARCHER, platform_roles_of, roles_forget
from accounts.usernames import username_normalised

from .models import Rater, Study, StudyMember
from .rater_codes import rater_codes_assign

LEAD = StudyMember.Role.LEAD
CLINICIAN = StudyMember.Role.CLINICIAN
MEMBER_RESEARCHER = StudyMember.Role.RESEARCHER
ADJUDICATOR = StudyMember.Role.ADJUDICATOR

#: The roles that read a study's results: dashboards, tables, exports, releases, the API.
READ_RESULTS: tuple[str, ...] = (LEAD, MEMBER_RESEARCHER)


def _platform_wide(user, roles: Iterable[str]) -> bool:
    """Whether the user's platform-wide role reaches every study for these study roles."""
    held = platform_roles_of(user)
    if ADMIN in held:
        return True
    # Reading results only: a platform-wide researcher is nobody's lead or adjudicator.
    return RESEARCHER in held and MEMBER_RESEARCHER in set(roles)


def studies_for(*, user, roles: Iterable[str] = READ_RESULTS) -> QuerySet[Study]:
    """The studies ``user`` may see in one of ``roles`` (every study for platform admins, and
    for platform-wide researchers when reading results)."""
    roles = tuple(roles)
    if not user.is_authenticated:
        return Study.objects.none()
    if _platform_wide(user, roles):
        return Study.objects.all()
    return Study.objects.filter(
        pk__in=StudyMember.objects.filter(user=user, role__in=roles).values("study_id")
    )


def study_for(
    *,
    user,
    study_id: int,
    roles: Iterable[str] = READ_RESULTS,
    queryset: QuerySet[Study] | None = None,
) -> Study:
    """The study ``study_id`` names if ``user`` may see it in one of ``roles``; Http404
    otherwise, the same answer as for a study that does not exist, so that an id tells a
    non-member nothing."""
    study = (
        (queryset if queryset is not None else Study.objects.all())
        .filter(pk=study_id, pk__in=studies_for(user=user, roles=roles).values("pk"))
        .first()
    )
    if study is None:
        raise Http404("No such study.")
    return study


def studies_led_by(*, user) -> QuerySet[Study]:
    """The studies whose team ``user`` may manage: every study for platform admins, the
    studies they lead for everyone else.

    Not studies_for(roles=(LEAD,)): there a platform-wide researcher passes too (a lead reads
    results), and reading every study's results must not mean managing every study's team.
    """
    if not user.is_authenticated:
        return Study.objects.none()
    if ADMIN in platform_roles_of(user):
        return Study.objects.all()
    return Study.objects.filter(
        pk__in=StudyMember.objects.filter(user=user, role=LEAD).values("study_id")
    )


def led_study_ids(*, user) -> set[int]:
    """The ids of studies_led_by(user): which rows of a list of studies get a team link."""
    return set(studies_led_by(user=user).values_list("pk", flat=True))


def study_led_for(*, user, study_id: int) -> Study:
    """The study ``study_id`` names if ``user`` may manage its team; Http404 otherwise (as
    study_for: an id tells a non-member nothing)."""
    study = studies_led_by(user=user).filter(pk=study_id).first()
    if study is None:
        raise Http404("No such study.")
    return study


def member_get(*, study: Study, member_id: int) -> StudyMember:
    """One membership of ``study``; Http404 for an id that is not one (or is another study's)."""
    member = StudyMember.objects.select_related("user").filter(study=study, pk=member_id).first()
    if member is None:
        raise Http404("No such member.")
    return member


def member_add(*, study: Study, user, role: str, site: str = "") -> StudyMember:
    """Make ``user`` a member of ``study`` in ``role`` (again: the site is updated)."""
    if role not in StudyMember.Role.values:
        raise ValueError(
            f"unknown study role {role!r}; choose one of {', '.join(StudyMember.Role.values)}"
        )
    member, created = StudyMember.objects.get_or_create(
        study=study, user=user, role=role, defaults={"site": site.strip()}
    )
    if not created and site.strip() and member.site != site.strip():
        member.site = site.strip()
        member.save(update_fields=["site"])
    if role == CLINICIAN:
        _clinicians_coded(study_id=study.pk, user_ids=[user.pk])
    roles_forget(user)
    return member


def members_ensure(*, study_id: int, user_ids: Iterable[int], role: str) -> None:
    """Make each of ``user_ids`` a member of study ``study_id`` in ``role`` unless they are already
    (their sites unchanged): one query whatever their number."""
    user_ids = set(user_ids)
    StudyMember.objects.bulk_create(
        [StudyMember(study_id=study_id, user_id=pk, role=role) for pk in user_ids],
        ignore_conflicts=True,
    )
    if role == CLINICIAN:
        _clinicians_coded(study_id=study_id, user_ids=user_ids)


def _clinicians_coded(*, study_id: int, user_ids: Iterable[int]) -> None:
    # A clinician on a study's team has joined it: their rater's study code now, so that no
    # page that shows the study's data has to hand one out (a reader never writes).
    raters = Rater.objects.filter(user_id__in=list(user_ids), kind=Rater.Kind.CLINICIAN)
    rater_codes_assign(study_id=study_id, rater_ids=raters.values_list("pk", flat=True))


def member_remove(*, study: Study, user, role: str) -> bool:
    """End ``user``'s ``role`` in ``study``; True when there was one."""
    deleted, _ = StudyMember.objects.filter(study=study, user=user, role=role).delete()
    roles_forget(user)
    return bool(deleted)


def member_add_by_username(
    *, study: Study, username: str, role: str, site: str = ""
) -> tuple[StudyMember, bool]:
    """Make the active account named ``username`` a member of ``study`` in ``role``: the team
    page's form. Returns the membership and whether it is new (an existing one gets the new
    site). ValueError, in words for the person who typed the name, for an unknown or
    deactivated account: accounts are created by platform admins (the invitation), never here.
    """
    name = username_normalised(username)
    if not name:
        raise ValueError("Enter the username of an existing account.")
    users = get_user_model().objects
    # Exact first; a difference in capitals alone still finds the one account it can mean.
    user = users.filter(username=name).first()
    if user is None:
        matches = list(users.filter(username__iexact=name)[:2])
        user = matches[0] if len(matches) == 1 else None
    if user is None:
        raise ValueError(
            f"No account is named {name!r}. A platform admin creates accounts (an invitation "
            "from the Manage page); then add the person here."
        )
    if not user.is_active:
        raise ValueError(f"The account {user.get_username()!r} is deactivated.")
    existed = StudyMember.objects.filter(study=study, user=user, role=role).exists()
    return member_add(study=study, user=user, role=role, site=site), not existed


@transaction.atomic
def member_remove_checked(*, member: StudyMember, actor) -> None:
    """End ``member``'s role, as ``actor`` asked on the team page; ValueError when it is the
    actor's own last-lead role: the study would be left with nobody on it to manage its team,
    and the actor could not come back to undo it."""
    if member.role == LEAD and member.user_id == actor.pk:
        # Every lead row locked, in one order: two leads leaving at once are answered one after
        # the other, and the second sees the first gone.
        leads = list(
            StudyMember.objects.select_for_update()
            .filter(study_id=member.study_id, role=LEAD)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        if leads == [member.pk]:
            raise ValueError(
                "You are this study's only lead: add another lead first, so that someone can "
                "still manage its team."
            )
    member_remove(study=member.study, user=member.user, role=member.role)
