"""A computation that takes a while says so: the report being recomputed is aria-busy and a
"Computing…" status with a spinner shows until the new numbers arrive (static/js/busy.js)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from accounts.roles import RESEARCHER, role_add
from tests.second_factor import browser_sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FILTERED = re.compile(r"/analysis/studies/\d+/(judge-assisted/)?\?")  # the htmx re-render


class _Held:
    """Holds the re-render's request in the browser until the test lets it go. Sleeping in the
    route handler instead blocks the test's own thread, not the browser: the request could be
    answered before the test got to read the busy state, and the test failed now and then."""

    def __init__(self, page) -> None:
        self.page = page
        self.routes: list = []
        page.route(FILTERED, self._hold)

    def _hold(self, route) -> None:
        self.routes.append(route)

    def release(self) -> None:
        while not self.routes:
            self.page.wait_for_timeout(20)
        for route in self.routes:
            route.continue_()


def _sign_in(page) -> None:
    user = get_user_model().objects.create_user("res-busy", password="pw-12345678")
    role_add(user=user, role=RESEARCHER)
    browser_sign_in(page, "res-busy", "pw-12345678")


def test_the_dashboard_shows_a_busy_sign_while_the_report_is_recomputed(
    django_db_setup, small_study, live_server, page
):
    _sign_in(page)
    page.goto(f"/analysis/studies/{small_study.study.pk}/")
    sign = page.locator('.busy-sign[data-busy-sign="report"]')
    assert sign.is_hidden() and sign.get_attribute("role") == "status"
    held = _Held(page)
    page.select_option("#id_bootstrap", "200")
    sign.wait_for(state="visible")
    assert "Computing" in sign.inner_text()
    assert page.get_attribute("#report", "aria-busy") == "true"
    held.release()
    sign.wait_for(state="hidden", timeout=120_000)
    assert page.get_attribute("#report", "aria-busy") is None
    assert "Coverage" in page.inner_text("#report")


def test_the_judge_assisted_page_shows_a_busy_sign_while_it_computes(
    django_db_setup, small_study, live_server, page
):
    _sign_in(page)
    page.goto(f"/analysis/studies/{small_study.study.pk}/judge-assisted/")
    sign = page.locator('.busy-sign[data-busy-sign="report"]')
    assert sign.is_hidden()
    held = _Held(page)
    page.select_option("#id_share", "50")
    page.click("#ja-apply")
    sign.wait_for(state="visible")
    assert page.get_attribute("#report", "aria-busy") == "true"
    held.release()
    sign.wait_for(state="hidden", timeout=120_000)
    assert page.get_attribute("#report", "aria-busy") is None
