"""Roles: clinician (rates own assignments), researcher (dashboards, exports), admin (staff).

Roles are Django groups so an admin can grant them in the admin; superusers/staff are admins.
A role held in one study (annotation's StudyMember) opens that study's pages too. This module
imports no app (every app asks it, annotation included): it reads the memberships through the
user's reverse relation, `study_memberships`.
"""

from collections.abc import Callable
from functools import wraps

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.db.models import Value
from django.http import HttpRequest

CLINICIAN, RESEARCHER, ADMIN = "clinician", "researcher", "admin"
ROLES = (CLINICIAN, RESEARCHER, ADMIN)


#: The user's role groups and study roles, kept on the user object: a request asks several times
#: (the sign-in rules, the view's role check, the navigation bar) and the answer is one query.
_GROUPS_CACHE = "_mentalbench_role_groups"

#: Not a group anyone is put in: what an adjudicator of some study may open at all (the
#: adjudication pages; annotation.membership then decides which studies).
ADJUDICATOR = "adjudicator"

#: What a role held in some study lets its holder open at all (annotation.membership then
#: decides which studies): a lead and a study's researcher read results, a study's clinician
#: rates, a study's adjudicator adjudicates.
_STUDY_ROLE_GATES = {
    "lead": RESEARCHER,
    "researcher": RESEARCHER,
    "clinician": CLINICIAN,
    "adjudicator": ADJUDICATOR,
}


def _held(user) -> tuple[frozenset[str], frozenset[str]]:
    """The user's platform-wide role groups and the roles they hold in any study."""
    held = getattr(user, _GROUPS_CACHE, None)
    if held is None:
        # No ORDER BY inside the UNION: SQLite (the embedded default) refuses one, and
        # StudyMember's default ordering would put one there.
        groups = user.groups.filter(name__in=ROLES).annotate(k=Value("g")).order_by()
        studies = user.study_memberships.annotate(k=Value("s")).order_by()
        rows = set(groups.values_list("name", "k").union(studies.values_list("role", "k")))
        held = (
            frozenset(name for name, k in rows if k == "g"),
            frozenset(name for name, k in rows if k == "s"),
        )
        setattr(user, _GROUPS_CACHE, held)
    return held


def holds_study_role(user, role: str) -> bool:
    """Whether the user holds `role` ("lead", …) in some study: from the kept answer, so a page
    asks which study only of those who hold it anywhere."""
    return user.is_authenticated and role in _held(user)[1]


def platform_roles_of(user) -> set[str]:
    """The user's platform-wide roles: their role groups, and admin for staff accounts."""
    if not user.is_authenticated:
        return set()
    roles = set(_held(user)[0])
    if user.is_staff:
        roles.add(ADMIN)
    return roles


def roles_of(user) -> set[str]:
    """What the user may open at all: their platform-wide roles, and the role a study role
    implies (a lead or a study's researcher reads results, a study's clinician rates). Which
    studies is annotation.membership's question. role_add and member_add forget the kept
    answer."""
    if not user.is_authenticated:
        return set()
    roles = platform_roles_of(user)
    roles.update(_STUDY_ROLE_GATES[role] for role in _held(user)[1] if role in _STUDY_ROLE_GATES)
    return roles


def roles_forget(user) -> None:
    """Forget the user's kept roles (after a role or a membership changed)."""
    if hasattr(user, _GROUPS_CACHE):
        delattr(user, _GROUPS_CACHE)


def has_role(user, role: str) -> bool:
    return role in roles_of(user)


def is_admin(user) -> bool:
    return has_role(user, ADMIN)


def can_read_analysis(user) -> bool:
    return bool(roles_of(user) & {RESEARCHER, ADMIN})


def manageable_users(*, actor):
    """The accounts `actor` may act on from the admin pages (issue set-password links, …).

    The one rule for every admin action on another account, so that no admin page can be used to
    take over an account with more power than the actor's own:
    - a superuser may act on every other active account;
    - staff may act on accounts that are neither staff nor superusers (admin-group members,
      researchers, clinicians);
    - a member of the *admin* group who is not staff may act only on clinicians and researchers:
      never on staff, superusers or other admins.
    Nobody acts on their own account here (they change their password themselves), and inactive
    accounts are left alone.
    """
    User = get_user_model()
    if not is_admin(actor):
        return User.objects.none()
    users = User.objects.filter(is_active=True).exclude(pk=actor.pk)
    if actor.is_superuser:
        return users
    users = users.exclude(is_superuser=True).exclude(is_staff=True)
    if not actor.is_staff:
        users = users.exclude(groups__name=ADMIN)
    return users


def user_can_manage(*, actor, target) -> bool:
    return manageable_users(actor=actor).filter(pk=target.pk).exists()


def role_add(*, user, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    group, _ = Group.objects.get_or_create(name=role)
    user.groups.add(group)
    roles_forget(user)


def role_remove(*, user, role: str) -> None:
    """Take a platform-wide role away (nothing happens when the user does not hold it)."""
    group = Group.objects.filter(name=role).first()
    if group is not None:
        user.groups.remove(group)
    roles_forget(user)


class AuthenticatedHttpRequest(HttpRequest):
    """What a role_required view is given (for the type checker): a signed-in user's request."""

    user: User


def role_required(*allowed: str) -> Callable:
    """View decorator: logged in and holding one of the roles (admins pass every check)."""

    def decorator(view: Callable) -> Callable:
        @login_required
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            # One query for every role at once: this runs on each autosave.
            if not roles_of(request.user) & {*allowed, ADMIN}:
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapped

    return decorator
