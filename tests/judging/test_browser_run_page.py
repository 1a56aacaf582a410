"""A finished run's page in Chromium at 360 and 1280 px: a progress bar across the card (it was
200 px wide at 1280 and 5rem on a phone), how long the run took, and links on to its results
that open them; nothing wider than the screen."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from judging import services
from judging.models import Run
from tests.factories import case_context, case_reply, endpoint_make, study_make
from tests.second_factor import browser_sign_in, totp_enrol

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "run-page-password-1"


def test_a_finished_run_fills_its_card_and_leads_to_its_results(
    django_db_setup, live_server, fake_llm, eager_celery, request
):
    study = study_make(
        name="Run page study", conversations=2, responders=("gpt4o",), context=case_context,
        text=case_reply,
    )  # fmt: skip
    # The run works eagerly, in this thread, before the browser parks its event loop here.
    run = services.judge_run_create(
        study_id=study.id, endpoint=endpoint_make(base_url=fake_llm.openai_base_url)
    )
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    user = get_user_model().objects.create_superuser("root", "root@example.org", PASSWORD)
    totp_enrol(user)
    chromium = request.getfixturevalue("chromium")
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 800}
    )
    page = context.new_page()
    try:
        # Signed in once: a TOTP code is accepted once, and both widths are one person's.
        browser_sign_in(page, "root", PASSWORD, second_factor=True)
        for width in (1280, 360):
            page.set_viewport_size({"width": width, "height": 800})
            page.goto(f"/judging/runs/{run.pk}/")
            bar = page.locator("#run-progress progress").bounding_box()
            card = page.locator("#run-progress").evaluate(
                "el => { const s = getComputedStyle(el); return el.clientWidth"
                " - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight); }"
            )
            assert bar["width"] >= 0.95 * card, (width, bar["width"], card)
            text = page.inner_text("#run-progress")
            assert re.search(r"Took \d+ s \([\d.]+ items/s\)", text) and "ETA" not in text
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, (width, overflow)
            with page.expect_navigation():
                page.get_by_role("link", name="The study's dashboard with this judge").click()
            page.wait_for_selector("#coverage")
            assert run.rater.name in page.inner_text("main")
    finally:
        context.close()
