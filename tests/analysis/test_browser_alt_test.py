"""A researcher opens a study that three clinicians rated in full: the dashboard answers first
whether each judge can replace the clinicians (the alt-test) and why, at 1280 and 360 px."""

from __future__ import annotations

import pytest

from accounts.roles import RESEARCHER
from tests.axe import serious_axe_violations
from tests.conftest import SCREENSHOTS
from tests.factories import overlap_study_make, user_make
from tests.second_factor import browser_sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1280, 360])
def test_the_dashboard_answers_whether_each_judge_can_replace_the_clinicians(
    django_db_setup, chromium, live_server, width
):
    study, _, _ = overlap_study_make(name="Three clinicians")
    user_make(username="rhea", password="pw-rhea-long-enough", role=RESEARCHER)
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": width, "height": 900}
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        browser_sign_in(page, "rhea", "pw-rhea-long-enough")
        page.goto(f"/analysis/studies/{study.pk}/")
        answer = page.locator("#answer")
        answer.wait_for()
        # The answer is the first thing the report shows.
        first = page.locator("#report section.card").first
        assert first.get_attribute("id") == "answer"
        rows = answer.locator("tbody tr")
        assert rows.count() == 14  # two judges × seven attributes
        close = answer.locator("tbody tr", has_text="close-judge").first
        far = answer.locator("tbody tr", has_text="far-judge").first
        assert close.locator(".answer-yes").inner_text() == "yes"
        assert far.locator(".answer-no").inner_text() == "no"
        assert "of the 3 clinicians left out in turn" in close.inner_text()
        assert "winning rate 0.00" in far.inner_text()
        # The details: the alt-test's own table, per judge × attribute.
        table = page.locator("#table-alt_test")
        assert table.locator("tbody tr").count() == 14
        # axe is injected as a script, which the page's policy refuses: a second context with
        # the same session checks the same page with the policy lifted.
        checker = chromium.new_context(
            base_url=live_server.url, viewport={"width": width, "height": 900},
            storage_state=context.storage_state(), bypass_csp=True,
        )  # fmt: skip
        try:
            audited = checker.new_page()
            audited.goto(f"/analysis/studies/{study.pk}/")
            audited.locator("#answer").wait_for()
            assert not serious_axe_violations(audited)
        finally:
            checker.close()
        # At 360 px the answer scrolls inside its region, not the page.
        overflow = page.evaluate("document.documentElement.scrollWidth > window.innerWidth")
        assert not overflow
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        answer.screenshot(path=str(SCREENSHOTS / f"dashboard-answer-{width}.png"))
        assert not errors, errors
    finally:
        context.close()
