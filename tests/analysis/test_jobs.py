"""Background jobs: the release bundle and κ_F1 started from their pages and the API, run to
their end, the same request answered by the same job, the limit of jobs at once, cancel, the
errors a person reads, expiry, and who may see a job."""

from __future__ import annotations

import io
import zipfile
from datetime import timedelta

import pytest
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.roles import RESEARCHER
from analysis.jobs.kinds import JobCancelled
from analysis.jobs.services import ProgressWriter, job_cancel, job_execute, jobs_sweep
from analysis.models import ExportLog, Job
from analysis.release import CHECKSUMS
from tests.factories import user_make

HAND = b"true,predicted\na,a\na,a\na,b\nb,b\n"


@pytest.fixture
def run_jobs(django_capture_on_commit_callbacks, settings):
    """Jobs run in the test process when their request commits (Celery eager): returns a function
    that makes a request and runs what it started."""
    from mentalbench.celery import app

    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True

    def request(send, *args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return send(*args, **kwargs)

    yield request
    app.conf.task_always_eager = saved


def _kappa_post(client, data: bytes = HAND, *, n_sim: int = 200, name: str = "preds.csv"):
    return client.post(
        reverse("analysis:kappa_f1"),
        {
            "file": SimpleUploadedFile(name, data, content_type="text/csv"),
            "kind": "",
            "n_sim": n_sim,
            "seed": 1,
        },
    )


def test_kappa_f1_runs_as_a_job_whose_page_shows_the_numbers(client, researcher, run_jobs):
    client.force_login(researcher)
    response = run_jobs(_kappa_post, client)
    assert response.status_code == 302
    job = Job.objects.get()
    assert response["Location"] == reverse("analysis:job", args=[job.pk])
    assert job.state == Job.State.DONE and job.fraction == 1.0
    html = client.get(response["Location"]).content.decode()
    # p = (0.75, 0.25): F1_random = 0.625; weighted F1 = 0.75·0.8 + 0.25·2/3 = 0.7667;
    # κ_F1 = (0.7667 − 0.625) / 0.375 = 0.378.
    assert 'id="kappa-f1-result"' in html
    assert "0.625" in html and "0.767" in html and "0.378" in html
    assert "Simulated random F1 (mean of 200)" in html
    # A finished job's page no longer polls.
    assert "hx-trigger" not in html
    # The upload is kept only until the job ends.
    name = job.input_file.name
    assert default_storage.exists(name)
    jobs_sweep()
    assert not default_storage.exists(name)


def test_a_file_that_cannot_be_read_fails_with_a_sentence_saying_why(client, researcher, run_jobs):
    client.force_login(researcher)
    response = run_jobs(_kappa_post, client, b"gold,guess\na,b\n", name="bad.csv")
    job = Job.objects.get()
    assert job.state == Job.State.FAILED
    assert job.error.startswith("bad.csv") and "true" in job.error
    html = client.get(response["Location"]).content.decode()
    assert 'id="job-error"' in html and "bad.csv" in html
    assert 'id="kappa-f1-result"' not in html


def test_an_unexpected_error_says_what_happened_without_a_traceback(
    client, researcher, run_jobs, monkeypatch
):
    from analysis.jobs import kinds

    def broken(job, progress):
        raise KeyError("internal detail")

    monkeypatch.setitem(kinds.RUNNERS, Job.Kind.KAPPA_F1, broken)
    client.force_login(researcher)
    run_jobs(_kappa_post, client)
    job = Job.objects.get()
    assert job.state == Job.State.FAILED
    assert "unexpected error" in job.error and "KeyError" in job.error
    assert "internal detail" not in job.error


def test_the_same_request_again_gives_the_same_job(client, researcher, small_study, settings):
    settings.JOBS_MAX_ACTIVE_PER_USER = 10  # none of them runs here: they all stay queued
    client.force_login(researcher)
    url = reverse("analysis:release_start", args=[small_study.study.pk])
    first = client.post(url, {"text": "1"})
    second = client.post(url, {"text": "1"})
    assert first["Location"] == second["Location"]
    assert Job.objects.count() == 1
    # Other parameters are another job; so is the same request once the data changed.
    client.post(url, {"text": "0"})
    assert Job.objects.count() == 2
    small_study.study.description = "Edited: the datasheet, so the release, is another."
    small_study.study.save()
    client.post(url, {"text": "1"})
    assert Job.objects.count() == 3
    # And κ_F1 of the same bytes and parameters.
    _kappa_post(client)
    _kappa_post(client)
    assert Job.objects.filter(kind=Job.Kind.KAPPA_F1).count() == 1


def test_one_person_may_have_only_so_many_jobs_at_once(client, researcher, small_study, settings):
    settings.JOBS_MAX_ACTIVE_PER_USER = 1
    client.force_login(researcher)
    assert _kappa_post(client).status_code == 302
    refused = _kappa_post(client, n_sim=300)
    assert refused.status_code == 200
    assert "the most one person may have at once (1)" in refused.content.decode()
    assert Job.objects.count() == 1
    # Another researcher is not held up by the first one's jobs.
    other = user_make(username="ruth", password="pw-ruth-long-1", role=RESEARCHER)
    client.force_login(other)
    assert _kappa_post(client, n_sim=300).status_code == 302
    # Once the first job ends, its owner may start another.
    job_cancel(job=Job.objects.filter(owner=researcher).get())
    client.force_login(researcher)
    assert _kappa_post(client, n_sim=300).status_code == 302


def test_cancel_stops_a_queued_job_and_a_running_one_at_its_next_report(client, researcher):
    client.force_login(researcher)
    _kappa_post(client)
    job = Job.objects.get()
    response = client.post(reverse("analysis:job_cancel", args=[job.pk]))
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    job_execute(job_id=str(job.pk))  # the task, delivered after the cancel, does nothing
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED and job.started_at is None

    # Running: the next progress report finds the row cancelled and stops the computation.
    Job.objects.filter(pk=job.pk).update(state=Job.State.RUNNING)
    writer = ProgressWriter(job.pk)
    writer(0.1)
    job_cancel(job=job)
    writer.last = 0.0
    with pytest.raises(JobCancelled):
        writer(0.2)


def test_a_job_is_found_only_by_its_owner(client, researcher, clinician_user):
    client.force_login(researcher)
    _kappa_post(client)
    job = Job.objects.get()
    other = user_make(username="ruth", password="pw-ruth-long-1", role=RESEARCHER)
    client.force_login(other)
    for name in ("analysis:job", "analysis:job_download"):
        assert client.get(reverse(name, args=[job.pk])).status_code == 404
    assert client.post(reverse("analysis:job_cancel", args=[job.pk])).status_code == 404
    client.force_login(clinician_user)
    assert client.get(reverse("analysis:job", args=[job.pk])).status_code == 403


def test_release_job_builds_the_zip_and_keeps_it_until_it_expires(
    client, researcher, small_study, run_jobs
):
    client.force_login(researcher)
    page = client.get(reverse("analysis:release", args=[small_study.study.pk]))
    assert "Prepare the release (zip)" in page.content.decode()
    response = run_jobs(
        client.post, reverse("analysis:release_start", args=[small_study.study.pk]), {"text": "1"}
    )
    job = Job.objects.get()
    assert job.state == Job.State.DONE and job.expires_at is not None
    html = client.get(response["Location"]).content.decode()
    assert "Download small-study-release.zip" in html
    download = client.get(reverse("analysis:job_download", args=[job.pk]))
    assert download.status_code == 200 and download["Content-Type"] == "application/zip"
    assert 'filename="small-study-release.zip"' in download["Content-Disposition"]
    archive = zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content)))
    assert CHECKSUMS in archive.namelist()
    log = ExportLog.objects.get(what="release")
    assert log.channel == "web" and log.user == researcher and log.rows

    Job.objects.filter(pk=job.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    name = job.result_file.name
    assert jobs_sweep()["expired"] == 1
    job.refresh_from_db()
    assert job.state == Job.State.EXPIRED and not default_storage.exists(name)
    assert client.get(reverse("analysis:job_download", args=[job.pk])).status_code == 404
    assert "start the job again" in client.get(response["Location"]).content.decode()
    # Expired, the same request starts a new job.
    client.post(reverse("analysis:release_start", args=[small_study.study.pk]), {"text": "1"})
    assert Job.objects.count() == 2


def test_a_running_job_that_stops_reporting_is_failed_by_the_sweeper(researcher, settings):
    job = Job.objects.create(
        owner=researcher,
        kind=Job.Kind.KAPPA_F1,
        digest="x",
        state=Job.State.RUNNING,
        heartbeat_at=timezone.now() - timedelta(seconds=settings.JOBS_STALE_SECONDS + 1),
    )
    assert jobs_sweep()["stale"] == 1
    job.refresh_from_db()
    assert job.state == Job.State.FAILED and "Start the job again" in job.error


def test_a_study_that_cannot_be_released_fails_its_job_with_the_reason(
    client, researcher, small_study, run_jobs
):
    from annotation.models import Conversation

    Conversation.objects.filter(study=small_study.study, external_id="c1").update(
        conditions=["a", "b", "c", "d"]
    )
    client.force_login(researcher)
    run_jobs(client.post, reverse("analysis:release_start", args=[small_study.study.pk]))
    job = Job.objects.get()
    assert job.state == Job.State.FAILED and "condition" in job.error


# --- the API ------------------------------------------------------------------------------------


def _api(user) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def test_api_starts_a_release_job_repeats_it_and_downloads_it(researcher, small_study, run_jobs):
    api = _api(researcher)
    created = run_jobs(
        api.post, "/api/jobs/release/", {"study": small_study.study.pk}, format="json"
    )
    assert created.status_code == 201, created.content
    assert created.json()["state"] == "queued"  # answered before the worker took it
    body = api.get(created.json()["url"]).json()
    assert body["state"] == "done" and body["fraction"] == 1.0
    assert body["download"].endswith(f"/api/jobs/{body['id']}/download/")
    again = api.post("/api/jobs/release/", {"study": small_study.study.pk}, format="json")
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    listed = api.get("/api/jobs/").json()
    assert [j["id"] for j in listed["results"]] == [body["id"]]
    download = api.get(f"/api/jobs/{body['id']}/download/")
    assert download.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content)))
    assert CHECKSUMS in archive.namelist()
    assert ExportLog.objects.get(what="release").channel == "api"


