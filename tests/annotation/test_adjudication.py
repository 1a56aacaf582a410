"""Adjudication (docs/adjudication.md): the queue, who may open it, blinding, saving, and the
final scores with their provenance."""

from __future__ import annotations

import csv
import io
import re
import threading

import pytest
from django.db import connection

from accounts.roles import ADMIN, CLINICIAN, RESEARCHER
from annotation.adjudication_selectors import (
    ADJUDICATED,
    AWAITING,
    CONSENSUS,
    SINGLE,
    adjudication_queue,
    final_scores,
)
from annotation.membership import ADJUDICATOR, LEAD, MEMBER_RESEARCHER, member_add
from annotation.models import (
    Adjudication,
    Assignment,
    AssignmentItem,
    Conversation,
    Rater,
    Rating,
    Response,
    Score,
)
from annotation.rater_codes import rater_codes_assign
from annotation.services.adjudication import AdjudicationRefused, adjudication_save
from tests.factories import clinician_make, study_make, user_make

pytestmark = pytest.mark.django_db


def _rate(rater: Rater, response: Response, values: dict, *, repeat: int = 0, rationale=""):
    rating = Rating.objects.create(
        rater=rater,
        response=response,
        repeat=repeat,
        status=Rating.Status.COMPLETE,
        source=Rating.Source.FORM,
        rationale=rationale,
    )
    # The clinician joined the study with their first work (an assignment or import does it).
    rater_codes_assign(study_id=response.conversation.study_id, rater_ids=[rater.pk])
    Score.objects.bulk_create(
        Score(rating=rating, attribute=attr, value=value) for attr, value in values.items()
    )
    return rating


@pytest.fixture
def setup(db):
    """Two conversations (c0, c1) of four responses; two clinicians who disagree on some."""
    study = study_make(name="Adjudicated study", conversations=2)
    attrs = list(study.rubric.attributes.order_by("position"))
    a, b = clinician_make(username="dr_alfa_name"), clinician_make(username="dr_bravo_name")
    responses = {
        (r.conversation.external_id, r.responder.key): r
        for r in Response.objects.filter(conversation__study=study).select_related(
            "conversation", "responder"
        )
    }
    r0 = responses[("c0", "zz-gpt4o")]
    r1 = responses[("c0", "zz-claude")]
    r2 = responses[("c0", "zz-llama")]
    # r0: attribute 0 three points apart, attribute 1 one apart (consensus), the rest agree.
    _rate(a, r0, {attrs[0]: 1, attrs[1]: 2, attrs[2]: 3}, rationale="Too vague for me.")
    _rate(b, r0, {attrs[0]: 4, attrs[1]: 3, attrs[2]: 3}, rationale="Warm and concrete.")
    # r1: attribute 0 exactly the threshold (2) apart.
    _rate(a, r1, {attrs[0]: 2})
    _rate(b, r1, {attrs[0]: 4, attrs[1]: 5})
    # r2: one clinician only.
    _rate(a, r2, {attrs[0]: 5})
    # Not study data: a repeat and a judge disagreeing wildly never open a dispute.
    _rate(a, r1, {attrs[1]: 1}, repeat=1)
    judge = Rater.objects.create(kind=Rater.Kind.JUDGE, name="zz-judge-name")
    _rate(judge, r1, {attrs[1]: 1})
    # A clinician flagged conversation c1.
    flagged_response = responses[("c1", "zz-gpt4o")]
    assignment = Assignment.objects.create(
        rater=a,
        conversation=flagged_response.conversation,
        status=Assignment.Status.FLAGGED,
        flag_reason="The user mentions self-harm.",
    )
    AssignmentItem.objects.create(assignment=assignment, response=flagged_response, position=0)
    adjudicator = user_make(username="adj_person")
    member_add(study=study, user=adjudicator, role=ADJUDICATOR)
    return {
        "study": study,
        "attrs": attrs,
        "raters": (a, b),
        "r0": r0,
        "r1": r1,
        "r2": r2,
        "flagged": flagged_response,
        "adjudicator": adjudicator,
        "responses": responses,
    }


def test_queue_takes_pairs_at_the_threshold_and_flagged_responses_first(
    setup, django_assert_max_num_queries
):
    study, attrs = setup["study"], setup["attrs"]
    with django_assert_max_num_queries(7):
        rows = adjudication_queue(study=study)
    flagged = [row for row in rows if row.flagged]
    assert {row.response_id for row in flagged} == {setup["flagged"].pk}
    assert [row.attribute_id for row in flagged] == [a.pk for a in attrs]  # every attribute
    assert rows[: len(flagged)] == flagged  # flagged first
    rest = [(row.response_id, row.attribute_id, row.spread) for row in rows if not row.flagged]
    # r0's 3-point dispute before r1's 2-point one; nothing else (1 apart, one clinician,
    # the repeat, the judge).
    assert rest == [(setup["r0"].pk, attrs[0].pk, 3), (setup["r1"].pk, attrs[0].pk, 2)]
    assert not any(row.adjudicated for row in rows)

    study.adjudication_threshold = 3
    study.save()
    rest = [row.response_id for row in adjudication_queue(study=study) if not row.flagged]
    assert rest == [setup["r0"].pk]


