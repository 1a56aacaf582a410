"""The rating page as clinicians use it: keyboard alone at phone and laptop widths, taps on a
touch screen, the rubric panel, accessible names, and an axe-core accessibility check."""

import os
import random
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from accounts.roles import ADMIN, role_add
from annotation.models import Assignment, Conversation, Rater, Rating, Response, Score, Study
from annotation.services import assignments_create, study_get_or_create
from annotation.training import practice_assign, practice_conversations_mark, reference_scores_set
from tests.axe import serious_axe_violations
from tests.factories import clinician_make, study_make
from tests.second_factor import browser_sign_in, totp_enrol

from .conftest import wait_saved

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ATTRIBUTES = 7
# Ten responses per conversation, as in the demo study and the paper: 70 scores.
TEN = [(f"zz-r{i}", f"Leaky system {i}", f"leakyfamily-{i}") for i in range(10)]


class Keyboard:
    """page.keyboard that counts every key pressed, so a test can bound the keystrokes."""

    def __init__(self, page):
        self.page, self.count = page, 0

    def press(self, key: str) -> None:
        self.count += 1
        self.page.keyboard.press(key)


@pytest.fixture
def browser_context(chromium, live_server):
    """Contexts of any size and touch; each fails its test on a policy (CSP) violation."""
    contexts, violations = [], []

    def make(*, width: int, touch: bool = False, bypass_csp: bool = False):
        context = chromium.new_context(
            base_url=live_server.url,
            viewport={"width": width, "height": 800},
            has_touch=touch,
            is_mobile=touch,
            bypass_csp=bypass_csp,
        )
        contexts.append(context)
        page = context.new_page()
        page.on(
            "console",
            lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
        )
        return page

    yield make
    for context in contexts:
        context.close()
    assert not violations, f"the page broke its Content-Security-Policy: {violations}"


def _score(card: int, attribute: int) -> int:
    return (card * 3 + attribute) % 5 + 1


def _page_width(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


def _screenshot(page, name: str) -> None:
    # Screenshots only on request: tests never write tracked files by themselves.
    directory = os.environ.get("MENTALBENCH_SCREENSHOTS")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(directory) / name), full_page=True)


@pytest.mark.parametrize("width", [375, 1280])
def test_keyboard_alone_scores_a_conversation_in_80_keystrokes(
    django_db_setup, browser_context, width
):
    study = study_make(name=f"Keyboard {width}", conversations=2, responders=TEN)
    rater = clinician_make(username="kim", password="kim-pw-1")
    first, second = assignments_create(study=study, clinicians=[rater], seed_rng=random.Random(3))
    page = browser_context(width=width)
    browser_sign_in(page, "kim", "kim-pw-1")
    page.goto(f"/rate/{first.token}/")
    assert _page_width(page) <= width  # no horizontal scroll
    assert page.inner_text("#score-count") == "0/70 scores"
    assert "Ctrl" in page.inner_text("#keys")  # the shortcuts are listed on the page

    keys = Keyboard(page)
    keys.press("n")  # the first attribute without a score
    for card in range(10):
        for attribute in range(ATTRIBUTES):
            keys.press(str(_score(card, attribute)))
        if card == 2:
            assert page.inner_text("#score-count") == "21/70 scores"
            assert page.inner_text("#response-2 .done-mark") == "7/7"
            assert "done" in page.get_attribute("#response-2", "class")
            assert "done" not in page.get_attribute("#response-3", "class")
    if width == 1280:
        _screenshot(page, "rating-keyboard-1280.png")
    else:
        _screenshot(page, "rating-keyboard-375.png")
    assert _page_width(page) <= width
    # After the last score, focus is on the submit button; Ctrl+Enter submits from anywhere and
    # waits for the saves still on their way.
    assert page.evaluate("document.activeElement.id") == "submit-conversation"
    with page.expect_navigation():
        keys.press("Control+Enter")
    assert keys.count <= 80, keys.count
    page.wait_for_url(f"**/rate/{second.token}/")

    first.refresh_from_db()
    assert first.status == Assignment.Status.SUBMITTED
    labels = dict(first.items.values_list("response_id", "position"))
    stored = {
        (labels[s.rating.response_id], s.attribute.position): s.value
        for s in Score.objects.filter(rating__assignment=first).select_related(
            "rating", "attribute"
        )
    }
    positions = sorted({p for _, p in stored})
    assert len(stored) == 70
    assert stored == {
        (card, positions[a]): _score(card, a) for card in range(10) for a in range(ATTRIBUTES)
    }


