"""An adjudicator settles a distortion-label disagreement with the keyboard alone in real
chromium (htmx autosave), and the page fits a phone and passes axe-core."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from annotation.membership import ADJUDICATOR, member_add
from annotation.models import Conversation, LabelAdjudication, LabelAnnotation
from annotation.rater_codes import rater_codes_assign
from tests.axe import serious_axe_violations
from tests.factories import clinician_make, distortion_study_make, user_make
from tests.second_factor import browser_sign_in

from .conftest import tab_to

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _disputed_study():
    study = distortion_study_make(messages=["Nobody will ever love me."], name="Browser adj")
    message = Conversation.objects.get(study=study)
    for name, labels in (("dr_one", ["Labeling"]), ("dr_two", ["Mind Reading"])):
        clinician = clinician_make(username=name)
        LabelAnnotation.objects.create(
            rater=clinician,
            conversation=message,
            status="complete",
            source="form",
            labels=labels,
        )
        rater_codes_assign(study_id=study.pk, rater_ids=[clinician.pk])  # as joining does
    adjudicator = user_make(username="ada_adj", password="ada-adj-pw-1")
    member_add(study=study, user=adjudicator, role=ADJUDICATOR)
    return study, message


def test_adjudicator_settles_labels_with_the_keyboard(django_db_setup, page, live_server):
    study, message = _disputed_study()
    browser_sign_in(page, "ada_adj", "ada-adj-pw-1")
    page.goto(f"/adjudicate/{study.pk}/labels/")
    assert "m0" in page.inner_text("#label-adjudication-queue")
    page.goto(f"/adjudicate/{study.pk}/labels/{message.pk}/")
    text = page.inner_text("main") if page.locator("main").count() else page.inner_text("body")
    assert "Clinician A" in text and "Clinician B" in text and "dr_one" not in text

    tab_to(page, "#dominant-group input[type=radio]")
    page.keyboard.press("Space")
    page.keyboard.press("ArrowDown")
    expect(page.locator("#label-adjudication .save-state")).to_contain_text("Saved")
    options = page.locator("#dominant-group input[type=radio]")
    second = options.nth(1).get_attribute("value")
    expect(page.locator(f'#dominant-group input[value="{second}"]')).to_be_checked()
    for _ in range(50):  # the save lands after the swap's request
        if LabelAdjudication.objects.filter(labels=[second]).exists():
            break
        page.wait_for_timeout(100)
    assert LabelAdjudication.objects.get().labels == [second]

    tab_to(page, "#reason")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Tab")  # leaving the select is a change
    for _ in range(50):
        if LabelAdjudication.objects.get().reason:
            break
        page.wait_for_timeout(100)
    saved = LabelAdjudication.objects.get()
    assert saved.reason == "ambiguous_response" and saved.labels == [second]


def test_the_page_fits_a_phone_and_passes_axe(django_db_setup, chromium, live_server):
    study, message = _disputed_study()
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 360, "height": 800}, bypass_csp=True
    )
    try:
        page = context.new_page()
        browser_sign_in(page, "ada_adj", "ada-adj-pw-1")
        for url in (
            f"/adjudicate/{study.pk}/labels/",
            f"/adjudicate/{study.pk}/labels/{message.pk}/",
        ):
            page.goto(url)
            assert page.url.endswith(url)
            width = page.evaluate("() => document.documentElement.scrollWidth")
            assert width <= 360, f"{url} is {width} px wide"
            serious = serious_axe_violations(page)
            assert not serious, f"{url}: {serious}"
    finally:
        context.close()
