"""Marking a response unsafe in the browser, by keyboard, at phone and laptop widths: the mark is
sent in the background (the scores typed stay), withdrawn the same way; the adjudicator decides it
by keyboard; axe finds nothing serious on the rating page and the adjudicator's pages."""

from __future__ import annotations

import random

import pytest

from annotation.membership import ADJUDICATOR, member_add
from annotation.models import Escalation, Score
from annotation.services import assignments_create
from tests.axe import serious_axe_violations
from tests.factories import clinician_make, study_make, user_make
from tests.second_factor import browser_sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [360, 1280])
def test_a_clinician_marks_and_withdraws_by_keyboard_and_an_adjudicator_decides(
    django_db_setup, chromium, live_server, width
):
    study = study_make(name=f"Unsafe {width}", conversations=1)
    rater = clinician_make(username="kim", password="kim-pw-1")
    (task,) = assignments_create(study=study, clinicians=[rater], seed_rng=random.Random(3))
    adjudicator = user_make(username="ada_adj", password="ada-pw-1")
    member_add(study=study, user=adjudicator, role=ADJUDICATOR)
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": width, "height": 800}, bypass_csp=True
    )
    try:
        page = context.new_page()
        browser_sign_in(page, "kim", "kim-pw-1")
        page.goto(f"/rate/{task.token}/")
        page.keyboard.press("3")  # the page opens on the first attribute: a score, typed
        page.wait_for_function("document.querySelector('#save-state .saved') !== null")
        page.focus("#unsafe-0 summary")
        page.keyboard.press("Enter")  # opens the form
        page.keyboard.press("Tab")
        page.keyboard.type("Advises stopping medication at once.")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent").startswith("Mark Response A")
        page.keyboard.press("Enter")
        page.wait_for_selector("#unsafe-0.marked")
        assert "Advises stopping medication at once." in page.inner_text("#unsafe-0")
        # Sent in the background: the page stayed, the score typed before is still checked.
        assert page.evaluate("document.querySelectorAll('#response-0 input:checked').length") == 1
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        escalation = Escalation.objects.get()
        assert escalation.is_open and escalation.rater_id == rater.pk
        assert Score.objects.filter(rating__rater=rater).count() == 1
        assert not serious_axe_violations(page), width

        # The focus is on "Withdraw": Enter takes the mark back.
        assert page.evaluate("document.activeElement.textContent").startswith("Withdraw")
        page.keyboard.press("Enter")
        page.wait_for_selector("#unsafe-0:not(.marked)")
        escalation.refresh_from_db()
        assert escalation.status == Escalation.Status.WITHDRAWN

        # Marked again, for the adjudicator.
        page.focus("#unsafe-0 summary")
        page.keyboard.press("Enter")
        page.keyboard.press("Tab")
        page.keyboard.type("Unsafe after all.")
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        page.wait_for_selector("#unsafe-0.marked")
        page.context.clear_cookies()

        browser_sign_in(page, "ada_adj", "ada-pw-1")
        page.goto(f"/adjudicate/{study.pk}/")
        assert "Escalated: unsafe" in page.inner_text("#escalations")
        assert "Unsafe after all." in page.inner_text("#escalations")
        assert "kim" not in page.inner_text("main")
        assert not serious_axe_violations(page), width
        page.focus("#escalations a")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert not serious_axe_violations(page), width
        form = page.locator("form.escalation")
        form.locator("input[value=confirmed_unsafe]").focus()
        page.keyboard.press("Space")
        page.keyboard.press("Tab")
        page.keyboard.type("Agreed: dangerous.")
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        page.wait_for_selector("form.escalation .save-state .saved")
        opened = Escalation.objects.get(status__in=["open", "resolved"])
        assert (opened.status, opened.decision) == ("resolved", "confirmed_unsafe")
    finally:
        context.close()
