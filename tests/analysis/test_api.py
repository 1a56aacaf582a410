"""The read-only API: token auth, researchers only, ratings with scores, reports, schema."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import call_command
from knox.models import AuthToken
from rest_framework.test import APIClient

from analysis.models import ExportLog
from annotation.models import RaterCode, Study

# Filters, exports and saves must work on every supported database: bin/test runs these on
# SQLite as well.
pytestmark = pytest.mark.portable


@pytest.fixture
def api(researcher) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=researcher)[1]}")
    return client


def test_anonymous_gets_401(small_study):
    response = APIClient().get("/api/studies/")
    assert response.status_code == 401


def test_clinician_token_gets_403(small_study, clinician_user):
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=clinician_user)[1]}"
    )
    assert client.get("/api/studies/").status_code == 403
    assert client.get("/api/ratings/").status_code == 403


def test_researcher_lists_studies_with_a_token(api, small_study):
    body = api.get("/api/studies/").json()
    # Every study is listed; the session-wide MentalAlign import is one more once a test used it.
    assert body["count"] == Study.objects.count() >= 1
    (study,) = [s for s in body["results"] if s["id"] == small_study.study.pk]
    assert study["name"] == "Small study" and study["n_conversations"] == 9
    assert study["attributes"][:2] == ["Guidance", "Informativeness"]


def test_ratings_are_paginated_with_scores_in_few_queries(
    api, small_study, django_assert_max_num_queries
):
    pk = small_study.study.pk
    dr_b = RaterCode.objects.get(study_id=pk, rater=small_study.clinicians[1]).code
    with django_assert_max_num_queries(8):
        body = api.get("/api/ratings/", {"study": pk, "rater": dr_b, "limit": 5}).json()
    assert body["count"] == 4 * 5  # dr_b rated 4 conversations × 5 responses
    assert len(body["results"]) == 5 and body["next"]
    rating = body["results"][0]
    assert rating["rater"] == dr_b and rating["rater_kind"] == "clinician"
    assert set(rating["scores"]) == set(
        small_study.study.rubric.attributes.values_list("name", flat=True)
    )


def test_reliability_report_with_query_parameters(api, small_study):
    pk = small_study.study.pk
    body = api.get(
        f"/api/studies/{pk}/reports/reliability/", {"bootstrap": 100, "judge": "judge-x"}
    ).json()
    assert body["table"] == "reliability" and len(body["rows"]) == 7
    row = body["rows"][0]
    assert row["judge"] == "judge-x" and row["n_models"] == 4  # m1 excluded
    assert {"icc_c1", "ci_low", "ci_high", "status", "bias", "mse", "verdict"} <= set(row)
    assert api.get(f"/api/studies/{pk}/reports/nope/").status_code == 404
    assert api.get(f"/api/studies/{pk}/reports/reliability/", {"bootstrap": "x"}).status_code == 400


def test_readme_condition_and_judge_example_is_filtered(api, small_study):
    url = f"/api/studies/{small_study.study.pk}/reports/reliability/"
    response = api.get(url, {"condition": "depression", "judge": "judge-x", "bootstrap": 50})
    assert response.status_code == 200
    rows = response.json()["rows"]
    assert {r["judge"] for r in rows} == {"judge-x"} and len(rows) == 7
    everything = api.get(url, {"judge": "judge-x", "bootstrap": 50}).json()["rows"]
    # Half the conversations carry "depression": the filtered rows rest on fewer pairs.
    assert rows[0]["n_pairs"] < everything[0]["n_pairs"]


def test_export_through_the_api_is_logged(api, small_study, researcher):
    response = api.get(f"/api/studies/{small_study.study.pk}/export/")
    body = b"".join(response.streaming_content).decode()
    assert body.count("\n") == small_study.n_complete_scores + 1
    log = ExportLog.objects.get()
    assert (log.user, log.channel, log.rows) == (researcher, "api", small_study.n_complete_scores)


def test_openapi_schema_is_served_and_valid(db):
    response = APIClient().get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert "/api/studies/{id}/reports/{table}/" in schema["paths"]
    assert "/api/ratings/" in schema["paths"]
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out, stderr=out)


def _stamp(api, study) -> str:
    return api.get(f"/api/studies/{study.pk}/reports/reliability/", {"bootstrap": 10}).json()[
        "ratings_version"
    ]


def test_the_version_stamp_ignores_drafts_and_says_only_the_day(api, small_study):
    from django.utils import timezone

    from annotation.models import Rating

    study = small_study.study
    before = _stamp(api, study)
    complete = Rating.objects.filter(response__conversation__study=study, status="complete")
    assert before == f"{complete.count()}:{timezone.localdate().isoformat()}"
    # A clinician's autosave touches a draft: researchers must not see that anyone is working.
    draft = Rating.objects.filter(response__conversation__study=study, status="draft").get()
    draft.rationale = "still thinking"
    draft.save()
    assert _stamp(api, study) == before
    # Submitting is what researchers may see (as a count, dated to the day).
    draft.status = "complete"
    draft.save()
    after = _stamp(api, study)
    assert after != before and after.split(":")[0] == str(int(before.split(":")[0]) + 1)
