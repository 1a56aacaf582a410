"""Distortion labelling by clinicians: study creation, assignment, autosave, submit, blinding."""

import random

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from annotation.models import (
    Assignment,
    DistortionLabel,
    LabelAnnotation,
    LabelChange,
    Rater,
    Study,
)
from annotation.services import assignments_create, label_annotation_save
from judging.prompts import DEFAULT_DISTORTIONS
from tests.factories import clinician_make, distortion_study_make

from .conftest import at_once

# Filters, exports and saves must work on every supported database: bin/test runs these on
# SQLite as well.
pytestmark = pytest.mark.portable

MESSAGES = [
    "I failed one exam so I will never amount to anything.",
    "Everyone at work must think I'm useless.",
    "I had a nice walk today.",
]


@pytest.fixture
def ranked_study(db):
    return distortion_study_make(messages=MESSAGES, name="Distortions")


@pytest.fixture
def multi_study(db):
    return distortion_study_make(messages=MESSAGES, name="Distortions multi", scheme="multi")


def _assign(study, clinician):
    return assignments_create(study=study, clinicians=[clinician], seed_rng=random.Random(3))


def _save(client, assignment, data):
    return client.post(reverse("annotation:save_labels", args=[assignment.token]), data)


@pytest.mark.django_db
def test_new_distortion_study_gets_the_paper_label_set():
    study = distortion_study_make(messages=MESSAGES, name="Distortions")
    names = list(DistortionLabel.objects.filter(study=study).values_list("name", flat=True))
    assert names == [d["name"] for d in DEFAULT_DISTORTIONS]
    assert len(names) == 11 and names[-1] == "No Distortion"
    assert DistortionLabel.objects.get(study=study, name="Mental Filter").definition


@pytest.mark.django_db
def test_assignments_for_a_distortion_study_need_no_responses(ranked_study, clinician):
    created = _assign(ranked_study, clinician)
    assert len(created) == len(MESSAGES)
    assert not any(a.items.exists() for a in created)


@pytest.mark.django_db
def test_import_page_creates_a_distortion_study_from_user_messages(client, django_user_model):
    user = django_user_model.objects.create_user("boss", password="pw", is_staff=True)
    client.force_login(user)
    csv = b"id,context\nu1,I always mess everything up\nu2,Nothing ever goes right\n"
    response = client.post(
        "/imports/",
        {
            "new_study": "CD upload",
            "new_study_kind": "distortion",
            "label_scheme": "multi",
            "kind": "conversations",
            "file": SimpleUploadedFile("messages.csv", csv, content_type="text/csv"),
        },
    )
    assert response.status_code == 200
    study = Study.objects.get(name="CD upload")
    assert (study.kind, study.label_scheme) == ("distortion", "multi")
    assert study.conversations.count() == 2
    assert study.distortion_labels.count() == 11


@pytest.mark.django_db
def test_labelling_page_shows_message_and_definitions_inline(alice, ranked_study, clinician):
    assignment = _assign(ranked_study, clinician)[0]
    page = alice.get(reverse("annotation:rate", args=[assignment.token])).content.decode()
    assert assignment.conversation.context.replace("'", "&#x27;") in page
    assert "Dominant distortion" in page and "Secondary distortion" in page
    assert "Focusing only on negative aspects." in page  # Mental Filter's definition
    assert "I failed this interview" in page  # an example


@pytest.mark.django_db
def test_ranked_autosave_then_submit_locks(alice, ranked_study, clinician):
    assignment = _assign(ranked_study, clinician)[0]
    response = _save(alice, assignment, {"dominant": "Overgeneralization", "edited_ms": 1000})
    assert response.status_code == 200 and "All changes saved" in response.content.decode()
    _save(
        alice,
        assignment,
        {"dominant": "Overgeneralization", "secondary": "Labeling", "edited_ms": 2000},
    )
    annotation = LabelAnnotation.objects.get(rater=clinician, conversation=assignment.conversation)
    assert annotation.labels == ["Overgeneralization", "Labeling"]
    assert annotation.status == "draft" and annotation.source == "form"
    assert LabelChange.objects.filter(annotation=annotation, field="labels").count() == 2
    response = alice.post(reverse("annotation:submit", args=[assignment.token]))
    assert response.status_code == 302
    annotation.refresh_from_db()
    assert annotation.status == "complete"
    assert Assignment.objects.get(pk=assignment.pk).status == "submitted"
    locked = _save(alice, assignment, {"dominant": "Labeling", "edited_ms": 3000})
    assert locked.status_code == 409


