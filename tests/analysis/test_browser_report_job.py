"""In a browser: choosing 5,000 resamples on the dashboard shows the background job's progress
in place of the report, and the report itself arrives by the page's poll once the job is done,
without a reload."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from accounts.roles import RESEARCHER, role_add
from analysis.jobs.services import job_execute
from analysis.models import Job
from tests.second_factor import browser_sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_dashboard_follows_the_job_then_shows_its_report(
    django_db_setup, small_study, live_server, page
):
    from django.core.cache import cache

    cache.clear()
    user = get_user_model().objects.create_user("res-job", password="pw-12345678")
    role_add(user=user, role=RESEARCHER)
    browser_sign_in(page, "res-job", "pw-12345678")
    page.goto(f"/analysis/studies/{small_study.study.pk}/")
    assert "Coverage" in page.inner_text("#report")
    page.select_option("#id_bootstrap", "5000")
    page.wait_for_selector("#report-pending")
    assert "computed in the background" in page.inner_text("#report")
    assert "Coverage" not in page.inner_text("#report")
    job = Job.objects.get()
    assert job.kind == Job.Kind.REPORT and job.state == Job.State.QUEUED
    # A worker runs it (here: this test); the page's poll brings the report.
    job_execute(job_id=str(job.pk))
    page.wait_for_selector("#report-pending", state="detached", timeout=20_000)
    assert "Coverage" in page.inner_text("#report")
    assert "bootstrap=5000" in page.url
    assert Job.objects.count() == 1