def test_practice_conversations_never_reach_the_queue(setup):
    Conversation.objects.filter(pk=setup["r0"].conversation_id).update(practice=True)
    rows = adjudication_queue(study=setup["study"])
    assert setup["r0"].pk not in {row.response_id for row in rows}
    assert setup["r1"].pk not in {row.response_id for row in rows}


# --- Access -------------------------------------------------------------------------------------


def _urls(setup) -> list[str]:
    study = setup["study"]
    return [
        f"/adjudicate/{study.pk}/",
        f"/adjudicate/{study.pk}/{setup['r0'].pk}/",
    ]


def test_the_studys_adjudicator_and_admins_open_the_pages(setup, client):
    for user in (setup["adjudicator"], user_make(username="adm", role=ADMIN)):
        client.force_login(user)
        for url in _urls(setup):
            assert client.get(url).status_code == 200, url
        assert setup["study"].name in client.get("/adjudicate/").content.decode()


def test_everyone_else_is_refused(setup, client):
    other_study = study_make(name="Someone else's", conversations=1)
    elsewhere = user_make(username="adj_elsewhere")
    member_add(study=other_study, user=elsewhere, role=ADJUDICATOR)
    lead = user_make(username="the_lead")
    member_add(study=setup["study"], user=lead, role=LEAD)
    member_researcher = user_make(username="member_researcher")
    member_add(study=setup["study"], user=member_researcher, role=MEMBER_RESEARCHER)
    # (the queue, a response's page): the queue is read by the study's lead too (the escalations
    # they are told of), so a researcher passes the gate a lead passes and finds no such study.
    refused = {
        elsewhere: (404, 404),  # an adjudicator, but not of this study: it does not exist
        setup["raters"][0].user: (403, 403),  # a clinician of the study
        user_make(username="platform_researcher", role=RESEARCHER): (404, 403),
        lead: (200, 403),
        member_researcher: (404, 403),
    }
    for user, statuses in refused.items():
        client.force_login(user)
        for url, status in zip(_urls(setup), statuses, strict=True):
            assert client.get(url).status_code == status, (user.username, url)
            response = client.post(url, {"attribute": setup["attrs"][0].pk, "score": 3})
            assert response.status_code in (status, 405), (user.username, url)
    assert not Adjudication.objects.exists()
    client.logout()
    for url in _urls(setup):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_nav_shows_adjudicators_their_section(setup, client):
    client.force_login(setup["adjudicator"])
    assert client.get("/")["Location"] == "/adjudicate/"  # their landing page
    html = client.get("/adjudicate/").content.decode()
    nav = html[html.index("<nav>") : html.index("</nav>")]
    assert 'href="/adjudicate/"' in nav
    client.force_login(user_make(username="just_a_clinician", role=CLINICIAN))
    html = client.get("/rate/").content.decode()
    assert 'href="/adjudicate/"' not in html[html.index("<nav>") : html.index("</nav>")]


# --- Blinding -----------------------------------------------------------------------------------


def test_adjudicator_pages_name_no_clinician_and_no_responder(setup, client):
    from analysis.pseudonyms import rater_codes

    study = setup["study"]
    codes = rater_codes(study_id=study.pk).values()
    assert codes
    forbidden = list(codes)
    for rater in setup["raters"]:
        forbidden += [rater.name, rater.user.username]
    forbidden.append("zz-judge-name")
    for response in setup["responses"].values():
        r = response.responder
        forbidden += [r.key, r.name, r.family, response.metadata["model"]]
    client.force_login(setup["adjudicator"])
    pages = [f"/adjudicate/{study.pk}/"] + [
        f"/adjudicate/{study.pk}/{r.pk}/" for r in (setup["r0"], setup["r1"], setup["flagged"])
    ]
    for url in pages:
        html = client.get(url).content.decode()
        # Whole words: a study code such as C01 may occur inside a random CSRF token.
        leaked = [
            word
            for word in forbidden
            if re.search(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])", html)
        ]
        assert not leaked, f"{url} shows {leaked}"
    html = client.get(f"/adjudicate/{study.pk}/{setup['r0'].pk}/").content.decode()
    # What is shown instead: letters, the scores and the rationales.
    assert "Clinician A" in html and "Clinician B" in html
    assert "Too vague for me." in html and "Warm and concrete." in html
    flagged = client.get(f"/adjudicate/{study.pk}/{setup['flagged'].pk}/").content.decode()
    assert "The user mentions self-harm." in flagged


