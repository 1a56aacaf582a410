"""Runs on real Celery workers (Redis db 14), including a SIGKILL crash in the middle of a run."""

from __future__ import annotations

import pytest
from django.db.models import Count

from annotation.models import Rating, Score
from judging import selectors, services
from judging.models import Run, RunItem
from judging.prompts import DEFAULT_RUBRIC
from tests.fakes.llm_server import FakeLLMServer

from .conftest import make_study, wait_for

pytestmark = pytest.mark.slow


def _status(run: Run) -> str:
    run.refresh_from_db()
    return run.status


def _assert_exactly_one_result_per_item(run: Run, expected_items: int) -> None:
    items = RunItem.objects.filter(run=run)
    assert items.count() == expected_items
    assert items.filter(status=RunItem.Status.DONE).count() == expected_items
    ratings = Rating.objects.filter(run=run)
    assert ratings.count() == expected_items
    duplicates = (
        ratings.values("response_id", "repeat").annotate(n=Count("id")).filter(n__gt=1).count()
    )
    assert duplicates == 0
    assert set(ratings.values_list("response_id", "repeat")) == set(
        items.values_list("response_id", "repeat")
    )
    assert Score.objects.filter(rating__run=run).count() == expected_items * len(DEFAULT_RUBRIC)
    progress = selectors.run_progress(run=run)
    assert (progress.total, progress.done, progress.failed) == (expected_items, expected_items, 0)
    assert (progress.pending, progress.running) == (0, 0)
    assert progress.input_tokens == sum(items.values_list("input_tokens", flat=True))
    assert progress.cost_usd > 0


def test_judge_run_on_a_real_celery_worker(celery_worker_factory, endpoint_factory, fake_llm):
    study = make_study("worker study", conversations=20, responders=("gpt4o", "llama_3"))
    endpoint = endpoint_factory("anthropic")
    celery_worker_factory()
    # Launched like the admin page does: the tasks are sent to Redis when the launch commits.
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint, repeats=2)
    wait_for(lambda: _status(run) == Run.Status.DONE, timeout=60, what="the run to finish")
    _assert_exactly_one_result_per_item(run, 80)


def test_sigkilled_worker_mid_run_resumes_with_exactly_one_result_per_item(
    celery_worker_factory, endpoint_factory
):
    with FakeLLMServer(delay=0.03) as server:
        study = make_study("crash study", conversations=1000, responders=("gpt4o", "llama_3"))
        endpoint = endpoint_factory("openai", base_url=server.openai_base_url)
        first = celery_worker_factory("first-worker.log")
        run = services.judge_run_create(
            study_id=study.id, endpoint=endpoint, concurrency=40, parallel_tasks=2
        )
        done = RunItem.objects.filter(run=run, status=RunItem.Status.DONE)
        running = RunItem.objects.filter(run=run, status=RunItem.Status.RUNNING)
        wait_for(
            lambda: done.count() >= 400 and running.exists(),
            timeout=90,
            what="400 results and requests in flight before the crash",
        )
        first.kill()  # SIGKILL to the whole process group: parent and pool children
        at_crash = done.count()
        orphaned = set(running.values_list("id", flat=True))  # claimed by the dead worker
        assert at_crash < 2000, "the run finished before the crash; make it longer"
        assert Rating.objects.filter(run=run).count() == at_crash
        assert _status(run) == Run.Status.RUNNING

        # A new worker picks the run up by itself (worker_ready), takes over the dead worker's
        # claims once their lease runs out, and finishes.
        celery_worker_factory("second-worker.log")
        wait_for(lambda: _status(run) == Run.Status.DONE, timeout=120, what="the resumed run")
        _assert_exactly_one_result_per_item(run, 2000)
        # Every item the dead worker held was claimed again and finished once.
        retaken = RunItem.objects.filter(id__in=orphaned, attempts__gte=2, status="done")
        assert retaken.count() == len(orphaned)
        print(f"killed at {at_crash}/2000 stored; {len(orphaned)} in flight, all taken over")


def test_labelling_run_on_a_real_celery_worker(celery_worker_factory, endpoint_factory, fake_llm):
    from annotation.models import Conversation, LabelAnnotation, Study
    from annotation.services import study_get_or_create

    study, _ = study_get_or_create(
        name="worker cd study", kind=Study.Kind.DISTORTION_LABELLING, label_scheme="multi"
    )
    Conversation.objects.bulk_create(
        Conversation(study=study, external_id=f"w{i}", context=f"I always fail, case {i}.")
        for i in range(30)
    )
    celery_worker_factory()
    run = services.labelling_run_create(
        study_id=study.id, endpoint=endpoint_factory("openai"), repeats=5, temperature=0.7
    )
    wait_for(lambda: _status(run) == Run.Status.DONE, timeout=60, what="the run to finish")
    stored = LabelAnnotation.objects.filter(run=run)
    assert stored.count() == 150
    assert set(stored.values_list("conversation__external_id", "repeat")) == {
        (f"w{i}", k) for i in range(30) for k in range(5)
    }
    assert not stored.exclude(status="complete").exists()
    progress = selectors.run_progress(run=run)
    assert (progress.total, progress.done, progress.failed) == (150, 150, 0)
