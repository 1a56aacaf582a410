"""A study's life in real chromium: a clinician submits, an admin imports one more responder and
tops up; the submitted conversation stays submitted and locked, the new work is its own task."""

import csv

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from accounts.roles import ADMIN, role_add
from annotation.models import Assignment, Rating, Responder, Score
from annotation.services import assignments_create
from tests.factories import RESPONDERS, clinician_make, study_make
from tests.second_factor import browser_sign_in, totp_enrol

from .conftest import wait_saved

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ATTRIBUTES = 7


def _rate_editable_cards(page, score: str) -> None:
    """Focus the first editable score and press the digit once per score: each press moves on
    to the next attribute, over the read-only responses."""
    cards = page.locator(".response:not(.earlier)")
    page.locator(".response:not(.earlier) input[type=radio]").first.focus()
    for _ in range(cards.count() * ATTRIBUTES):
        page.keyboard.press(score)
    wait_saved(page)


def test_top_up_leaves_submitted_work_locked_and_adds_its_own_task(
    django_db_setup, chromium, live_server, tmp_path
):
    study = study_make(name="Life study", conversations=2, responders=RESPONDERS[:3])
    rater = clinician_make(username="cleo")
    first, second = assignments_create(study=study, clinicians=[rater])
    admin = get_user_model().objects.create_user(username="ada", password="ada-pw-long-1")
    role_add(user=admin, role=ADMIN)
    totp_enrol(admin)

    clinician = chromium.new_context(base_url=live_server.url).new_page()
    browser_sign_in(clinician, "cleo", "pw-cleo")
    clinician.goto(f"/rate/{first.token}/")
    _rate_editable_cards(clinician, "4")
    clinician.click("#submit-conversation")
    clinician.wait_for_url(f"**/rate/{second.token}/")
    assert "1 / 2 conversations done" in clinician.inner_text("#progress-text")

    # The admin imports a fourth responder's replies to both conversations, then tops up.
    upload = tmp_path / "added.csv"
    with upload.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "context", "zz-added"])
        for conversation in study.conversations.order_by("external_id"):
            writer.writerow(
                [conversation.external_id, conversation.context, "An added reply, " * 3]
            )
    admin_page = chromium.new_context(base_url=live_server.url).new_page()
    browser_sign_in(admin_page, "ada", "ada-pw-long-1", second_factor=True)
    admin_page.goto(f"/imports/?study={study.pk}")
    admin_page.select_option("#id_kind", "conversations")
    admin_page.select_option("#id_study", str(study.pk))
    admin_page.set_input_files("#id_file", str(upload))
    with admin_page.expect_navigation():
        admin_page.click("form[enctype] button[type=submit]")
    assert "2 responses created" in admin_page.content()
    assert Responder.objects.filter(key="zz-added").exists()
    admin_page.goto(f"/manage/?study={study.pk}")
    expect(admin_page.locator("#topup-notice")).to_contain_text("have not seen 2 responses")
    with admin_page.expect_navigation():
        admin_page.click("#topup-notice button[type=submit]")
    expect(admin_page.locator("body")).to_contain_text("submitted work stays submitted")

    # The submitted conversation is still submitted, read-only, with its 21 scores.
    clinician.goto("/rate/")
    assert (
        "1 / 2 conversations · 0 / 1 conversation with added responses done"
        in clinician.inner_text("#progress-text")
    )
    rows = clinician.locator("table tbody tr")
    assert rows.count() == 3
    assert sorted(rows.locator("td:nth-child(4)").all_inner_texts()) == [
        "Not started",
        "Not started",
        "Submitted",
    ]
    clinician.goto(f"/rate/{first.token}/")
    expect(clinician.locator("#save-state")).to_contain_text("submitted")
    radios = clinician.locator("#rating input[type=radio]")
    assert radios.count() == 3 * ATTRIBUTES * 5
    assert clinician.locator("#rating input[type=radio]:disabled").count() == radios.count()
    assert clinician.locator("#rating input:checked").count() == 3 * ATTRIBUTES
    assert clinician.locator(".response").count() == 3
    first.refresh_from_db()
    assert first.status == Assignment.Status.SUBMITTED
    assert Score.objects.filter(rating__assignment=first).count() == 3 * ATTRIBUTES

    # The unstarted conversation got the reply in place; the submitted one a task of its own:
    # all four responses, the three rated before read-only with their scores.
    part = Assignment.objects.get(rater=rater, conversation=first.conversation, part=1)
    assert second.items.count() == 4
    clinician.goto(f"/rate/{part.token}/")
    expect(clinician.locator("#added-responses")).to_be_visible()
    assert clinician.locator(".response").count() == 4
    assert clinician.locator(".response.earlier").count() == 3
    assert clinician.locator(".response.earlier input:checked").count() == 3 * ATTRIBUTES
    assert clinician.locator(".response.earlier input:disabled").count() == 3 * ATTRIBUTES * 5
    assert clinician.inner_text("#score-count") == f"0/{ATTRIBUTES} scores"
    # Nothing on the page names the added responder.
    assert "zz-added" not in clinician.content()
    _rate_editable_cards(clinician, "2")
    clinician.click("#submit-conversation")
    clinician.wait_for_url("**/rate/**")
    part.refresh_from_db()
    assert part.status == Assignment.Status.SUBMITTED
    added = Rating.objects.get(assignment=part)
    assert added.response.responder.key == "zz-added" and added.status == "complete"
    assert set(Score.objects.filter(rating=added).values_list("value", flat=True)) == {2}
    # The first scores were never touched.
    assert set(Score.objects.filter(rating__assignment=first).values_list("value", flat=True)) == {
        4
    }
