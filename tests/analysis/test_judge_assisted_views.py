"""The judge-assisted page: researchers only, tables from the report, chart spec, errors."""

from __future__ import annotations

import json
import re

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
    assert "a seeded random 50 % (4) of every conversation with a clinician score" in html


def test_every_judge_and_all_rated_conversations_by_default(small_study, researcher_client):
    html = researcher_client.get(_url(small_study.study)).content.decode()
    assert "judge-x + judge-y" in html and "every conversation with a clinician score" in html
    assert "<th>non-response</th>" in html and "Holm" in html


def test_the_stored_clinician_sample_is_the_default_design(small_study, researcher_client):
    from annotation.services.sampling import clinician_sample_draw

    sample = clinician_sample_draw(study=small_study.study, size=4, seed=8)
    html = researcher_client.get(_url(small_study.study)).content.decode()
    assert sample.describe() in html


def test_a_smaller_share_is_drawn_from_the_stored_sample(small_study, researcher_client):
    """'A random 50 % of the design' is half of the stored clinician sample, not half of every
    rated conversation, and says so."""
    from analysis.judge_assisted.selectors import labelled_share
    from annotation.services.sampling import clinician_sample_draw

    sample = clinician_sample_draw(study=small_study.study, size=6, seed=8)
    html = researcher_client.get(_url(small_study.study), {"share": "50"}).content.decode()
    assert f"a seeded random 50 % (3) of {sample.describe()}" in html
    picked, _ = labelled_share(study=small_study.study, share=50)
    drawn = set(sample.conversations.values_list("external_id", flat=True))
    assert picked is not None and len(picked) == 3 and picked <= drawn


def test_the_page_says_in_one_sentence_whether_the_judges_are_worth_it(
    small_study, researcher_client
):
    from analysis.judge_assisted.estimator import savings_summary
    from analysis.judge_assisted.selectors import judge_assisted_report, labelled_share

    html = researcher_client.get(_url(small_study.study), {"share": "50"}).content.decode()
    labelled, _ = labelled_share(study=small_study.study, share=50)
    report = judge_assisted_report(
        study=small_study.study, judges=["judge-x", "judge-y"], labelled=labelled
    )
    sentence = savings_summary(report.means)
    assert sentence.startswith("On this study the judges would save ")
    assert f'<p id="ja-savings"><strong>{sentence}</strong></p>' in html.replace("&#x27;", "'")


@pytest.mark.parametrize(
    ("saved", "expected"),
    [
        ([0.01, 0.02, float("nan"), 0.03], "save 2 % of clinician ratings at equal interval "
         "width (median over 3 cells): rate with clinicians alone."),
        ([-0.2, -0.1, 0.0], "save 0 % of clinician ratings at equal interval width (median "
         "over 3 cells): rate with clinicians alone."),
        ([0.3, 0.5, 0.4], "save 40 % of clinician ratings at equal interval width (median over "
         "3 cells): judge-assisted estimates are worth using."),
        ([float("nan")], "No cell has an estimate yet"),
    ],
)  # fmt: skip
def test_the_savings_sentence_follows_the_median_saving(saved, expected):
    import pandas as pd

    from analysis.judge_assisted.estimator import savings_summary

    assert expected in savings_summary(pd.DataFrame({"ratings_saved": saved}))


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
    # Eight conversations, four labelled: the bounded intervals separate no adjacent places.
    assert " vs " in separations and ">no<" in separations


def test_icc_lever_section_when_asked(small_study, researcher_client):
    html = researcher_client.get(
        _url(small_study.study), {"judge": ["judge-y"], "lever": "on"}
    ).content.decode()
    levers = html.split('id="ja-levers"')[1].split("</section>")[0]
    assert levers.count("<li>") == 7
    assert "Safety for judge-y" in levers and "2× the responders" in levers


def _section_rows(html: str, section: str) -> list[list[str]]:
    body = html.split(f'id="{section}"')[1].split("</section>")[0].split("<tbody>")[1]
    return [re.findall(r"<td>(.*?)</td>", row) for row in body.split("</tr>") if "<td>" in row]


