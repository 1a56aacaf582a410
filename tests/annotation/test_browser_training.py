"""A new clinician rates a practice conversation in real chromium and sees the comparison."""

import os
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from accounts.roles import CLINICIAN, role_add
from annotation.models import Rater, Response
from annotation.services import assignments_create
from annotation.training import practice_assign, practice_conversations_mark, reference_scores_set
from tests.factories import RESPONDERS, study_make

from .conftest import wait_saved

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _reference(attribute_position: int) -> int:
    return attribute_position % 5 + 1


def test_clinician_rates_a_practice_conversation_and_sees_the_reference(
    django_db_setup, page, live_server
):
    study = study_make(name="Training in the browser", conversations=2, responders=RESPONDERS[:2])
    practice_conversations_mark(study=study, external_ids=["c0"])
    attributes = list(study.rubric.attributes.order_by("position"))
    rows = [
        (n, "c0", response.responder.key, a.name, str(_reference(a.position)))
        for n, (response, a) in enumerate(
            (r, a)
            for r in Response.objects.filter(conversation__external_id="c0").select_related(
                "responder"
            )
            for a in attributes
        )
    ]
    reference_scores_set(study=study, rows=rows, user=None)
    user = get_user_model().objects.create_user(username="tess", password="tess-password-1")
    role_add(user=user, role=CLINICIAN)
    rater = Rater.objects.create(kind="clinician", name="tess", user=user)
    assignments_create(study=study, clinicians=[rater])
    (practice,) = practice_assign(study=study, clinicians=[rater])

    page.goto("/accounts/login/")
    page.fill("#id_login", "tess")
    page.fill("#id_password", "tess-password-1")
    page.press("#id_password", "Enter")
    page.wait_for_url("**/rate/")
    # The practice comes first; the real conversation is listed beside it, waiting for the
    # practice result (it cannot be opened until then).
    assert page.locator(".card table tbody tr").count() == 2
    assert page.locator(".card table tbody tr", has_text="after your practice").count() == 1
    assert "practice" in page.inner_text(".card table")
    page.click("#continue")
    page.wait_for_url(f"**/rate/{practice.token}/")

    # The reference everywhere, except the first attribute one point higher (or lower at 5).
    for card in range(2):
        for a in attributes:
            score = _reference(a.position)
            if a.position == 0:
                score = score + 1 if score < 5 else score - 1
            page.locator(f"input[name='s{card}-{a.pk}'][value='{score}']").focus()
            page.keyboard.press(str(score))
    wait_saved(page)
    page.click("#submit-conversation")
    page.wait_for_url(f"**/rate/{practice.token}/feedback")

    summary = page.inner_text("#practice-summary")
    assert "0.14" in summary  # 2 of 14 scores one point off: 2/14
    assert "Training passed" in summary
    first = page.locator("table.feedback").first.locator("tbody tr").first
    cells = first.locator("td").all_inner_texts()
    reference_anchor = attributes[0].levels.get(value=_reference(0)).anchor
    assert cells[0].startswith(str(_reference(0) + 1)) and cells[1].startswith(str(_reference(0)))
    assert reference_anchor in cells[1] and cells[2] == "1"
    assert page.locator("table.feedback").count() == 2
    shots = os.environ.get("MENTALBENCH_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(shots) / "practice-feedback.png"), full_page=True)

    # Passed (mean 0.14 ≤ 0.75, no score 2 off): the real conversation opens now.
    page.click("#practice-continue")
    page.wait_for_url("**/rate/")
    assert page.locator(".card table tbody tr").count() == 2
    assert page.locator(".card table tbody tr", has_text="after your practice").count() == 0