# --- Saving -------------------------------------------------------------------------------------


def test_a_plain_form_post_saves_and_saving_again_updates_the_same_row(setup, client):
    study, r0, attr = setup["study"], setup["r0"], setup["attrs"][0]
    client.force_login(setup["adjudicator"])
    url = f"/adjudicate/{study.pk}/{r0.pk}/"
    data = {"attribute": attr.pk, "score": 3, "reason": "rater_error", "reason_text": " typo "}
    response = client.post(url, data)
    assert response.status_code == 302 and response["Location"].endswith(f"#attribute-{attr.pk}")
    saved = Adjudication.objects.get()
    assert (saved.final_score, saved.reason, saved.reason_text) == (3, "rater_error", "typo")
    assert saved.adjudicator == setup["adjudicator"] and not saved.rubric_needs_change
    response = client.post(
        url, {**data, "score": 2, "rubric_needs_change": "1"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200 and "Saved" in response.content.decode()
    saved = Adjudication.objects.get()
    assert (saved.final_score, saved.rubric_needs_change) == (2, True)
    row = next(
        r
        for r in adjudication_queue(study=study)
        if (r.response_id, r.attribute_id) == (r0.pk, attr.pk)
    )
    assert row.adjudicated
    page = client.get(url).content.decode()
    assert 'value="2" required checked' in page


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"score": 9}, "not on this attribute"),
        ({"score": 0}, "not on this attribute"),
        ({"score": "x"}, "score"),
        ({"score": ""}, "choose a final score"),
        ({"reason": "because"}, "unknown reason"),
        ({"attribute": "second"}, "not disputed"),
        ({"attribute": 999999}, "not disputed"),
    ],
)
@pytest.mark.parametrize("htmx", [True, False])
def test_bad_input_is_refused_with_400_and_nothing_is_written(setup, client, change, message, htmx):
    study, r0, attrs = setup["study"], setup["r0"], setup["attrs"]
    if change.get("attribute") == "second":
        change = {"attribute": attrs[1].pk}  # one point apart: the clinicians' consensus
    client.force_login(setup["adjudicator"])
    data = {"attribute": attrs[0].pk, "score": 3, "reason": "other", **change}
    headers = {"HX-Request": "true"} if htmx else {}
    response = client.post(f"/adjudicate/{study.pk}/{r0.pk}/", data, headers=headers)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Adjudication.objects.exists()