@pytest.mark.django_db
@pytest.mark.parametrize(
    "data, message",
    [
        ({"dominant": "Labeling", "secondary": "Labeling"}, "must differ"),
        ({"dominant": "No Distortion", "secondary": "Labeling"}, "cannot be combined"),
        ({"secondary": "Labeling"}, "dominant label first"),
        ({"dominant": "Made Up"}, "not a label of this study"),
    ],
)
def test_ranked_save_refuses_invalid_selections(alice, ranked_study, clinician, data, message):
    assignment = _assign(ranked_study, clinician)[0]
    response = _save(alice, assignment, data)
    assert response.status_code == 400 and message in response.content.decode()
    assert not LabelAnnotation.objects.exists()


@pytest.mark.django_db
def test_submit_without_a_dominant_label_is_refused(alice, ranked_study, clinician):
    assignment = _assign(ranked_study, clinician)[0]
    response = alice.post(reverse("annotation:submit", args=[assignment.token]))
    assert response.status_code == 422
    assert "Choose a dominant label" in response.content.decode()
    assert Assignment.objects.get(pk=assignment.pk).status == "pending"


@pytest.mark.django_db
def test_multi_scheme_keeps_any_number_and_no_distortion_alone(alice, multi_study, clinician):
    assignment = _assign(multi_study, clinician)[0]
    page = alice.get(reverse("annotation:rate", args=[assignment.token])).content.decode()
    assert 'type="checkbox" name="labels"' in page
    ok = _save(
        alice,
        assignment,
        {"labels": ["Labeling", "Emotional Reasoning", "Mental Filter"], "edited_ms": 5},
    )
    assert ok.status_code == 200
    annotation = LabelAnnotation.objects.get(rater=clinician)
    # Stored in the label set's order, whatever order the browser sent.
    assert annotation.labels == ["Emotional Reasoning", "Mental Filter", "Labeling"]
    bad = _save(alice, assignment, {"labels": ["No Distortion", "Labeling"], "edited_ms": 6})
    assert bad.status_code == 400
    annotation.refresh_from_db()
    assert annotation.labels == ["Emotional Reasoning", "Mental Filter", "Labeling"]


@pytest.mark.django_db
def test_stale_tab_cannot_overwrite_a_newer_selection(ranked_study, clinician):
    assignment = _assign(ranked_study, clinician)[0]
    user = clinician.user
    label_annotation_save(
        assignment=assignment, user=user, labels=["Labeling"], edited_ms=2_000_000
    )
    stale = label_annotation_save(
        assignment=assignment, user=user, labels=["Mental Filter"], edited_ms=1_000_000
    )
    assert stale.saved is False and stale.value == "Labeling"
    assert LabelAnnotation.objects.get().labels == ["Labeling"]


