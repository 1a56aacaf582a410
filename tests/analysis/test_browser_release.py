"""A researcher prepares a study's release in chromium, downloads it and reads its datasheet; a
clinician is refused the page."""

from __future__ import annotations

import zipfile

import pytest
from django.contrib.auth import get_user_model

from accounts.roles import CLINICIAN, RESEARCHER, role_add
from analysis.release import CHECKSUMS, CONVERSATIONS, DATASHEET, HUMAN, checksums_verify

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def eager_jobs():
    """Jobs run inside the request that starts them, once it commits (Celery eager)."""
    from mentalbench.celery import app

    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = saved


def _sign_in(page, username: str, password: str, path: str) -> None:
    page.goto(f"/accounts/login/?next={path}")
    page.fill("#id_login", username)
    page.fill("#id_password", password)
    with page.expect_navigation():
        page.click("main button[type=submit]")


def test_researcher_prepares_downloads_and_reads_a_release_that_checks_out(
    django_db_setup, small_study, live_server, chromium, tmp_path, eager_jobs
):
    study = small_study.study
    path = f"/analysis/studies/{study.pk}/release/"
    researcher = get_user_model().objects.create_user("rosa", password="pw-rosa-long-1")
    role_add(user=researcher, role=RESEARCHER)
    page = chromium.new_context(base_url=live_server.url, accept_downloads=True).new_page()
    _sign_in(page, "rosa", "pw-rosa-long-1", path)
    page.wait_for_url(f"**{path}")
    # A worker builds the zip (the live server sends tasks eagerly here); its page offers it.
    page.click("text=Prepare the release (zip)")
    page.wait_for_url("**/analysis/jobs/**")
    with page.expect_download() as info:
        page.click("text=Download small-study-release.zip")
    saved = tmp_path / info.value.suggested_filename
    info.value.save_as(saved)
    # The job's page leads to the datasheet the release holds.
    page.click("text=Read its datasheet")
    page.wait_for_url(lambda url: url.endswith(f"{path}?text=1"))
    assert page.locator("h3:has-text('Reliability')").count() == 1
    assert "Licence" in page.inner_text("main")
    assert saved.name == "small-study-release.zip"
    with zipfile.ZipFile(saved) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "release")
    assert {CONVERSATIONS, HUMAN, DATASHEET, CHECKSUMS} <= names
    assert checksums_verify(tmp_path / "release") == []

    clinician = get_user_model().objects.create_user("cleo", password="pw-cleo-long-1")
    role_add(user=clinician, role=CLINICIAN)
    other = chromium.new_context(base_url=live_server.url).new_page()
    _sign_in(other, "cleo", "pw-cleo-long-1", "/rate/")
    response = other.goto(path)
    assert response is not None and response.status == 403
    assert "Prepare the release" not in other.content()