def test_apply_through_htmx_answers_the_results_only_and_says_it_is_working(
    small_study, researcher_client
):
    page = researcher_client.get(_url(small_study.study)).content.decode()
    form = page.split('<form class="card"')[1].split("</form>")[0]
    assert 'hx-get="' in form and 'hx-target="#report"' in form
    # The busy sign (static/js/busy.js) for the report the form fills: a status, hidden at first.
    sign = re.search(r'<p class="busy-sign"[^>]*data-busy-sign="report"[^>]*>(.+?)</p>', page)
    assert sign and 'role="status"' in sign.group(0) and " hidden>" in sign.group(0)
    assert "Computing" in sign.group(1) and "js/busy.js" in page
    # The lever's checkbox sits inside its label, on one line with its words.
    assert re.search(r'<label><input type="checkbox" name="lever"[^>]*> Which lever', form)
    assert "about a second" not in page  # the lever's bootstrap takes seconds the first time
    partial = researcher_client.get(
        _url(small_study.study), {"share": "50"}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "<form" not in partial and "<html" not in partial
    assert 'id="ja-summary"' in partial and 'id="spec-ppi_forest"' in partial


def test_counts_are_shown_as_integers(small_study, researcher_client):
    html = researcher_client.get(
        _url(small_study.study), {"share": "50", "target": "0.05"}
    ).content.decode()
    planner_rows = _section_rows(html, "ja-planner")
    assert planner_rows
    for row in planner_rows:  # labelled, more clinician-only, more with judges
        assert all(row[i].isdigit() for i in (2, 5, 6)), row
    assert any(int(row[5]) > 0 for row in planner_rows)
    for row in _section_rows(html, "ja-separations"):  # place, labelled, more × 2
        assert all(v.isdigit() or v == "" for v in (row[1], row[7], row[8], row[9])), row
    for row in _section_rows(html, "ja-means"):  # labelled, unlabelled
        assert row[2].isdigit() and row[3].isdigit(), row


def test_a_new_target_replans_from_the_cached_estimates(small_study, researcher_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from analysis import planner
    from analysis.judge_assisted.selectors import judge_assisted_report, labelled_share

    url, study = _url(small_study.study), small_study.study
    with CaptureQueriesContext(connection) as first:
        researcher_client.get(url, {"share": "50", "target": "0.2"})
    with CaptureQueriesContext(connection) as second:
        html = researcher_client.get(url, {"share": "50", "target": "0.05"}).content.decode()
    # The second Apply reads no scores: the estimates come from the cache.
    assert len(second) < len(first) - 3
    assert "for a half-width of 0.05" in html
    fresh = judge_assisted_report(
        study=study, judges=["judge-x", "judge-y"],
        labelled=labelled_share(study=study, share=50)[0], target_half_width=0.05,
    )  # fmt: skip
    expected = fresh.planner[["more_clinician_only", "more_judge_assisted"]]
    shown = [[int(row[5]), int(row[6])] for row in _section_rows(html, "ja-planner")]
    assert shown == expected.astype(int).to_numpy().tolist()
    assert planner.planner_table(fresh.means, target_half_width=0.05).equals(fresh.planner)


def test_a_changed_rating_is_not_answered_from_the_cache(small_study, researcher_client):
    from annotation.models import Rating

    url = _url(small_study.study)
    before = _section_rows(researcher_client.get(url).content.decode(), "ja-means")
    rating = Rating.objects.filter(rater=small_study.clinicians[0], status="complete").first()
    rating.scores.update(value=1)
    rating.save(update_fields=["updated_at"])  # as the rating services do on an edit
    after = _section_rows(researcher_client.get(url).content.decode(), "ja-means")
    assert after != before


def test_a_renamed_judge_is_shown_by_its_new_name(small_study, researcher_client):
    """The judges' names are cached with the study's version, which a rename changes although
    no rating does; the old name is neither offered nor shown."""
    from annotation.models import Rater

    url = _url(small_study.study)
    assert "judge-y" in researcher_client.get(url).content.decode()
    Rater.objects.filter(name="judge-y").update(name="judge-renamed")
    html = researcher_client.get(url).content.decode()
    assert "judge-renamed" in html and "judge-y" not in html


def test_lever_table_shows_the_responder_scenario_with_its_range(small_study, researcher_client):
    html = researcher_client.get(
        _url(small_study.study), {"judge": ["judge-y"], "lever": "on"}
    ).content.decode()
    rows = _section_rows(html, "ja-levers")
    assert len(rows) == 7
    for row in rows:  # 5 responders: projected, with its range
        assert row[2] == "5"
        assert re.fullmatch(r"\d\.\d\d \(\d\.\d\d–\d\.\d\d\)", row[5]), row
        assert float(row[6]) >= 0  # the conversation share, as measured


def test_a_study_with_nothing_to_estimate_says_so_and_ranks_nothing(researcher_client, db):
    """One conversation rated by one clinician and a judge: no cell has the two rated responses
    an estimate needs. The page says so instead of drawing empty charts, and the ranking gives
    no place (it once numbered ten blank estimates 1–10 alphabetically)."""
    from annotation.models import Rater, Rating, Response, Score
    from annotation.rater_codes import rater_codes_assign
    from tests.factories import clinician_make, study_make

    study = study_make(
        name="Nothing yet", conversations=1, responders=["gpt4o", "claude", "original"]
    )
    clinician = clinician_make(username="lone-clin")
    rater_codes_assign(study_id=study.pk, rater_ids=[clinician.pk])  # joins the study
    judge = Rater.objects.create(kind=Rater.Kind.JUDGE, name="lone-judge")
    attributes = list(study.rubric.attributes.order_by("position"))
    for response in Response.objects.filter(conversation__study=study):
        for rater, source in ((clinician, "form"), (judge, "judge")):
            rating = Rating.objects.create(
                rater=rater, response=response, status="complete", source=source
            )
            Score.objects.bulk_create(
                Score(rating=rating, attribute=a, value=4) for a in attributes
            )
    html = researcher_client.get(_url(study)).content.decode()
    assert 'id="ja-nothing"' in html and "Nothing to estimate yet" in html
    assert 'id="spec-ppi_forest"' not in html
    assert "not estimable: 1 clinician-rated response" in html
    # The planner has nothing to plan from either, and says why on every row (it showed
    # blank counts).
    planner_rows = html.split('id="ja-planner"')[1].split("</tbody>")[0].split("<tr>")[2:]
    assert len(planner_rows) == 3 * 7
    assert all("not estimable: 1 clinician-rated response" in row for row in planner_rows)
    from analysis.judge_assisted.selectors import judge_assisted_report

    report = judge_assisted_report(study=study, judges=["lone-judge"])
    assert report.ranking["place"].isna().all()
    assert report.ranking["reason"].str.startswith("not estimable").all()


def test_judge_names_with_spaces_make_no_cache_key_warning(small_study, researcher_client):
    """Judges' names went into the cache keys as they are: a name with a space made Django warn
    (CacheKeyWarning: memcached refuses such keys) on every Apply."""
    import warnings

    from annotation.models import Rater

    Rater.objects.filter(name="judge-y").update(name="judge y with spaces")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        response = researcher_client.get(_url(small_study.study), {"judge": "judge y with spaces"})
    assert response.status_code == 200
    assert not [w for w in caught if w.category.__name__ == "CacheKeyWarning"]
