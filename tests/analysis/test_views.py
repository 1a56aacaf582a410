"""Dashboards and downloads: researchers and admins in, clinicians out, queries bounded."""

from __future__ import annotations

import csv
import io
import re
from html import escape

import pytest
from django.urls import reverse

from analysis.models import ExportLog
from analysis.stats import ATTRIBUTES as ATTRIBUTES_IN_RUBRIC_ORDER
from annotation.rater_codes import rater_codes_assign

# Filters, exports and saves must work on every supported database: bin/test runs these on
# SQLite as well.
pytestmark = pytest.mark.portable


@pytest.fixture
def urls(small_study):
    pk = small_study.study.pk
    return {
        "list": reverse("analysis:study_list"),
        "dashboard": reverse("analysis:dashboard", args=[pk]),
        "table": reverse("analysis:table_csv", args=[pk, "reliability"]),
        "ratings": reverse("analysis:ratings_csv", args=[pk]),
    }


@pytest.mark.parametrize("name", ["list", "dashboard", "table", "ratings"])
def test_clinician_is_forbidden_everywhere(client, clinician_user, urls, name):
    client.force_login(clinician_user)
    assert client.get(urls[name]).status_code == 403


def test_anonymous_is_sent_to_login(client, urls):
    response = client.get(urls["dashboard"])
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_study_list_names_each_study_with_its_conversations(client, researcher, urls, small_study):
    client.force_login(researcher)
    html = client.get(urls["list"]).content.decode()
    n = small_study.study.conversations.count()
    assert small_study.study.name in html and f"<td>{n}</td>" in html


def test_researcher_sees_the_dashboard_with_charts_and_tables(client, researcher, urls):
    client.force_login(researcher)
    response = client.get(urls["dashboard"])
    assert response.status_code == 200
    html = response.content.decode()
    for chart in ("icc_heatmap", "width_heatmap", "forest", "bias", "figure4"):
        assert f'id="spec-{chart}"' in html
    assert "vendor/vega-embed.min.js" in html and "cdn" not in html.lower()
    assert "Verdict per attribute" in html
    # A table of contents links every section; each link has its target on the page.
    toc = html.split('aria-label="Sections of this report">')[1].split("</nav>")[0]
    targets = re.findall(r'href="#([\w-]+)"', toc)
    assert {"coverage", "verdicts", "chart-forest", "table-reliability"} <= set(targets)
    assert all(f'id="{t}"' in html for t in targets)
    # Verdicts list the attributes in rubric order, as every other table does.
    verdicts = html.split('id="verdicts"')[1].split("</table>")[0]
    shown = re.findall(r"<strong>([^<]+)</strong>", verdicts)
    assert shown == [a for a in ATTRIBUTES_IN_RUBRIC_ORDER if a in shown] and len(shown) > 1
    assert "judge-x" in html and "Download CSV" in html
    # The small study has response texts, so ROUGE-L is shown.
    assert "Correlation of ROUGE-L" in html


def test_admin_sees_the_dashboard(client, staff_user, urls):
    client.force_login(staff_user)
    assert client.get(urls["dashboard"]).status_code == 200


