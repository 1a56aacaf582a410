"""A newcomer's first real judge run, in chromium: log in as the demo admin, launch a judge run
on the demo study against the local SmolLM2-135M endpoint (bin/local-model), watch it finish.

The run executes on a real Celery worker against the real llama.cpp server; a small sample
keeps it to a couple of minutes on a shared 2-core machine.
"""

from __future__ import annotations

import os
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import expect

from annotation.models import Rating
from judging import local_model, services
from judging.models import Run
from tests.conftest import SCREENSHOTS
from tests.second_factor import browser_sign_in, totp_enrol

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.local_model,
    pytest.mark.django_db(transaction=True),
]

SAMPLE = 2


def test_newcomer_launches_a_judge_run_on_the_demo_study_and_sees_it_finish(
    django_db_setup, local_llama, celery_worker_factory, live_server, page
):
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    services.local_endpoints_register(base_url=local_llama.base_url, model=local_model.MODEL_ALIAS)
    celery_worker_factory()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # The demo admin signs in with a second factor (required of admins): the tests' TOTP.
    totp_enrol(get_user_model().objects.get(username="admin"))
    password = os.environ.get("DEMO_PASSWORD", "mentalbench-demo")
    browser_sign_in(page, "admin", password, second_factor=True)
    page.goto("/judging/")
    page.click("text=New judge run")
    page.select_option("#id_study", label="Demo study")
    page.select_option("#id_endpoint", label=services.LOCAL_ENDPOINT_NAME)
    page.select_option("#id_subset", "sample")
    page.fill("#id_sample_size", str(SAMPLE))
    # The estimate shows as the form is filled in (nothing to pay for a local model), before
    # the one Launch.
    # The size was typed and not left: the estimate follows the typing, not the last change.
    expect(page.locator("section.estimate")).to_contain_text(
        re.compile(rf"(^|\s){SAMPLE} requests,")
    )
    page.click("details.advanced summary")
    page.fill("#id_max_tokens", "160")
    page.fill("#id_max_output_attempts", "2")
    page.fill("#id_concurrency", "2")
    page.fill("#id_parallel_tasks", "1")
    page.click("#launch")
    page.wait_for_url("**/judging/runs/*/")

    # The page polls every 2 s (htmx); the settled status appears by itself when the worker
    # finishes: "Done", or "Failed" when the small model's every answer was unusable (cut off
    # by the 160-token limit, say), which is what happened then.
    page.wait_for_selector(".status-done, .status-failed", timeout=400_000)
    run = Run.objects.get()
    assert run.endpoint.name == services.LOCAL_ENDPOINT_NAME
    ratings = Rating.objects.filter(run=run)
    assert ratings.count() == SAMPLE
    all_invalid = not ratings.filter(status=Rating.Status.COMPLETE).exists()
    assert run.status == (Run.Status.FAILED if all_invalid else Run.Status.DONE)
    text = page.inner_text("main") if page.locator("main").count() else page.inner_text("body")
    done, failed = (
        ratings.filter(status=Rating.Status.COMPLETE).count(),
        ratings.filter(status=Rating.Status.INVALID).count(),
    )
    assert f"{done} done, {failed} failed" in text
    assert not errors
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "local-model-judge-run.png"), full_page=True)