def test_touch_screen_scores_one_response_by_taps(django_db_setup, browser_context):
    study = study_make(name="Touch", conversations=1)
    rater = clinician_make(username="tia", password="tia-pw-1")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    page = browser_context(width=375, touch=True)
    browser_sign_in(page, "tia", "tia-pw-1")
    page.goto(f"/rate/{assignment.token}/")
    assert _page_width(page) <= 375
    for n, fieldset in enumerate(page.locator("#response-0 fieldset.attribute").all()):
        fieldset.locator("label").nth(n % 5).tap()
    wait_saved(page)
    assert page.inner_text("#response-0 .done-mark") == "7/7"
    # The anchor of each chosen score is on the page without hover.
    guidance = page.locator("#response-0 fieldset.attribute").first
    assert guidance.locator(".anchor-line").is_visible()
    assert guidance.locator(".anchor-line").inner_text().startswith("1 — ")
    rating = Rating.objects.get(rater=rater, response=assignment.items.get(position=0).response)
    assert sorted(rating.scores.values_list("value", flat=True)) == sorted(
        n % 5 + 1 for n in range(7)
    )
    # The rubric is one tap away and closes again.
    assert not page.locator("#rubric").is_visible()
    page.locator(".rubric-link").tap()
    assert page.locator("#rubric").is_visible()
    page.locator(".rubric-close").tap()
    assert not page.locator("#rubric").is_visible()
    assert _page_width(page) <= 375


def test_a_score_anchor_never_covers_the_next_attribute(django_db_setup, browser_context):
    """Clicking Guidance 2 and then Informativeness 3 sets both (the anchor shown after the first
    click once covered the second row and took its click)."""
    study = study_make(name="Tooltip", conversations=1)
    rater = clinician_make(username="tom", password="tom-pw-1")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    page = browser_context(width=1280)
    browser_sign_in(page, "tom", "tom-pw-1")
    page.goto(f"/rate/{assignment.token}/")
    rows = page.locator("#response-0 fieldset.attribute")
    rows.nth(0).locator("label").nth(1).click()
    rows.nth(1).locator("label").nth(2).click()
    wait_saved(page)
    assert rows.nth(0).locator("input:checked").get_attribute("value") == "2"
    assert rows.nth(1).locator("input:checked").get_attribute("value") == "3"
    rating = Rating.objects.get(rater=rater, response=assignment.items.get(position=0).response)
    assert sorted(rating.scores.values_list("value", flat=True)) == [2, 3]


def test_rubric_panel_and_accessible_names(django_db_setup, browser_context):
    study = study_make(name="Names", conversations=1)
    rater = clinician_make(username="una", password="una-pw-1")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    page = browser_context(width=1280)
    browser_sign_in(page, "una", "una-pw-1")
    page.goto(f"/rate/{assignment.token}/")
    panel = page.locator("#rubric")
    assert panel.is_visible()
    assert page.locator(".rubric-attr").count() == ATTRIBUTES  # once, not per response
    anchor = panel.locator(".rubric-attr").first.locator("li").nth(2).inner_text()[1:].strip()
    name = f"Response B, Guidance: 3 — {anchor}"
    assert page.get_by_role("radio", name=name, exact=True).count() == 1
    assert page.get_by_role("group", name="Response B, Guidance").count() == 1
    # Focusing an attribute marks its definition in the panel.
    page.get_by_role("radio", name=name, exact=True).focus()
    assert "current" in panel.locator(".rubric-attr").first.get_attribute("class")


def test_rationale_rule_names_the_response(django_db_setup, browser_context):
    study = study_make(name="Rationale rule", conversations=1, responders=TEN[:2])
    Study.objects.filter(pk=study.pk).update(rationale_required=True, rationale_min_length=10)
    rater = clinician_make(username="val", password="val-pw-1")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    page = browser_context(width=1280)
    browser_sign_in(page, "val", "val-pw-1")
    page.goto(f"/rate/{assignment.token}/")
    keys = Keyboard(page)
    keys.press("n")
    for _ in range(2 * ATTRIBUTES):
        keys.press("4")
    page.fill("#rationale-0", "Clear, warm and safe.")
    page.fill("#rationale-1", "Too short")
    wait_saved(page)
    with page.expect_navigation():
        keys.press("Control+Enter")
    assert "Response B: rationale (at least 10 characters)" in page.inner_text("#missing")
    assert "Response A" not in page.inner_text("#missing")
    assignment.refresh_from_db()
    assert assignment.status != Assignment.Status.SUBMITTED