def test_htmx_filter_returns_only_the_report_partial(client, researcher, urls):
    client.force_login(researcher)
    response = client.get(
        urls["dashboard"], {"source": "B", "judge": ["judge-y"]}, HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html and "Coverage" in html
    assert "judge-x" not in html.split("Agreement among clinicians")[0]


def test_condition_filter_shows_that_subset(client, researcher, urls):
    client.force_login(researcher)
    response = client.get(urls["dashboard"], {"condition": "depression"})
    assert response.status_code == 200
    coverage = response.context["report"].coverage
    assert coverage["conversations"] == 4
    rows = list(
        csv.DictReader(
            io.StringIO(client.get(urls["table"], {"condition": "depression"}).content.decode())
        )
    )
    assert len(rows) == 14


@pytest.mark.parametrize("htmx", [False, True])
def test_refused_filter_shows_an_error_and_no_numbers(client, researcher, urls, htmx):
    client.force_login(researcher)
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = client.get(urls["dashboard"], {"condition": "no-such-label"}, **headers)
    html = response.content.decode()
    assert response.status_code == 400
    assert "No report for this filter" in html and "no-such-label" in html
    assert "Coverage" not in html and "judge-x" not in html.split("filter-error")[-1]
    assert ("<html" in html) is not htmx


def test_refused_filter_exports_nothing(client, researcher, urls):
    client.force_login(researcher)
    response = client.get(urls["table"], {"source": "Z"})
    assert response.status_code == 400
    assert response.content.decode().startswith("Not exported: Source:")
    assert not ExportLog.objects.exists()


def test_cached_dashboard_runs_few_queries(client, researcher, urls, django_assert_max_num_queries):
    client.force_login(researcher)
    client.get(urls["dashboard"])  # computes and caches the report
    # 15: one is the second factor's gate asking whether the account has an authenticator, one
    # whether the study has imported cells the "as published" switch could read differently,
    # one whether any response is adjudicated (the judges against the adjudicated consensus).
    with django_assert_max_num_queries(15):
        assert client.get(urls["dashboard"]).status_code == 200


def test_table_csv_download_is_logged(client, researcher, urls):
    client.force_login(researcher)
    response = client.get(urls["table"])
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {r["judge"] for r in rows} == {"judge-x", "judge-y"} and len(rows) == 14
    log = ExportLog.objects.get()
    assert (log.user, log.what, log.rows, log.channel) == (
        researcher,
        "table:reliability",
        14,
        "web",
    )


def test_ratings_download_streams_and_is_logged(client, researcher, urls, small_study):
    client.force_login(researcher)
    response = client.get(urls["ratings"])
    assert response.streaming
    body = b"".join(response.streaming_content).decode()
    assert body.count("\n") == small_study.n_complete_scores + 1
    log = ExportLog.objects.get()
    assert (log.user, log.what, log.rows) == (
        researcher,
        "ratings-long",
        small_study.n_complete_scores,
    )
    wide = client.get(urls["ratings"], {"layout": "wide"})
    assert b"".join(wide.streaming_content).decode().startswith("study,conversation,source")


def test_study_without_texts_says_rouge_is_not_available(client, researcher, small_study):
    from annotation.models import Response

    Response.objects.filter(conversation__study=small_study.study).update(text="")
    client.force_login(researcher)
    html = client.get(reverse("analysis:dashboard", args=[small_study.study.pk])).content.decode()
    assert "Not available: this study has no response texts." in html


def test_the_as_published_switch_is_offered_only_where_it_can_change_a_number(
    client, researcher, urls, small_study
):
    from annotation.models import Rater, Rating

    client.force_login(researcher)
    # Rated on the platform: nothing was imported, so nothing reads differently as published.
    html = client.get(urls["dashboard"]).content.decode()
    assert 'id="id_as_published"' not in html
    # ...and the parameter in an address changes nothing instead of being refused.
    assert client.get(urls["dashboard"] + "?as_published=on").status_code == 200
    # An imported cell outside the 1-5 scale (the release's 0/6) is read as a score as
    # published: now the switch is offered.
    rating = Rating.objects.filter(
        response__conversation__study=small_study.study, rater=small_study.clinicians[0]
    ).first()
    imported = Rater.objects.create(name="imported-dr", kind=Rater.Kind.CLINICIAN)
    Rating.objects.create(
        rater=imported,
        response=rating.response,
        status=Rating.Status.INVALID,
        source=Rating.Source.IMPORT,
        raw_output="{}",
    )
    rater_codes_assign(study_id=small_study.study.pk, rater_ids=[imported.pk])  # as imports do
    html = client.get(urls["dashboard"]).content.decode()
    assert 'id="id_as_published"' in html


def test_every_method_the_dashboard_names_is_explained_on_it(client, researcher, urls):
    from analysis.views import TERMS

    client.force_login(researcher)
    html = client.get(urls["dashboard"]).content.decode()
    terms = html.split('id="terms"')[1]
    for term in TERMS:
        assert f'id="term-{term.slug}"' in terms and escape(term.text) in terms
    # Each link to a term has its explanation on the page.
    linked = set(re.findall(r'href="#term-([\w-]+)"', html))
    assert {"icc", "ci", "calibration", "rouge", "alt-test", "agreement"} <= linked
    assert all(f'id="term-{slug}"' in html for slug in linked)
    # The interval says how often it holds, as simulated (docs/analysis.md), not only 95 %.
    ci = terms.split('id="term-ci"')[1].split("</dd>")[0]
    assert "holds about 9 times in" in ci and "not as 19 in 20" in ci
    # The details are folded under their titles (the answer table says the same in words);
    # the answer and the coverage are not.
    for folded in ("table-reliability", "verdicts", "terms"):
        assert f'<details class="card table-fold" id="{folded}">' in html
    assert '<section class="card" id="answer">' in html
    assert '<section class="card" id="coverage">' in html
