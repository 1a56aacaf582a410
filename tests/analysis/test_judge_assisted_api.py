"""GET /api/studies/<id>/judge-assisted/: researchers only, the command's numbers, clear errors."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from django.core.management import call_command
from knox.models import AuthToken
from rest_framework.test import APIClient


def _client(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=user)[1]}")
    return client


def _url(study) -> str:
    return f"/api/studies/{study.pk}/judge-assisted/"


def test_researcher_gets_means_differences_ranking_and_planner(small_study, researcher):
    response = _client(researcher).get(
        _url(small_study.study), {"judge": ["judge-x", "judge-y"], "target": "0.2"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    out = io.StringIO()
    call_command(
        "judge_assisted", "--study", small_study.study.name, "--judge", "judge-x",
        "--judge", "judge-y", "--format", "csv", stdout=out,
    )  # fmt: skip
    csv = pd.read_csv(io.StringIO(out.getvalue()))
    means = pd.DataFrame(body["means"])
    assert len(means) == len(csv) == 35
    pd.testing.assert_series_equal(means["ci_low"], csv["ci_low"], check_exact=True)
    assert len(body["differences"]) == 10 * 7 and len(body["ranking"]) == 35
    assert {row["target_half_width"] for row in body["planner"]} == {0.2}
    assert body["ranking"][-1]["separated_from_next"] is None
    # Adjacent places: 4 pairs per attribute, the flag as in the ranking; the separation
    # planner for every pair; no ICC lever unless asked (a bootstrap).
    adjacent = pd.DataFrame(body["adjacent_separations"])
    assert len(adjacent) == 4 * 7 and len(body["separation_planner"]) == 10 * 7
    ranking = pd.DataFrame(body["ranking"]).dropna(subset=["separated_from_next"])
    merged = adjacent.merge(ranking, on=["attribute", "place", "responder"])
    assert len(merged) == len(adjacent)
    assert (merged["separated"] == merged["separated_from_next"]).all()
    assert body["icc_levers"] is None
    # The design is on the answer and on every row of the means and differences.
    assert body["design"].startswith("every conversation with a clinician score")
    assert {row["design"] for row in body["means"] + body["differences"]} == {body["design"]}
    assert "reason" in body["planner"][0] and "reason" in body["separation_planner"][0]


def test_icc_lever_on_request(small_study, researcher):
    body = (
        _client(researcher).get(_url(small_study.study), {"judge": "judge-y", "lever": "1"}).json()
    )
    levers = pd.DataFrame(body["icc_levers"])
    assert len(levers) == 7 and levers["verdict"].str.contains(" for judge-y: ").all()
    assert (levers["width_more_responders"] < levers["width_now"]).all()


def test_clinician_gets_403_and_anonymous_401(small_study, clinician_user):
    assert (
        _client(clinician_user).get(_url(small_study.study), {"judge": "judge-y"}).status_code
        == 403
    )
    assert _client().get(_url(small_study.study), {"judge": "judge-y"}).status_code == 401


@pytest.mark.parametrize(
    ("params", "errors"),
    [
        ({}, {"judge": ["give at least one judge (?judge=NAME)"]}),
        ({"judge": "judge-y", "alpha": "2"}, {"alpha": ["must be at most 0.5"]}),
        ({"judge": "judge-y", "alpha": "0"}, {"alpha": ["must be at least 0.001"]}),
        ({"judge": "judge-y", "alpha": "x"}, {"alpha": ["must be a number, got 'x'"]}),
        ({"judge": "judge-y", "alpha": "nan"}, {"alpha": ["must be a number, got 'nan'"]}),
        ({"judge": "judge-y", "target": "-1"}, {"target": ["must be at least 0.001"]}),
        (
            {"judge": "judge-y", "lever": "maybe"},
            {"lever": ["must be true or false (1 or 0), got 'maybe'"]},
        ),
        (
            {"judge": "judge-y", "alpha": ["0.05", "0.1"]},
            {"alpha": ["give it once (given 2 times)"]},
        ),
    ],
)
def test_bad_parameters_are_400_with_a_clear_message(small_study, researcher, params, errors):
    response = _client(researcher).get(_url(small_study.study), params)
    assert response.status_code == 400
    assert response.json() == errors


def test_a_judge_the_study_does_not_have_is_404(small_study, researcher):
    # In bounds, so not a bad request: there is no such report (the schema's 404).
    response = _client(researcher).get(_url(small_study.study), {"judge": "judge-z"})
    assert response.status_code == 404
    assert "no judge named 'judge-z'" in response.json()["detail"]


def test_unknown_study_is_404(db, researcher):
    assert (
        _client(researcher).get("/api/studies/999999/judge-assisted/", {"judge": "j"}).status_code
        == 404
    )
