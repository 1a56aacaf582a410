"""A clinician rates a whole conversation with the keyboard alone in real chromium."""

import pytest
from django.contrib.auth import get_user_model

from accounts.roles import CLINICIAN, role_add
from annotation.models import Assignment, Rater, Rating, Score
from annotation.services import assignments_create
from tests.factories import RESPONDERS, study_make

from ..conftest import SCREENSHOTS
from .conftest import tab_to, wait_saved

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ATTRIBUTES = 7


def _score(card: int, attribute: int) -> int:
    return (card + attribute) % 5 + 1


def _rate_card(page, card: int) -> None:
    tab_to(page, f"#response-{card} input[type=radio]")
    # A digit picks the score and moves on; after the seventh, focus is on the next response
    # (or the submit button), and Shift+Tab comes back to this response's rationale.
    for attribute in range(ATTRIBUTES):
        page.keyboard.press(str(_score(card, attribute)))
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.id") == f"rationale-{card}"
    page.keyboard.type(f"Rationale for card {card}.")
    page.keyboard.press("Tab")


def _checked(page, card: int) -> list[int]:
    return [
        int(v)
        for v in page.locator(f"#response-{card} input:checked").evaluate_all(
            "els => els.map(e => e.value)"
        )
    ]


def test_clinician_rates_a_conversation_with_the_keyboard(django_db_setup, page, live_server):
    # django_db_setup first: the test database must exist before Playwright starts its loop.
    study = study_make(name="Browser study", conversations=2, responders=RESPONDERS[:3])
    user = get_user_model().objects.create_user(username="kim", password="kim-password-1")
    role_add(user=user, role=CLINICIAN)
    rater = Rater.objects.create(kind="clinician", name="kim", user=user)
    first, second = assignments_create(study=study, clinicians=[rater])
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    page.goto("/accounts/login/")
    page.keyboard.press("Tab")
    tab_to(page, "#id_login")
    page.keyboard.type("kim")
    page.keyboard.press("Tab")
    page.keyboard.type("kim-password-1")
    page.keyboard.press("Enter")
    page.wait_for_url("**/rate/")
    assert "0 / 2 conversations done" in page.inner_text("#progress-text")
    tab_to(page, "#continue")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/rate/{first.token}/")

    _rate_card(page, 0)
    wait_saved(page)
    # The anchor of the focused score shows under its attribute, in the page's flow.
    tab_to(page, "#response-1 input[type=radio]")
    assert page.locator("#response-1 .anchor-line").first.inner_text().startswith("1 — ")
    page.screenshot(path=str(SCREENSHOTS / "rating-page.png"), full_page=True)

    # Leave mid-way and come back: everything typed is there.
    page.reload()
    assert _checked(page, 0) == [_score(0, a) for a in range(ATTRIBUTES)]
    assert page.input_value("#rationale-0") == "Rationale for card 0."
    assert _checked(page, 1) == []

    # Submitting too early names what is missing.
    tab_to(page, "#submit-conversation")
    page.keyboard.press("Enter")
    page.wait_for_selector("#missing")
    assert "Response B" in page.inner_text("#missing")
    page.screenshot(path=str(SCREENSHOTS / "rating-missing.png"), full_page=True)

    for card in (1, 2):
        _rate_card(page, card)
    wait_saved(page)
    tab_to(page, "#submit-conversation")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/rate/{second.token}/")
    assert "1 / 2 conversations done" in page.inner_text("#progress-text")
    page.screenshot(path=str(SCREENSHOTS / "rating-next.png"))

    first.refresh_from_db()
    assert first.status == Assignment.Status.SUBMITTED
    ratings = Rating.objects.filter(assignment=first)
    assert ratings.count() == 3 and set(ratings.values_list("status", flat=True)) == {"complete"}
    assert Score.objects.filter(rating__in=ratings).count() == 3 * ATTRIBUTES
    assert sorted(ratings.values_list("rationale", flat=True)) == [
        f"Rationale for card {n}." for n in range(3)
    ]
