"""Roles: clinician (rates own assignments), researcher (dashboards, exports), admin (staff).

Roles are Django groups so an admin can grant them in the admin; superusers/staff are admins.
"""

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied

CLINICIAN, RESEARCHER, ADMIN = "clinician", "researcher", "admin"
ROLES = (CLINICIAN, RESEARCHER, ADMIN)


def has_role(user, role: str) -> bool:
    if not user.is_authenticated:
        return False
    if role == ADMIN:
        return user.is_staff or user.groups.filter(name=ADMIN).exists()
    return user.groups.filter(name=role).exists()


def is_admin(user) -> bool:
    return has_role(user, ADMIN)


def can_read_analysis(user) -> bool:
    return has_role(user, RESEARCHER) or is_admin(user)


def role_add(*, user, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    group, _ = Group.objects.get_or_create(name=role)
    user.groups.add(group)


def role_required(*allowed: str) -> Callable:
    """View decorator: logged in and holding one of the roles (admins pass every check)."""

    def decorator(view: Callable) -> Callable:
        @login_required
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            # The view's own roles first: one query for the common case (a clinician rating).
            if not (any(has_role(request.user, r) for r in allowed) or is_admin(request.user)):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapped

    return decorator