def test_api_kappa_f1_job_with_an_upload(researcher, run_jobs):
    api = _api(researcher)
    upload = SimpleUploadedFile("preds.csv", HAND, content_type="text/csv")
    created = run_jobs(
        api.post,
        "/api/jobs/kappa-f1/",
        {"file": upload, "n_sim": 100},
        format="multipart",
    )
    assert created.status_code == 201, created.content
    body = api.get(created.json()["url"]).json()
    assert body["result"]["f1_random"] == pytest.approx(0.625) and body["result"]["n_sim"] == 100
    assert body["download"] is None


def test_api_refuses_bad_requests_and_too_many_jobs(researcher, small_study, settings):
    api = _api(researcher)
    assert api.post("/api/jobs/release/", {}, format="json").status_code == 400
    assert api.post("/api/jobs/kappa-f1/", {"n_sim": 10}, format="multipart").status_code == 400
    missing = api.post("/api/jobs/release/", {"study": 10**6}, format="json")
    assert missing.status_code == 404
    settings.JOBS_MAX_ACTIVE_PER_USER = 1
    pk = small_study.study.pk
    assert api.post("/api/jobs/release/", {"study": pk}, format="json").status_code == 201
    refused = api.post("/api/jobs/release/", {"study": pk, "include_text": False}, format="json")
    assert refused.status_code == 429 and "at once" in refused.json()["detail"]
    job = Job.objects.get()
    cancelled = api.post(f"/api/jobs/{job.pk}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    other = _api(user_make(username="ruth", password="pw-ruth-long-1", role=RESEARCHER))
    assert other.get(f"/api/jobs/{job.pk}/").status_code == 404
    assert api.get("/api/jobs/00000000-0000-0000-0000-000000000000/").status_code == 404