def test_a_response_of_another_study_is_not_found(setup, client):
    other = study_make(name="Other study", conversations=1)
    foreign = Response.objects.filter(conversation__study=other).first()
    client.force_login(setup["adjudicator"])
    url = f"/adjudicate/{setup['study'].pk}/{foreign.pk}/"
    assert client.get(url).status_code == 404
    assert client.post(url, {"attribute": setup["attrs"][0].pk, "score": 3}).status_code == 404
    with pytest.raises(AdjudicationRefused):
        adjudication_save(
            study=setup["study"],
            response_id=foreign.pk,
            attribute_id=setup["attrs"][0].pk,
            score=3,
            user=setup["adjudicator"],
        )


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_saves_leave_one_row(setup):
    study, r0, attr = setup["study"], setup["r0"], setup["attrs"][0]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def save(score: int) -> None:
        try:
            barrier.wait(timeout=10)
            adjudication_save(
                study=study,
                response_id=r0.pk,
                attribute_id=attr.pk,
                score=score,
                reason="other",
                user=setup["adjudicator"],
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=save, args=(score,)) for score in (2, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    rows = list(Adjudication.objects.filter(response=r0, attribute=attr))
    assert len(rows) == 1 and rows[0].final_score in (2, 4)


# --- Final scores -------------------------------------------------------------------------------


def test_final_scores_say_where_each_came_from(setup, django_assert_max_num_queries):
    study, attrs = setup["study"], setup["attrs"]
    adjudication_save(
        study=study,
        response_id=setup["r0"].pk,
        attribute_id=attrs[0].pk,
        score=3,
        reason="ambiguous_response",
        user=setup["adjudicator"],
    )
    with django_assert_max_num_queries(5):
        rows = final_scores(study=study)
    by = {(row.response_id, row.attribute): row for row in rows}
    r0, r1, r2 = setup["r0"].pk, setup["r1"].pk, setup["r2"].pk
    assert by[(r0, attrs[0].name)].provenance == ADJUDICATED
    assert by[(r0, attrs[0].name)].final_score == 3
    assert by[(r0, attrs[0].name)].reason == "ambiguous_response"
    assert by[(r0, attrs[1].name)].provenance == CONSENSUS
    assert by[(r0, attrs[1].name)].final_score == 2.5
    assert by[(r0, attrs[2].name)].provenance == CONSENSUS
    assert by[(r0, attrs[2].name)].final_score == 3
    assert by[(r1, attrs[0].name)].provenance == AWAITING
    assert by[(r1, attrs[0].name)].final_score is None
    # The repeat does not count, the judge never does: one clinician on r1's second attribute.
    assert by[(r1, attrs[1].name)].provenance == SINGLE
    assert by[(r1, attrs[1].name)].final_score == 5
    assert (by[(r2, attrs[0].name)].provenance, by[(r2, attrs[0].name)].n_clinicians) == (
        SINGLE,
        1,
    )


def test_final_scores_csv_for_the_studys_researchers(setup, client):
    study, attrs = setup["study"], setup["attrs"]
    adjudication_save(
        study=study,
        response_id=setup["r0"].pk,
        attribute_id=attrs[0].pk,
        score=3,
        reason="rubric_gap",
        rubric_needs_change=True,
        user=setup["adjudicator"],
    )
    researcher = user_make(username="study_researcher")
    member_add(study=study, user=researcher, role=MEMBER_RESEARCHER)
    client.force_login(researcher)
    response = client.get(f"/analysis/studies/{study.pk}/final-scores.csv")
    assert response.status_code == 200
    text = response.content.decode("utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == [
        "conversation",
        "response",
        "responder",
        "attribute",
        "final_score",
        "provenance",
        "reason",
        "rubric_needs_change",
        "n_clinicians",
    ]
    first = next(r for r in rows if r["provenance"] == ADJUDICATED)
    assert first["conversation"] == "c0" and first["responder"] == "zz-gpt4o"
    assert (first["attribute"], float(first["final_score"])) == (attrs[0].name, 3.0)
    assert (first["reason"], first["rubric_needs_change"], first["n_clinicians"]) == (
        "rubric_gap",
        "True",
        "2",
    )
    assert {r["provenance"] for r in rows} == {ADJUDICATED, CONSENSUS, SINGLE, AWAITING}
    for name in ("dr_alfa_name", "dr_bravo_name"):
        assert name not in text
    # Neither the study's adjudicator nor an adjudicator elsewhere reads results.
    client.force_login(setup["adjudicator"])
    assert client.get(f"/analysis/studies/{study.pk}/final-scores.csv").status_code == 403


def test_the_dashboard_shows_judges_against_the_adjudicated_consensus_once_any_exists(
    setup, client
):
    study = setup["study"]
    researcher = user_make(username="dash_researcher")
    member_add(study=study, user=researcher, role=MEMBER_RESEARCHER)
    client.force_login(researcher)
    heading = "Judges against the adjudicated consensus"
    assert heading not in client.get(f"/analysis/studies/{study.pk}/").content.decode()
    adjudication_save(
        study=study,
        response_id=setup["r0"].pk,
        attribute_id=setup["attrs"][0].pk,
        score=3,
        user=setup["adjudicator"],
    )
    html = client.get(f"/analysis/studies/{study.pk}/").content.decode()
    assert heading in html
    table = html[html.index('id="adjudicated"') :]
    assert "zz-judge-name" in table  # the judge's row, not estimable on two cells


def test_the_api_gives_final_scores_and_judges_to_the_studys_researchers(setup):
    from knox.models import AuthToken
    from rest_framework.test import APIClient

    study = setup["study"]
    adjudication_save(
        study=study,
        response_id=setup["r0"].pk,
        attribute_id=setup["attrs"][0].pk,
        score=3,
        reason="other",
        user=setup["adjudicator"],
    )
    researcher = user_make(username="api_researcher")
    member_add(study=study, user=researcher, role=MEMBER_RESEARCHER)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=researcher)[1]}")
    response = client.get(f"/api/studies/{study.pk}/final-scores/")
    assert response.status_code == 200
    body = response.json()
    assert body["study"] == study.pk and body["adjudication_threshold"] == 2
    adjudicated = [row for row in body["rows"] if row["provenance"] == ADJUDICATED]
    assert [(r["responder"], r["final_score"], r["reason"]) for r in adjudicated] == [
        ("zz-gpt4o", 3.0, "other")
    ]
    assert any(row["final_score"] is None for row in body["rows"])  # awaiting: null, not NaN
    assert {row["judge"] for row in body["judges"]} == {"zz-judge-name"}
    assert "dr_alfa_name" not in response.content.decode()
    # An adjudicator of the study does not read results through the API either.
    other = APIClient()
    other.credentials(
        HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=setup['adjudicator'])[1]}"
    )
    assert other.get(f"/api/studies/{study.pk}/final-scores/").status_code == 403