@pytest.mark.django_db(transaction=True)
def test_two_tabs_posting_at_once_keep_one_annotation_and_the_later_edit(django_user_model):
    """Two browser tabs (two sessions, two connections) autosave different selections at the
    same instant, over HTTP: one annotation, the later edit (by the browser clock) wins whatever
    order the requests commit in, and the audit trail ends on it."""
    study = distortion_study_make(messages=MESSAGES, name="Distortions")
    clinician = clinician_make(username="tabs")
    assignment = _assign(study, clinician)[0]
    tabs = [Client(), Client()]
    for client in tabs:
        client.force_login(clinician.user)
    statuses: list[int] = []

    def tab(client, dominant, edited_ms):
        data = {"dominant": dominant, "edited_ms": edited_ms}
        return lambda: _save(client, assignment, data).status_code

    for round_, (late, early) in enumerate(
        [
            ("Labeling", "Mental Filter"),
            ("Mind Reading", "Labeling"),
            ("Labeling", "Overgeneralization"),
        ]
    ):
        base = 1_000_000 * (round_ + 1)
        statuses += at_once(tab(tabs[0], early, base), tab(tabs[1], late, base + 500))
        annotation = LabelAnnotation.objects.get(rater=clinician)
        assert annotation.labels == [late]
        assert LabelChange.objects.filter(annotation=annotation).last().new_value == late
    assert statuses == [200] * 6
    assert LabelAnnotation.objects.filter(rater=clinician).count() == 1


@pytest.mark.django_db
def test_clinician_cannot_label_other_clinicians_message(alice, ranked_study, django_user_model):
    bob = clinician_make(username="bob")
    assignment = _assign(ranked_study, bob)[0]
    assert alice.get(reverse("annotation:rate", args=[assignment.token])).status_code == 404
    assert _save(alice, assignment, {"dominant": "Labeling"}).status_code == 404
    assert alice.post(reverse("annotation:submit", args=[assignment.token])).status_code == 404
    assert not LabelAnnotation.objects.exists()


@pytest.mark.django_db
def test_labelling_page_shows_nothing_of_other_raters(alice, ranked_study, clinician):
    assignment = _assign(ranked_study, clinician)[0]
    judge = Rater.objects.create(kind=Rater.Kind.JUDGE, name="zz-leaky-judge")
    LabelAnnotation.objects.create(
        rater=judge,
        conversation=assignment.conversation,
        repeat=0,
        status="complete",
        source="judge",
        labels=["Personalization"],
        raw_output="zz-leaky-output Personalization",
    )
    page = alice.get(reverse("annotation:rate", args=[assignment.token])).content.decode()
    assert "zz-leaky" not in page
    assert 'value="Personalization" checked' not in page


@pytest.mark.django_db
def test_label_changes_appear_in_the_admin_audit_trail(
    client, ranked_study, clinician, admin_member
):
    assignment = _assign(ranked_study, clinician)[0]
    label_annotation_save(
        assignment=assignment, user=clinician.user, labels=["Labeling"], edited_ms=1
    )
    label_annotation_save(
        assignment=assignment, user=clinician.user, labels=["Mind Reading"], edited_ms=2
    )
    client.force_login(admin_member)
    page = client.get(reverse("annotation:manage_audit")).content.decode()
    assert "Distortion labels" in page and "Mind Reading" in page
    rows = client.get(reverse("annotation:manage_audit"), {"format": "labels-csv"})
    lines = rows.content.decode().strip().splitlines()
    assert len(lines) == 3 and lines[-1].endswith("labels,Labeling,Mind Reading")


@pytest.mark.django_db
def test_a_labelled_message_leads_to_the_next_message_and_counts_as_one(
    alice, ranked_study, clinician
):
    """Submitting a label opened a rating conversation of seventy scores when one was older in
    the queue; the next task is the next message to label, and the progress counts messages as
    messages, not as conversations."""
    from tests.factories import study_make

    rating = assignments_create(study=study_make(name="Older ratings"), clinicians=[clinician])
    first, second, _ = _assign(ranked_study, clinician)
    _save(alice, first, {"dominant": "Overgeneralization", "edited_ms": 500})
    response = alice.post(reverse("annotation:submit", args=[first.token]))
    assert response.url == reverse("annotation:rate", args=[second.token])
    assert rating[0].token not in response.url
    page = alice.get(response.url).content.decode()
    assert "1 / 3 messages to label" in page
    queue = alice.get(reverse("annotation:queue")).content.decode()
    assert f"0 / {len(rating)} conversations" in queue and "1 / 3 messages to label" in queue