# --- Accessibility: axe-core on every page a clinician or admin works in -------------------------


def _labelling_assignment(rater: Rater) -> Assignment:
    study, _ = study_get_or_create(
        name="Axe CD", kind=Study.Kind.DISTORTION_LABELLING, label_scheme="ranked"
    )
    Conversation.objects.create(study=study, external_id="x0", context="I always fail at things.")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    return assignment


def _rating_url(rater: Rater) -> str:
    study = study_make(name="Axe rating", conversations=1)
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    return f"/rate/{assignment.token}/"


def _guidelines_url(rater: Rater) -> str:
    _rating_url(rater)  # a study to show
    return "/rate/guidelines/"


def _training_study(rater: Rater) -> Study:
    """A study with a practice conversation (reference scores set) assigned to `rater`."""
    study = study_make(name="Axe training", conversations=2)
    practice_conversations_mark(study=study, external_ids=["c0"])
    attributes = list(study.rubric.attributes.order_by("position"))
    responses = Response.objects.filter(conversation__external_id="c0", conversation__study=study)
    rows = [
        (n, "c0", response.responder.key, a.name, "3")
        for n, (response, a) in enumerate(
            (r, a) for r in responses.select_related("responder") for a in attributes
        )
    ]
    reference_scores_set(study=study, rows=rows, user=None)
    practice_assign(study=study, clinicians=[rater])
    return study


def _practice_queue_url(rater: Rater) -> str:
    _training_study(rater)  # the queue then shows practice first
    return "/rate/"


def _training_url(rater: Rater) -> str:
    return f"/manage/training/?study={_training_study(rater).pk}"


# (page name, who signs in, how to reach it).
AXE_PAGES = [
    ("queue", "clinician", lambda rater: "/rate/"),
    ("guidelines", "clinician", _guidelines_url),
    ("rating", "clinician", _rating_url),
    ("labelling", "clinician", lambda rater: f"/rate/{_labelling_assignment(rater).token}/"),
    ("manage", "admin", lambda rater: "/manage/"),
    ("audit", "admin", lambda rater: "/manage/audit/"),
    ("training", "admin", _training_url),
    ("practice queue", "clinician", _practice_queue_url),
    ("top-up", "admin", lambda rater: "/manage/top-up/"),
    ("time-on-task", "admin", lambda rater: "/manage/time-on-task/"),
]


@pytest.mark.parametrize("width", [375, 1280])
@pytest.mark.parametrize(("name", "who", "url"), AXE_PAGES, ids=[p[0] for p in AXE_PAGES])
def test_no_serious_accessibility_violations(
    django_db_setup, browser_context, name, who, url, width
):
    rater = clinician_make(username="axel", password="axel-pw-1")
    admin = get_user_model().objects.create_user(username="ada", password="ada-pw-1")
    role_add(user=admin, role=ADMIN)
    target = url(rater)
    # axe is injected as a script of its own: only this context lets the page's policy admit it.
    page = browser_context(width=width, bypass_csp=True)
    if who == "admin":
        # An admin uses the platform only after a second factor: without it every admin page
        # sent the browser to the sign-in's re-authentication, and axe checked that page instead.
        totp_enrol(admin)
        browser_sign_in(page, "ada", "ada-pw-1", second_factor=True)
    else:
        browser_sign_in(page, "axel", "axel-pw-1")
    page.goto(target)
    assert page.url.endswith(target), f"{target} ended at {page.url}: axe would check another page"
    serious = serious_axe_violations(page)
    assert not serious, f"{name} at {width} px: {serious}"


def test_api_documentation_renders_under_the_policy(django_db_setup, browser_context):
    """Swagger UI (drf-spectacular-sidecar's local files) draws the API under script-src 'self'."""
    page = browser_context(width=1280)
    page.goto("/api/docs/")
    page.locator(".swagger-ui .opblock").first.wait_for()
    assert page.locator(".swagger-ui .opblock").count() > 3
    assert "MentalBench API" in page.inner_text(".swagger-ui .info")
