"""Every assignment and training state a page shows is true: one test per state, read back from
the clinician's queue and the admin's pages (run and batch states: tests/judging/test_states.py).
"""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from annotation.models import Assignment, ReferenceScore, Response, TrainingOutcome
from annotation.services import (
    assignment_flag,
    assignment_reclaim,
    assignment_submit,
    assignments_create,
    rating_save,
)
from annotation.training import practice_assign, practice_conversations_mark
from tests.factories import clinician_make, study_make


def _rate_all(assignment, user):
    attributes = list(assignment.conversation.study.rubric.attributes.all())
    for item in assignment.items.all():
        for attribute in attributes:
            rating_save(assignment=assignment, item_token=item.token, user=user,
                        attribute_id=attribute.pk, score=3)  # fmt: skip


@pytest.fixture
def every_state(db, django_user_model):
    """One clinician holding one assignment in each state."""
    study = study_make(name="States", conversations=5)
    cleo = clinician_make(username="cleo")
    other = clinician_make(username="otto")
    pending, started, submitted, flagged, stale = assignments_create(study=study, clinicians=[cleo])
    first = started.items.first()
    rating_save(assignment=started, item_token=first.token, user=cleo.user,
                attribute_id=study.rubric.attributes.first().pk, score=2)  # fmt: skip
    _rate_all(submitted, cleo.user)
    assignment_submit(assignment=submitted, user=cleo.user)
    assignment_flag(assignment=flagged, reason="The text is broken.")
    Assignment.objects.filter(pk=stale.pk).update(
        created_at=timezone.now() - timedelta(days=30), last_activity_at=None
    )
    stale.refresh_from_db()
    assignment_reclaim(assignment=stale, rater=other)
    return (
        study,
        cleo,
        {
            "pending": pending,
            "in_progress": started,
            "submitted": submitted,
            "flagged": flagged,
            "reclaimed": stale,
        },
    )


def _queue_rows(client) -> dict[str, str]:
    html = client.get(reverse("annotation:queue")).content.decode()
    # Number, study, kind of task, status, the link.
    rows = re.findall(
        r'<td>[^<]*</td><td>[^<]*</td><td class="task-[a-z]+">[^<]*</td><td>([^<]+)</td>'
        r'<td><a href="/rate/([^/]+)/"',
        html,
    )
    return {token: label for label, token in rows}


@pytest.mark.parametrize(
    ("state", "label"),
    [
        ("pending", "Not started"),
        ("in_progress", "In progress"),
        ("submitted", "Submitted"),
        ("flagged", "Flagged"),
    ],
)
def test_the_queue_labels_each_assignment_by_its_state(every_state, client, state, label):
    _, cleo, assignments = every_state
    client.force_login(cleo.user)
    assignment = assignments[state]
    assignment.refresh_from_db()
    assert assignment.status == state
    assert _queue_rows(client)[assignment.token] == label


def test_reclaimed_work_leaves_the_clinicians_queue_and_counts(every_state, client):
    _, cleo, assignments = every_state
    client.force_login(cleo.user)
    reclaimed = assignments["reclaimed"]
    assert reclaimed.token not in _queue_rows(client)
    assert client.get(reverse("annotation:rate", args=[reclaimed.token])).status_code == 404


def test_done_counts_submitted_work_out_of_the_work_that_is_still_hers(every_state, client):
    _, cleo, _ = every_state
    client.force_login(cleo.user)
    html = client.get(reverse("annotation:queue")).content.decode()
    # Pending, in progress and submitted count; flagged and reclaimed work is neither.
    assert "1 / 3 conversations</span> done" in html


def test_the_admin_progress_row_agrees(every_state, client, admin_member):
    study, _, _ = every_state
    client.force_login(admin_member)
    html = client.get(reverse("annotation:manage") + f"?study={study.pk}").content.decode()
    row = re.search(r"<tr><td>cleo</td>(.*?)</tr>", html, re.DOTALL)
    assert row
    cells = re.findall(r"<td>([^<]*)</td>", row.group(1))
    # Practice, Done, Assigned, Added responses, In progress, Flagged.
    assert cells[:6] == ["—", "1", "3", "—", "1", "1"]


@pytest.fixture
def training_states(db, django_user_model, admin_member):
    study = study_make(name="Training states", conversations=3)
    practice_conversations_mark(study=study, external_ids=["c0"])
    ReferenceScore.objects.bulk_create(
        ReferenceScore(response=response, attribute=attribute, value=3)
        for response in Response.objects.filter(
            conversation__study=study, conversation__practice=True
        )
        for attribute in study.rubric.attributes.all()
    )
    names = ("tess", "paul", "nina", "lena")
    raters = {name: clinician_make(username=name) for name in names}
    practice_assign(study=study, clinicians=list(raters.values()))
    TrainingOutcome.objects.create(study=study, rater=raters["paul"], passed=True)
    TrainingOutcome.objects.create(study=study, rater=raters["nina"], passed=False)
    TrainingOutcome.objects.create(
        study=study, rater=raters["lena"], passed=True, decided_by=admin_member
    )
    return study


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("tess", "in training"),
        ("paul", "passed"),
        ("nina", "not passed"),
        ("lena", "passed (let through by adam)"),
    ],
)
def test_the_training_page_states_each_outcome(training_states, client, admin_member, name, label):
    client.force_login(admin_member)
    html = client.get(
        reverse("annotation:manage_training") + f"?study={training_states.pk}"
    ).content.decode()
    row = re.search(rf"<tr><td>{name}</td>(.*?)</tr>", html, re.DOTALL)
    assert row
    outcome = re.findall(r"<td>([^<]*)</td>", row.group(1))[5]
    assert outcome == label
