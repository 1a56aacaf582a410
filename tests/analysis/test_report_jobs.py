"""A report with more bootstrap resamples than the default is computed by a background job,
never in the web request: the dashboard and the API start it (the same request again is the
same job; one person's jobs at once are limited), and once it is done the same address answers
the report from the cache the job filled."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.core.cache import cache
from django.core.files.storage import default_storage
from django.urls import reverse
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from analysis import selectors
from analysis.jobs.services import job_execute
from analysis.models import Job
from analysis.selectors import Filters, ReportParams, study_report


@pytest.fixture
def builds(monkeypatch):
    """The n_boot of every report computed (cache misses), wherever it was asked for."""
    calls: list[int] = []
    real = selectors.study_report_build

    def counted(**kwargs):
        calls.append(kwargs["params"].n_boot)
        return real(**kwargs)

    monkeypatch.setattr(selectors, "study_report_build", counted)
    cache.clear()
    return calls


@pytest.fixture
def api(researcher) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=researcher)[1]}")
    return client


def test_the_dashboard_leaves_5000_resamples_to_a_job_and_shows_its_report_once_done(
    client, researcher, small_study, builds, settings
):
    settings.JOBS_MAX_ACTIVE_PER_USER = 10
    client.force_login(researcher)
    url = reverse("analysis:dashboard", args=[small_study.study.pk])
    first = client.get(url, {"bootstrap": 5000})
    assert first.status_code == 202
    assert builds == []  # nothing computed in the request
    job = Job.objects.get()
    assert (job.kind, job.state, job.study_id) == ("report", "queued", small_study.study.pk)
    assert job.params["report"]["n_boot"] == 5000
    html = first.content.decode()
    assert 'id="report-pending"' in html and reverse("analysis:job", args=[job.pk]) in html
    assert 'hx-trigger="every 2s"' in html and f'"X-Report-Job": "{job.pk}"' in html
    assert "5,000 bootstrap resamples: computed in the background" in html
    assert "Coverage" not in html  # no report's numbers under the 5,000 asked for
    # The same request again: the same job. The poll names it and starts none.
    again = client.get(url, {"bootstrap": 5000})
    assert again.status_code == 202 and Job.objects.count() == 1
    poll = client.get(
        url, {"bootstrap": 5000}, HTTP_HX_REQUEST="true", HTTP_X_REPORT_JOB=str(job.pk)
    )
    assert poll.status_code == 202 and 'id="report-pending"' in poll.content.decode()
    assert "<html" not in poll.content.decode()
    # The CSV links under the same parameters lead to the job, whose result holds the tables.
    csv = client.get(
        reverse("analysis:table_csv", args=[small_study.study.pk, "reliability"]),
        {"bootstrap": 5000},
    )
    assert csv.status_code == 302 and csv["Location"] == reverse("analysis:job", args=[job.pk])
    assert builds == [] and Job.objects.count() == 1

    job_execute(job_id=str(job.pk))
    job.refresh_from_db()
    assert job.state == Job.State.DONE and job.fraction == 1.0, job.error
    assert builds == [5000]
    with default_storage.open(job.result_file.name, "rb") as f:
        names = zipfile.ZipFile(io.BytesIO(f.read())).namelist()
    assert any(n.endswith("-reliability.csv") for n in names)
    assert any(n.endswith("-answer.csv") for n in names)
    assert job.result["n_boot"] == 5000 and job.result["reliability"]

    # The same address now answers the report, from the cache the job filled.
    done = client.get(url, {"bootstrap": 5000})
    assert done.status_code == 200 and "Coverage" in done.content.decode()
    polled = client.get(
        url, {"bootstrap": 5000}, HTTP_HX_REQUEST="true", HTTP_X_REPORT_JOB=str(job.pk)
    )
    assert polled.status_code == 200 and 'id="report-pending"' not in polled.content.decode()
    csv = client.get(
        reverse("analysis:table_csv", args=[small_study.study.pk, "reliability"]),
        {"bootstrap": 5000},
    )
    assert csv.status_code == 200 and csv["Content-Type"].startswith("text/csv")
    assert builds == [5000]
    # The job's page has the summary and the way back to the dashboard.
    page = client.get(reverse("analysis:job", args=[job.pk])).content.decode()
    assert 'id="report-result"' in page and 'id="report-dashboard"' in page
    assert "bootstrap=5000" in page
    # The default and fewer resamples are computed in the request, as before.
    assert client.get(url).status_code == 200
    assert client.get(url, {"bootstrap": 200}).status_code == 200
    assert builds == [5000, 1000, 200] and Job.objects.count() == 1


def test_a_done_job_whose_report_left_the_cache_is_replaced(
    client, researcher, small_study, builds, settings
):
    settings.JOBS_MAX_ACTIVE_PER_USER = 10
    client.force_login(researcher)
    url = reverse("analysis:dashboard", args=[small_study.study.pk])
    client.get(url, {"bootstrap": 5000})
    first = Job.objects.get()
    job_execute(job_id=str(first.pk))
    cache.clear()
    assert client.get(url, {"bootstrap": 5000}).status_code == 202
    assert Job.objects.count() == 2
    first.refresh_from_db()
    assert first.expires_at <= timezone.now()


def test_the_limit_of_jobs_at_once_is_said_in_words(
    client, researcher, small_study, builds, settings
):
    settings.JOBS_MAX_ACTIVE_PER_USER = 1
    client.force_login(researcher)
    url = reverse("analysis:dashboard", args=[small_study.study.pk])
    assert client.get(url, {"bootstrap": 5000}).status_code == 202
    refused = client.get(url, {"bootstrap": 5000, "seed": 1})
    assert refused.status_code == 429
    html = refused.content.decode()
    assert 'id="report-refused"' in html and "the most one person may have at once (1)" in html
    assert Job.objects.count() == 1 and builds == []


def test_a_job_of_another_person_cannot_be_followed(client, researcher, small_study, builds):
    from accounts.roles import RESEARCHER
    from tests.factories import user_make

    client.force_login(researcher)
    url = reverse("analysis:dashboard", args=[small_study.study.pk])
    client.get(url, {"bootstrap": 5000})
    job = Job.objects.get()
    other = user_make(username="ruth", password="pw-ruth-long-1", role=RESEARCHER)
    client.force_login(other)
    poll = client.get(url, {"bootstrap": 5000}, HTTP_X_REPORT_JOB=str(job.pk))
    assert poll.status_code == 404


def test_the_api_answers_202_with_the_job_then_the_report(
    api, researcher, small_study, builds, settings
):
    settings.JOBS_MAX_ACTIVE_PER_USER = 1
    url = f"/api/studies/{small_study.study.pk}/reports/reliability/"
    first = api.get(url, {"bootstrap": 5000})
    assert first.status_code == 202, first.content
    body = first.json()
    job = Job.objects.get()
    assert body["job"]["id"] == str(job.pk) and body["job"]["kind"] == "report"
    assert body["job"]["url"].endswith(f"/api/jobs/{job.pk}/")
    assert "background job" in body["detail"]
    assert job.params["channel"] == "api"
    assert api.get(url, {"bootstrap": 5000}).json()["job"]["id"] == str(job.pk)
    refused = api.get(url, {"bootstrap": 5000, "seed": 3})
    assert refused.status_code == 429 and "at once" in refused.json()["detail"]
    assert refused["Retry-After"]
    assert builds == [] and Job.objects.count() == 1

    job_execute(job_id=str(job.pk))
    done = api.get(url, {"bootstrap": 5000})
    assert done.status_code == 200 and done.json()["rows"]
    assert api.get(f"/api/jobs/{job.pk}/").json()["state"] == "done"
    # The default is computed in the request, as before.
    assert api.get(url).status_code == 200
    assert builds == [5000, 1000]


def test_the_report_tells_its_progress(small_study):
    cache.clear()
    seen: list[tuple[float, str]] = []
    study_report(
        study=small_study.study,
        filters=Filters(),
        params=ReportParams(n_boot=50),
        progress=lambda fraction, message: seen.append((fraction, message)),
    )
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] >= 0.9
    boot = [f for f, m in seen if m.startswith("bootstrapping (")]
    assert len(boot) > 2  # the bar moves while the bootstrap runs, pair by pair
