"""A clinician labels user messages with the keyboard alone in real chromium, and a
researcher sees the distortion dashboard with its Figure 2 chart drawn."""

import pytest
from django.contrib.auth import get_user_model

from accounts.roles import CLINICIAN, RESEARCHER, role_add
from annotation.models import Assignment, Conversation, LabelAnnotation, Rater, Study
from annotation.services import assignments_create, study_get_or_create
from judging.models import ModelEndpoint, Run
from tests.second_factor import browser_sign_in

from ..conftest import SCREENSHOTS
from .conftest import tab_to, wait_saved

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _login(page, username: str, password: str) -> None:
    browser_sign_in(page, username, password)
    page.wait_for_load_state("networkidle")


def test_clinician_labels_messages_with_the_keyboard(django_db_setup, page, live_server):
    study, _ = study_get_or_create(
        name="Browser CD", kind=Study.Kind.DISTORTION_LABELLING, label_scheme="ranked"
    )
    for i, text in enumerate(
        [
            "I failed my driving test, so I will never be able to do anything right.",
            "My friend didn't text back; she must hate me now.",
        ]
    ):
        Conversation.objects.create(study=study, external_id=f"b{i}", context=text)
    user = get_user_model().objects.create_user(username="lee", password="lee-password-1")
    role_add(user=user, role=CLINICIAN)
    rater = Rater.objects.create(kind="clinician", name="lee", user=user)
    first, second = assignments_create(study=study, clinicians=[rater])
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    _login(page, "lee", "lee-password-1")
    page.goto(f"/rate/{first.token}/")
    assert "Focusing only on negative aspects." in page.inner_text("#label-form")

    # Dominant: first option, then ArrowDown once → the second label (Overgeneralization).
    tab_to(page, "#dominant-group input[type=radio]")
    page.keyboard.press("Space")
    page.keyboard.press("ArrowDown")
    wait_saved(page)
    # Secondary: from "None", ArrowDown ×10 → Labeling (the tenth distortion).
    tab_to(page, "#secondary-group input[type=radio]")
    for _ in range(10):
        page.keyboard.press("ArrowDown")
    wait_saved(page)
    annotation = LabelAnnotation.objects.get(rater=rater, conversation=first.conversation)
    assert annotation.labels == ["Overgeneralization", "Labeling"]
    page.screenshot(path=str(SCREENSHOTS / "labelling-page.png"), full_page=True)

    # Reload: the selection is there.
    page.reload()
    assert page.is_checked('#dominant-group input[value="Overgeneralization"]')
    assert page.is_checked('#secondary-group input[value="Labeling"]')

    tab_to(page, "#submit-conversation")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/rate/{second.token}/")

    # Submitting with no dominant label is refused and says why.
    tab_to(page, "#submit-conversation")
    page.keyboard.press("Enter")
    page.wait_for_selector("#missing")
    assert "dominant label" in page.inner_text("#missing")
    page.screenshot(path=str(SCREENSHOTS / "labelling-missing.png"), full_page=True)

    first.refresh_from_db()
    assert first.status == Assignment.Status.SUBMITTED
    annotation.refresh_from_db()
    assert annotation.status == "complete"


def test_researcher_sees_the_distortion_dashboard(django_db_setup, page, live_server):
    study, _ = study_get_or_create(
        name="Dashboard CD", kind=Study.Kind.DISTORTION_LABELLING, label_scheme="ranked"
    )
    endpoint = ModelEndpoint.objects.create(
        name="gpt-4o", provider="openai", model="gpt-4o", family="openai"
    )
    judge = Rater.objects.create(kind="judge", name="gpt-4o")
    answers = [
        ["Labeling"],
        ["Overgeneralization", "Labeling"],
        ["No Distortion"],
        ["Mind Reading"],
        ["Mental Filter", "Magnification"],
    ]
    for temperature in (0.5, 0.7):
        run = Run.objects.create(
            study=study,
            endpoint=endpoint,
            rater=judge,
            kind="labelling",
            repeats=5,
            temperature=temperature,
        )
        for i in range(12):
            conversation, _ = Conversation.objects.get_or_create(
                study=study, external_id=f"d{i}", defaults={"context": f"message {i}"}
            )
            for repeat in range(5):
                pick = answers[(i + (repeat * (i % 3 == 0)) + int(temperature * 10)) % 5]
                LabelAnnotation.objects.create(
                    rater=judge,
                    conversation=conversation,
                    run=run,
                    repeat=repeat,
                    status="complete",
                    source="judge",
                    labels=pick,
                )
    user = get_user_model().objects.create_user(username="res", password="res-password-1")
    role_add(user=user, role=RESEARCHER)
    _login(page, "res", "res-password-1")
    page.goto(f"/analysis/distortions/{study.pk}/")
    page.wait_for_selector("#chart-figure2[data-drawn='1']", timeout=10000)
    assert "Fleiss' kappa per label" in page.inner_text("body")
    page.screenshot(path=str(SCREENSHOTS / "distortion-dashboard.png"), full_page=True)
