"""Template context shared by every page."""

from django.http import HttpRequest

from accounts.roles import ADJUDICATOR, ADMIN, CLINICIAN, RESEARCHER, roles_of

# (label, path, roles that see it); admins see every link, Django's admin only for staff (it
# admits no one else).
SECTIONS = [
    ("My queue", "/rate/", {CLINICIAN}),
    ("Adjudicate", "/adjudicate/", {ADJUDICATOR}),
    ("Manage", "/manage/", set()),
    ("Runs", "/judging/", set()),
    ("Imports", "/imports/", set()),
    ("Analysis", "/analysis/", {RESEARCHER}),
    ("API tokens", "/accounts/tokens/", {RESEARCHER}),
    ("Django admin", "/admin/", set()),
]


def nav(request: HttpRequest) -> dict:
    """The sections the signed-in user may open, as (label, path, current) rows.

    A callable, so the one query it needs runs only when a template shows the navigation (not
    for the autosave fragments, which render on every keystroke)."""

    def links() -> list[tuple[str, str, bool]]:
        user = getattr(request, "user", None)
        if user is None:
            return []
        roles = roles_of(user)
        admin = ADMIN in roles
        return [
            (label, path, request.path.startswith(path))
            for label, path, allowed in SECTIONS
            if (admin or roles & allowed) and (path != "/admin/" or user.is_staff)
        ]

    return {"nav_links": links}
