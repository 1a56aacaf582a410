"""The first seconds on a rating page, in chromium: digits score at once (the focus starts on the
first attribute without a score), a digit that scores nothing says so, the keyboard hints are
hidden on a touch screen, and the page saves without loading htmx. Also the invite form's e-mail
field, styled like the others."""

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import expect

from accounts.roles import ADMIN, role_add
from annotation.models import Score
from annotation.services import assignments_create
from tests.factories import clinician_make, study_make

from .conftest import wait_saved

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def context_for(chromium, live_server):
    """A browser context of the given size and touch, signed in as `user` (its session cookie);
    fails its test on a Content-Security-Policy violation."""
    made, violations = [], []

    def make(user, *, width: int = 1280, touch: bool = False):
        context = chromium.new_context(
            base_url=live_server.url,
            viewport={"width": width, "height": 800},
            has_touch=touch,
            is_mobile=touch,
        )
        made.append(context)
        client = Client()
        client.force_login(user)
        context.add_cookies(
            [
                {
                    "name": settings.SESSION_COOKIE_NAME,
                    "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                    "url": live_server.url,
                }
            ]
        )
        page = context.new_page()
        page.on(
            "console",
            lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
        )
        return page

    yield make
    for context in made:
        context.close()
    assert not violations, violations


def _first_card_scores(page) -> list[str]:
    return page.locator("#response-0 input:checked").evaluate_all("els => els.map(e => e.value)")


def test_digits_score_from_the_moment_the_page_opens(django_db_setup, context_for):
    study = study_make(name="Start", conversations=1)
    rater = clinician_make(username="fay")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    page = context_for(rater.user)
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    page.goto(f"/rate/{assignment.token}/")
    page.wait_for_load_state("networkidle")
    # No library for the saves: htmx is neither requested nor defined.
    assert not [u for u in requested if "htmx" in u]
    assert page.evaluate("typeof window.htmx") == "undefined"
    # The focus is on the first attribute without a score: two digits score two attributes.
    assert page.evaluate("document.activeElement.closest('#response-0 fieldset') !== null")
    page.keyboard.press("4")
    page.keyboard.press("2")
    wait_saved(page)
    assert _first_card_scores(page) == ["4", "2"]
    assert sorted(Score.objects.values_list("value", flat=True)) == [2, 4]

    # Reopened half-scored: the focus starts on the third attribute, and N keeps it there.
    page.reload()
    page.keyboard.press("n")
    page.keyboard.press("5")
    wait_saved(page)
    assert _first_card_scores(page) == ["4", "2", "5"]


def test_a_digit_with_no_attribute_in_focus_says_what_to_do(django_db_setup, context_for):
    study = study_make(name="Stray", conversations=1)
    rater = clinician_make(username="gil")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    page = context_for(rater.user)
    page.goto(f"/rate/{assignment.token}/")
    hint = page.locator("#key-hint")
    expect(hint).to_be_hidden()
    page.click("#user-message")  # reading: the focus leaves the scores
    page.keyboard.press("3")
    expect(hint).to_be_visible()
    assert "press N" in hint.inner_text()
    assert _first_card_scores(page) == []  # nothing was scored behind the clinician's back
    page.keyboard.press("n")  # back to the first attribute without a score; the hint goes
    expect(hint).to_be_hidden()
    page.keyboard.press("3")
    wait_saved(page)
    assert _first_card_scores(page) == ["3"]


@pytest.mark.parametrize("touch", [False, True])
def test_keyboard_hints_only_where_there_are_keys(django_db_setup, context_for, touch):
    study = study_make(name=f"Hints {touch}", conversations=1)
    rater = clinician_make(username="hal")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    page = context_for(rater.user, width=375, touch=touch)
    page.goto(f"/rate/{assignment.token}/")
    keys = page.inner_text("#keys")
    assert "saved as you go" in keys
    assert ("Ctrl" in keys) is not touch and ("Tab" in keys) is not touch
    assert page.evaluate("document.documentElement.scrollWidth") <= 375


def test_the_invite_e_mail_field_is_styled_like_the_others(django_db_setup, context_for):
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_user(username="ida-admin", password="x")
    role_add(user=admin, role=ADMIN)
    page = context_for(admin, width=1280)
    page.goto("/manage/")
    username = page.locator("#id_username").bounding_box()
    email = page.locator("#id_email").bounding_box()
    assert email["width"] == pytest.approx(username["width"], abs=1)
    assert email["height"] == pytest.approx(username["height"], abs=1)
