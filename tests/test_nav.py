"""The top bar shows each role the sections it may open, and nothing more."""

import pytest

from accounts.roles import ADMIN, CLINICIAN, RESEARCHER, role_add


def _nav(client, user, path):
    client.force_login(user)
    html = client.get(path).content.decode()
    return html[html.index("<nav>") : html.index("</nav>")]


@pytest.mark.parametrize(
    ("role", "staff", "path", "shown", "hidden"),
    [
        (
            CLINICIAN,
            False,
            "/rate/",
            ["/rate/"],
            ["/manage/", "/judging/", "/analysis/", "/admin/", "/accounts/tokens/"],
        ),
        (
            RESEARCHER,
            False,
            "/analysis/",
            ["/analysis/", "/accounts/tokens/"],
            ["/rate/", "/manage/", "/judging/"],
        ),
        (
            ADMIN,
            False,
            "/manage/",
            ["/manage/", "/judging/", "/imports/", "/analysis/"],
            ["/admin/"],
        ),
        (None, True, "/judging/", ["/manage/", "/judging/", "/imports/", "/admin/"], []),
    ],
)
def test_navigation_follows_the_role(client, django_user_model, role, staff, path, shown, hidden):
    user = django_user_model.objects.create_user("u", password="pw", is_staff=staff)
    if role:
        role_add(user=user, role=role)
    nav = _nav(client, user, path)
    for link in shown:
        assert f'href="{link}"' in nav
    for link in hidden:
        assert f'href="{link}"' not in nav
    assert f'href="{path}" aria-current="page"' in nav


def test_autosave_fragment_does_not_query_for_navigation(db, django_user_model, client):
    from django.db import connection
    from django.template.loader import render_to_string
    from django.test import RequestFactory
    from django.test.utils import CaptureQueriesContext

    request = RequestFactory().get("/rate/x/save")
    request.user = django_user_model.objects.create_user("v", password="pw")
    with CaptureQueriesContext(connection) as queries:
        render_to_string("annotation/_save_state.html", {"result": None}, request=request)
    assert len(queries) == 0
