"""Feedback to clinicians after adjudication (docs/adjudication.md, *Feedback to clinicians*):
each sees where their score differed from the final one and the adjudicator's reason, by their
own letters, in the training round's table; the drift page counts it per clinician."""

from __future__ import annotations

import random

import pytest
from django.test import Client

from accounts.roles import ADMIN
from annotation.feedback_selectors import adjudication_feedback, overruled_by_rater
from annotation.membership import ADJUDICATOR, member_add
from annotation.models import Assignment, Rating, Response, Score
from annotation.services import assignments_create
from annotation.services.adjudication import adjudication_save
from tests.factories import clinician_make, study_make, user_make

pytestmark = pytest.mark.django_db


def _submit(task: Assignment, scores: dict[tuple[int, int], int]) -> None:
    """The clinician's complete ratings of every response of `task` ((response, attribute) →
    score; 3 elsewhere), submitted."""
    attributes = list(task.conversation.study.rubric.attributes.all())
    for item in task.items.all():
        rating = Rating.objects.create(
            rater=task.rater, response_id=item.response_id, assignment=task,
            status=Rating.Status.COMPLETE, source=Rating.Source.FORM,
        )  # fmt: skip
        Score.objects.bulk_create(
            Score(rating=rating, attribute=a, value=scores.get((item.response_id, a.pk), 3))
            for a in attributes
        )
    Assignment.objects.filter(pk=task.pk).update(status=Assignment.Status.SUBMITTED)


@pytest.fixture
def setup(db):
    study = study_make(name="Feedback study", conversations=1)
    a = clinician_make(username="dr_alfa_name")
    b = clinician_make(username="dr_bravo_name")
    task_a, task_b = sorted(
        assignments_create(
            study=study, clinicians=[a, b], overlap=2, overlap_fraction=1.0,
            seed_rng=random.Random(5),
        ),
        key=lambda t: t.rater_id != a.pk,
    )  # fmt: skip
    attribute = study.rubric.attributes.order_by("position")[1]
    response = task_a.items.get(position=2).response
    return {
        "study": study,
        "raters": (a, b),
        "tasks": (task_a, task_b),
        "attribute": attribute,
        "response": response,
    }


def _adjudicate(setup, *, score: int = 4) -> None:
    a, b = setup["raters"]
    key = (setup["response"].pk, setup["attribute"].pk)
    _submit(setup["tasks"][0], {key: 1})
    _submit(setup["tasks"][1], {key: 4})
    adjudicator = user_make(username="adj_person")
    member_add(study=setup["study"], user=adjudicator, role=ADJUDICATOR)
    adjudication_save(
        study=setup["study"], response_id=key[0], attribute_id=key[1], score=score,
        reason="rater_error", reason_text="The reply does name the feeling.", user=adjudicator,
    )  # fmt: skip


def test_a_clinician_sees_where_the_final_score_differs_and_why(setup):
    a, b = setup["raters"]
    client = Client()
    client.force_login(a.user)
    assert "adjudicated-link" not in client.get("/rate/").content.decode()
    assert "No score of yours" in client.get("/rate/adjudicated/").content.decode()
    _adjudicate(setup)

    (conversation,) = adjudication_feedback(rater=a)
    (item,) = conversation.items
    assert item.label == "C"  # the clinician's own letter for the response
    (cell,) = item.cells
    assert (cell.attribute, cell.yours, cell.reference, cell.diff) == (
        setup["attribute"].name, 1, 4, 3,
    )  # fmt: skip
    assert cell.reason == "Rater error"
    assert adjudication_feedback(rater=b) == []  # the final score is theirs

    assert 'id="adjudicated-link"' in client.get("/rate/").content.decode()
    html = client.get("/rate/adjudicated/").content.decode()
    assert "Response C: your scores beside the final score" in html
    assert "Rater error: The reply does name the feeling." in html
    assert setup["response"].text in html
    # Blinded: no other clinician, no adjudicator, no system.
    forbidden = {"dr_bravo_name", "adj_person"}
    for response in Response.objects.filter(conversation__study=setup["study"]).select_related(
        "responder"
    ):
        forbidden |= {response.responder.key, response.responder.name, response.metadata["model"]}
    for word in forbidden:
        assert word not in html, word

    other = Client()
    other.force_login(b.user)
    assert "No score of yours" in other.get("/rate/adjudicated/").content.decode()


def test_the_drift_page_counts_overruled_scores(setup):
    a, b = setup["raters"]
    _adjudicate(setup)
    assert overruled_by_rater(study=setup["study"]) == {a.pk: (1, 1), b.pk: (0, 1)}
    client = Client()
    client.force_login(user_make(username="adm", role=ADMIN))
    html = client.get(f"/analysis/studies/{setup['study'].pk}/retest/").content.decode()
    rows = {
        name: html[html.index(f"<td>{name}</td>") :].split("</tr>")[0]
        for name in ("dr_alfa_name", "dr_bravo_name")
    }
    assert "1 of 1 adjudicated scores" in rows["dr_alfa_name"]
    assert "0 of 1 adjudicated scores" in rows["dr_bravo_name"]
