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
    for section in (
        "ja-summary", "ja-ranking", "ja-separations", "ja-planner", "ja-means",
        "spec-ppi_forest", "spec-ppi_ranking",
    ):  # fmt: skip
        assert f'id="{section}"' in html
    assert 'id="ja-levers"' not in html  # the ICC lever is a bootstrap: only when asked
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
    assert "judge-x + judge-y" in html and "every conversation with a clinician score" in html
    assert "<th>non-response</th>" in html and "Holm" in html


def test_the_stored_clinician_sample_is_the_default_design(small_study, researcher_client):
    from annotation.services.sampling import clinician_sample_draw

    sample = clinician_sample_draw(study=small_study.study, size=4, seed=8)
    html = researcher_client.get(_url(small_study.study)).content.decode()
    assert sample.describe() in html


def test_clinician_cannot_open_the_page(small_study, clinician_user):
    client = Client()
    client.force_login(clinician_user)
    assert client.get(_url(small_study.study)).status_code in (302, 403)


def test_bad_target_is_a_clear_400(small_study, researcher_client):
    response = researcher_client.get(_url(small_study.study), {"target": "-1"})
    assert response.status_code == 400
    assert "target" in response.content.decode()


def _spec(html: str, name: str) -> dict:
    return json.loads(html.split(f'id="{name}" type="application/json">')[1].split("</script>")[0])


def test_ranking_chart_and_adjacent_separations(small_study, researcher_client):
    html = researcher_client.get(
        _url(small_study.study), {"judge": ["judge-x", "judge-y"], "share": "50"}
    ).content.decode()
    values = _spec(html, "spec-ppi_ranking")["data"]["values"]
    assert len(values) == 5 * 7  # every responder × attribute, in ranked places
    by_attribute: dict[str, list[dict]] = {}
    for v in values:
        by_attribute.setdefault(v["attribute"], []).append(v)
    for rows in by_attribute.values():
        rows.sort(key=lambda v: v["place"])
        assert [v["estimate"] for v in rows] == sorted((v["estimate"] for v in rows), reverse=True)
        assert rows[-1]["separation"] == "last place"
        assert {v["separation"] for v in rows[:-1]} <= {
            "separated from next", "not separated from next"
        }  # fmt: skip
    separations = html.split('id="ja-separations"')[1].split("</section>")[0]
    assert separations.count("<tr>") == 1 + 4 * 7  # header + adjacent pairs per attribute
    assert " vs " in separations and ">yes<" in separations and ">no<" in separations


def test_icc_lever_section_when_asked(small_study, researcher_client):
    html = researcher_client.get(
        _url(small_study.study), {"judge": ["judge-y"], "lever": "on"}
    ).content.decode()
    levers = html.split('id="ja-levers"')[1].split("</section>")[0]
    assert levers.count("<li>") == 7
    assert "Safety for judge-y" in levers and "2× the responders" in levers
