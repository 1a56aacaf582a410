"""The judge-assisted page: researchers only, tables from the report, chart spec, errors."""

from __future__ import annotations

import json

import pytest
from django.test import Client


@pytest.fixture
def researcher_client(researcher) -> Client:
    client = Client()
    client.force_login(researcher)
    return client


def _url(study) -> str:
    return f"/analysis/studies/{study.pk}/judge-assisted/"


def test_researcher_sees_forest_ranking_and_planner(small_study, researcher_client):
    response = researcher_client.get(_url(small_study.study), {"judge": "judge-y", "share": "50"})
    assert response.status_code == 200
    html = response.content.decode()
    for section in ("ja-summary", "ja-ranking", "ja-planner", "ja-means", "spec-ppi_forest"):
        assert f'id="{section}"' in html
    assert "<script>" not in html  # charts are drawn by a static file (CSP without inline code)
    spec = json.loads(
        html.split('id="spec-ppi_forest" type="application/json">')[1].split("</script>")[0]
    )
    methods = {v["method"] for v in spec["data"]["values"]}
    assert methods == {"clinician only", "judge-assisted"}
    assert len(spec["data"]["values"]) == 2 * 5 * 7
    assert "a random 50% of the conversations" in html


def test_every_judge_and_all_rated_conversations_by_default(small_study, researcher_client):
    html = researcher_client.get(_url(small_study.study)).content.decode()
    assert "judge-x + judge-y" in html and "every clinician-rated conversation" in html


def test_clinician_cannot_open_the_page(small_study, clinician_user):
    client = Client()
    client.force_login(clinician_user)
    assert client.get(_url(small_study.study)).status_code in (302, 403)


def test_bad_target_is_a_clear_400(small_study, researcher_client):
    response = researcher_client.get(_url(small_study.study), {"target": "-1"})
    assert response.status_code == 400
    assert "target" in response.content.decode()
