"""Every kind of page works under the Content-Security-Policy (scripts from this site only).

The `page` fixture fails a test on any CSP violation the browser reports; this test opens one
page of each kind an admin reaches — our own, Django's admin and DRF's browsable API, which ship
their own templates and scripts — so a refused script anywhere shows up here, not in a study.
"""

import os

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from annotation.models import Study

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAGES = [
    "/manage/",
    "/manage/audit/",
    "/judging/",
    "/judging/runs/new/judge/",
    "/judging/endpoints/",
    "/judging/endpoints/new/",
    "/imports/",
    "/analysis/",
    "/analysis/studies/{study}/",
    "/analysis/studies/{study}/judge-assisted/",
    "/accounts/tokens/",
    "/admin/",
    "/admin/judging/modelendpoint/add/",
    "/admin/annotation/study/",
    "/api/",
    "/api/studies/",
]


def test_every_kind_of_page_runs_under_the_policy(django_db_setup, live_server, page):
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    study = Study.objects.get(name="Demo study")
    client = Client()
    client.force_login(get_user_model().objects.get(username="admin"))  # the demo's staff admin
    page.context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": live_server.url,
            }
        ]
    )
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    for path in PAGES:
        url = path.format(study=study.pk)
        response = page.goto(url)
        assert response is not None and response.status == 200, url
        assert "script-src 'self'" in response.headers["content-security-policy"], url
        page.wait_for_load_state("networkidle")
    assert not errors, errors
