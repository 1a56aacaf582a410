"""A dashboard filter that fails never leaves the previous subset's numbers on the page."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from accounts.roles import RESEARCHER, role_add

pytestmark = [
    pytest.mark.browser,
    pytest.mark.portable,
    pytest.mark.django_db(transaction=True),
]

FILTERED = re.compile(r"/analysis/studies/\d+/\?")  # the htmx re-render of the report


def _open_dashboard(page, study) -> None:
    user = get_user_model().objects.create_user("res-filters", password="pw-12345678")
    role_add(user=user, role=RESEARCHER)
    page.goto("/accounts/login/")
    page.fill("#id_login", "res-filters")
    page.fill("#id_password", "pw-12345678")
    with page.expect_navigation():
        page.click("button[type=submit]")
    page.goto(f"/analysis/studies/{study.pk}/")
    page.wait_for_selector("#report >> text=Coverage")


def test_a_filter_the_server_fails_on_replaces_the_report_with_an_error(
    django_db_setup, small_study, live_server, page
):
    _open_dashboard(page, small_study.study)
    page.route(FILTERED, lambda route: route.fulfill(status=500, body="Server Error (500)"))
    page.select_option("#id_condition", "depression")
    page.wait_for_selector("#report [role=alert]")
    report = page.inner_text("#report")
    assert "could not be computed for this filter" in report
    assert "Coverage" not in report and "judge-x" not in report


def test_a_refused_filter_value_shows_the_servers_reason_in_place(
    django_db_setup, small_study, live_server, page
):
    _open_dashboard(page, small_study.study)
    # A condition the study does not have (a stale link, an edited query string).
    page.evaluate(
        """() => {
          const select = document.getElementById("id_condition");
          select.add(new Option("no-such-label", "no-such-label"));
          select.value = "no-such-label";
          select.dispatchEvent(new Event("change", {bubbles: true}));
        }"""
    )
    page.wait_for_selector("#filter-error")
    report = page.inner_text("#report")
    assert "No report for this filter" in report and "no-such-label" in report
    assert "Coverage" not in report
