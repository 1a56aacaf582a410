"""Every run state the platform shows is true of the run: one test per state, reached through
the services (and the fake LLM server over real HTTP), read back from the run's page.

Item states (pending, running, done, failed) are the counters on the same page; batch runs end
by the same rule as immediate ones (their last test here).
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from annotation.models import Rating
from judging import services
from judging.models import Run, RunItem
from tests.factories import distortion_study_make, texts_study_make

from .runs import batch_endpoint, judge, launch, marker, poll_until_settled

pytestmark = pytest.mark.django_db(transaction=True)


def _page(client, run: Run) -> str:
    return client.get(reverse("judging:run", args=[run.pk])).content.decode()


def _status(html: str) -> str:
    found = re.search(r'id="run-status">([^<]+)<', html)
    assert found, "the page shows the run's status"
    return found.group(1)


def _bar(html: str) -> float:
    found = re.search(r'<progress max="100" value="([0-9.]+)"', html)
    assert found
    return float(found.group(1))


def test_pending_is_never_left_behind_by_a_launch(endpoint_factory):
    """*Pending* is the row's state only inside the launch's transaction: a launch that
    commits has started the run (or was refused: see the nothing-to-do test)."""
    study, _ = texts_study_make(texts={"a": "fine"})
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory())
    assert run.status == Run.Status.RUNNING
    assert not Run.objects.filter(status=Run.Status.PENDING).exists()


def test_running_shows_how_far_it_got_and_polls(staff_client, endpoint_factory):
    study, _ = texts_study_make(texts={"a": "fine", "b": "fine"})
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory())
    first = RunItem.objects.filter(run=run).order_by("id").first()
    RunItem.objects.filter(pk=first.pk).update(
        status=RunItem.Status.FAILED, last_error="HTTP 500 (gave up after 5 attempts)"
    )
    html = _page(staff_client, run)
    assert _status(html) == "Running" and "hx-trigger" in html
    assert "1 / 2 items finished (50.0%)" in html and _bar(html) == 50.0
    assert "run-failed-count" not in html  # counted once it settles


def test_done_every_item_stored(staff_client, endpoint_factory):
    study, _ = texts_study_make(texts={"a": "fine", "b": "fine"})
    run = judge(study, endpoint_factory())
    html = _page(staff_client, run)
    assert _status(html) == "Done" and _bar(html) == 100.0
    assert "2 / 2 items done" in html and "run-failed-count" not in html


def test_done_with_some_failures_says_how_many_and_why(staff_client, endpoint_factory):
    study, ids = texts_study_make(texts={"ok": "fine", "bad": marker("missing_keys")})
    run = judge(study, endpoint_factory(), max_output_attempts=1)
    assert run.status == Run.Status.DONE and not run.error
    html = _page(staff_client, run)
    assert _status(html) == "Done" and _bar(html) == 50.0
    assert "1 of 2 items failed; their reasons are listed below" in html
    assert "missing Helpfulness, Understanding" in html  # the reason, in the failures table
    assert "Retry failures" in html and "Resume" not in html


def test_failed_when_every_item_failed(staff_client, endpoint_factory):
    study, _ = texts_study_make(texts={"a": marker("missing_keys"), "b": marker("missing_keys")})
    run = judge(study, endpoint_factory(), max_output_attempts=1)
    assert run.status == Run.Status.FAILED and run.finished_at
    assert run.error.startswith("every item failed (2 of 2); the first: no valid judge output")
    html = _page(staff_client, run)
    assert _status(html) == "Failed" and _bar(html) == 0.0 and "0 / 2 items done" in html
    assert "hx-trigger" not in html
    # Nothing is pending, so there is nothing to resume; the failures can be retried.
    assert "Retry failures" in html and "Resume" not in html
    assert Rating.objects.filter(run=run, status="invalid").count() == 2


def test_a_retried_run_that_then_succeeds_is_done(endpoint_factory):
    study, ids = texts_study_make(texts={"a": marker("missing_keys", n=1)})
    run = judge(study, endpoint_factory(), max_output_attempts=1)
    assert run.status == Run.Status.FAILED
    assert services.run_retry_failures(run_id=run.id) == 1
    services.run_work(run_id=run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.DONE and run.error == ""


def test_failed_for_the_whole_run_keeps_its_items_for_a_resume(staff_client, endpoint_factory):
    # HTTP 401 concerns the endpoint, not one item: the run stops with the reason.
    study, _ = texts_study_make(texts={"a": marker("401")})
    run = judge(study, endpoint_factory())
    assert run.status == Run.Status.FAILED and "401" in run.error
    html = _page(staff_client, run)
    assert _status(html) == "Failed" and "Resume" in html
    assert RunItem.objects.filter(run=run, status=RunItem.Status.PENDING).count() == 1


def test_cancelling_then_cancelled(staff_client, endpoint_factory):
    study, _ = texts_study_make(texts={"a": "fine"})
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory())
    # A worker holds the item: the run waits for it to let go.
    RunItem.objects.filter(run=run).update(status=RunItem.Status.RUNNING, claim_token="w")
    services.run_cancel(run_id=run.id)
    run.refresh_from_db()
    html = _page(staff_client, run)
    assert _status(html) == "Cancelling" and "hx-trigger" in html
    RunItem.objects.filter(run=run).update(status=RunItem.Status.PENDING, claim_token="")
    services.run_finalize(run_id=run.id)
    html = _page(staff_client, run)
    assert _status(html) == "Cancelled" and "Resume" in html and "hx-trigger" not in html


@pytest.mark.parametrize("kind", ["judge", "generation", "labelling"])
def test_a_run_with_nothing_to_do_is_refused_at_launch(kind, endpoint_factory, staff_client):
    endpoint = endpoint_factory()
    if kind == "judge":
        study, _ = texts_study_make(texts={"a": "fine"})
        judge(study, endpoint)
        with pytest.raises(services.RunError, match="nothing to judge: no response with text"):
            services.judge_run_create(study_id=study.id, endpoint=endpoint, subset="unrated")
    elif kind == "generation":
        study, _ = texts_study_make(texts={"a": "fine"})
        run = services.generation_run_create(study_id=study.id, endpoint=endpoint)
        services.run_work(run_id=run.id)
        with pytest.raises(services.RunError, match="nothing to generate .* already has a"):
            services.generation_run_create(study_id=study.id, endpoint=endpoint)
    else:
        study = distortion_study_make(messages=[])
        with pytest.raises(services.RunError, match="nothing to label: this study has no"):
            services.labelling_run_create(study_id=study.id, endpoint=endpoint)
    before = Run.objects.count()
    # The launch page says so and creates nothing.
    if kind == "generation":
        page = staff_client.post(
            reverse("judging:generation_new"),
            {
                "study": study.pk,
                "endpoints": [endpoint.pk],
                "temperature": 0.7,
                "max_tokens": 512,
                "concurrency": 4,
                "parallel_tasks": 1,
                "confirm_cost": "on",
            },
        )
        assert page.status_code == 200
        assert "nothing to generate" in page.content.decode()
    assert Run.objects.count() == before


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_run_whose_every_item_failed_is_failed(provider, endpoint_factory, fake_llm):
    study, _ = texts_study_make(texts={"a": marker("missing_keys"), "b": marker("missing_keys")})
    run = poll_until_settled(
        launch(study, batch_endpoint(endpoint_factory, provider), max_output_attempts=1)
    )
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("every item failed (2 of 2)")
