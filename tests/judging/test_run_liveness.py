"""A run always reaches an end by itself: one item's failure never stops the loop, the run's
concurrency bounds every loop together, every completion received is billed, and the sweeper
moves on runs whose workers are gone. The loop runs in the test process here (real HTTP to the
fake server, real PostgreSQL); tests/judging/test_worker.py does the same on Celery workers.
"""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from annotation.models import Rating
from judging import selectors, services, tasks
from judging.models import Run, RunItem
from tests.celery_workers import wait_for
from tests.factories import case_context, case_reply, study_make, texts_study_make
from tests.fakes.llm_server import FakeLLMServer

from .runs import marker


def in_thread(run_id: int) -> threading.Thread:
    def work() -> None:
        try:
            services.run_work(run_id=run_id)
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    return thread


# ------------------------------------------------------------------------------ one item, one fate


def test_a_body_that_is_not_json_fails_its_item_and_the_run_still_ends(endpoint_factory):
    study = texts_study_make(
        texts=[marker("not_json", n="all"), marker("not_json", n=1, html=1), "fine"]
    )[0]
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory("openai"))
    services.run_work(run_id=run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    items = RunItem.objects.filter(run=run).order_by("response_id")
    assert [i.status for i in items] == ["failed", "done", "done"]
    assert "response body is not JSON" in items[0].last_error
    assert "gave up after 5 attempts" in items[0].last_error
    assert items[1].requests == 2  # the HTML page, then a valid answer
    assert Rating.objects.filter(run=run, status="complete").count() == 2


def test_an_unexpected_error_in_one_item_fails_that_item_only(endpoint_factory, monkeypatch):
    study = texts_study_make(texts=["first", "second", "third"])[0]
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory("anthropic"))
    broken = RunItem.objects.filter(run=run).order_by("id")[1].id
    real = services.item_messages

    def item_messages(*, item, **kwargs):
        if item.id == broken:
            raise KeyError("a bug in the prompt code")
        return real(item=item, **kwargs)

    monkeypatch.setattr(services.engine, "item_messages", item_messages)
    services.run_work(run_id=run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    item = RunItem.objects.get(id=broken)
    assert item.status == RunItem.Status.FAILED
    assert item.last_error == "unexpected error: KeyError: 'a bug in the prompt code'"
    assert RunItem.objects.filter(run=run, status="done").count() == 2


def test_an_unusable_answer_then_provider_failure_keeps_the_answer_as_an_invalid_rating(
    endpoint_factory,
):
    study = texts_study_make(texts=[marker("missing_keys", n=1, then=500)])[0]
    run = services.judge_run_create(
        study_id=study.id, endpoint=endpoint_factory("openai"), max_output_attempts=3
    )
    services.run_work(run_id=run.id)
    item = RunItem.objects.get(run=run)
    rating = Rating.objects.get(run=run)
    assert item.status == RunItem.Status.FAILED and item.requests == 1 + 5
    assert rating.status == Rating.Status.INVALID and rating.scores.count() == 0
    assert rating.raw_output.startswith("{")  # the unusable answer, kept verbatim
    for reason in ("attempt 1: missing", "then:", "HTTP 500", "gave up after 5 attempts"):
        assert reason in item.last_error and reason in rating.error, reason


# ------------------------------------------------------------------------------ concurrency per run


@pytest.mark.django_db(transaction=True)
def test_concurrency_bounds_the_run_across_every_loop(endpoint_factory):
    with FakeLLMServer(delay=0.2) as server:
        study = study_make(
            name="bounded",
            conversations=30,
            responders=("gpt4o",),
            context=case_context,
            text=case_reply,
        )
        endpoint = endpoint_factory("openai", base_url=server.openai_base_url)
        run = services.judge_run_create(study_id=study.id, endpoint=endpoint, concurrency=4)
        # Three loops on one run: the launch's task, its redelivery and a restarted worker's.
        loops = [in_thread(run.id) for _ in range(3)]
        for loop in loops:
            loop.join(timeout=60)
        run.refresh_from_db()
        assert run.status == Run.Status.DONE
        assert Rating.objects.filter(run=run).count() == 30
        assert server.max_in_flight == 4  # each loop alone would have kept 4 in flight


def test_claims_never_exceed_the_run_concurrency_except_for_offline_batches(endpoint_factory):
    study = texts_study_make(texts=["a", "b", "c", "d", "e", "f"])[0]
    run = services.judge_run_create(
        study_id=study.id, endpoint=endpoint_factory("openai"), concurrency=2
    )
    assert len(services.items_claim(run_id=run.id, token="loop-1", limit=10)) == 2
    assert services.items_claim(run_id=run.id, token="loop-2", limit=10) == []
    # Offline vLLM sends no requests: it batches all it can claim (the model loads once).
    offline = services.items_claim(
        run_id=run.id, token="offline", limit=10, within_concurrency=False
    )
    assert len(offline) == 4


# ------------------------------------------------------------------------------ billing


@pytest.mark.django_db(transaction=True)
def test_every_completion_received_is_billed_even_when_its_result_is_not_stored(
    endpoint_factory,
):
    with FakeLLMServer(delay=1.0) as server:
        study = texts_study_make(texts=["only item"])[0]
        endpoint = endpoint_factory("openai", base_url=server.openai_base_url)
        run = services.judge_run_create(study_id=study.id, endpoint=endpoint)
        item = RunItem.objects.get(run=run)
        loop = in_thread(run.id)
        wait_for(lambda: server.in_flight == 1, timeout=10, what="the request")
        # Another loop takes the item over (as after a lease ran out): this loop's answer, when
        # it comes, is not stored — but the provider billed it.
        RunItem.objects.filter(id=item.id).update(claim_token="another-loop")
        billed = RunItem.objects.filter(id=item.id, billed_completions=1)
        wait_for(billed.exists, timeout=10, what="the answer to be billed")
        assert not Rating.objects.filter(run=run).exists()
        RunItem.objects.filter(id=item.id).update(status="pending", claim_token="")
        loop.join(timeout=20)
        item.refresh_from_db()
        assert item.status == RunItem.Status.DONE and item.requests == 1
        progress = selectors.run_progress(run=run)
        assert progress.billed_completions == 2 == server.sent["completions"]
        assert progress.billed_input_tokens == server.sent["input_tokens"]
        assert progress.billed_output_tokens == server.sent["output_tokens"]
        # The same prompt twice: half of what was billed is in the stored rating.
        assert progress.billed_input_tokens == 2 * progress.input_tokens
        assert progress.billed_cost_usd == pytest.approx(2 * progress.cost_usd)
        assert progress.unstored_tokens == progress.input_tokens + progress.output_tokens


def test_the_run_page_shows_tokens_billed_against_tokens_stored(client, endpoint_factory):
    from django.contrib.auth.models import User

    study = texts_study_make(texts=["a", "b"])[0]
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory("openai"))
    RunItem.objects.filter(run=run).update(
        status="done", input_tokens=100, output_tokens=20, cost_usd=0.0004
    )
    RunItem.objects.filter(run=run).update(
        billed_completions=2,
        billed_input_tokens=200,
        billed_output_tokens=40,
        billed_cost_usd=0.0008,
    )
    client.force_login(User.objects.create_superuser("boss", "b@example.org", "pw-1234567"))
    page = client.get(f"/judging/runs/{run.id}/").content.decode()
    assert "tokens in stored results 200 in / 40 out" in page
    assert "Tokens billed (every answer received, stored or not): 400 in / 80 out" in page
    assert "in 4 answers · 0.0016 USD" in page
    assert "240 tokens billed for answers that no stored result holds" in page


def test_the_run_page_says_when_no_worker_has_reported_for_a_lease(client, endpoint_factory):
    from django.contrib.auth.models import User

    study = texts_study_make(texts=["a"])[0]
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory("openai"))
    client.force_login(User.objects.create_superuser("boss", "b@example.org", "pw-1234567"))
    assert "No worker has reported" not in client.get(f"/judging/runs/{run.id}/").content.decode()
    _age(run, seconds=services.LEASE_SECONDS + 30)
    page = client.get(f"/judging/runs/{run.id}/").content.decode()
    silent = re.search(r"No worker has reported on this run for (\d+) s", page)
    assert silent and services.LEASE_SECONDS + 30 <= int(silent[1]) < services.LEASE_SECONDS + 40


# ------------------------------------------------------------------------------ the sweeper


def _age(run: Run, *, seconds: float) -> None:
    """As if the run's loops (and their claims) were last heard of `seconds` ago."""
    then = timezone.now() - timedelta(seconds=seconds)
    Run.objects.filter(id=run.id).update(heartbeat_at=then)
    RunItem.objects.filter(run=run, status="running").update(heartbeat_at=then)


@pytest.fixture
def sent_tasks(monkeypatch) -> list[int]:
    """run_work tasks the sweeper sends, recorded instead of going to a broker."""
    sent: list[int] = []
    monkeypatch.setattr(tasks.run_work, "delay", lambda run_id: sent.append(run_id))
    return sent


def test_sweeper_restarts_a_running_run_whose_loops_all_died(
    endpoint_factory, sent_tasks, django_capture_on_commit_callbacks
):
    study = texts_study_make(texts=["a", "b", "c"])[0]
    run = services.judge_run_create(
        study_id=study.id, endpoint=endpoint_factory("openai"), parallel_tasks=2
    )
    services.items_claim(run_id=run.id, token="dead-loop", limit=2)  # then its worker died
    with django_capture_on_commit_callbacks(execute=True):
        assert services.runs_sweep() == {"finalized": [], "restarted": []}  # still in its lease
    _age(run, seconds=services.LEASE_SECONDS + 1)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.runs_sweep() == {"finalized": [], "restarted": [run.id]}
    assert sent_tasks == [run.id, run.id]  # parallel_tasks fresh loops
    with django_capture_on_commit_callbacks(execute=True):
        assert services.runs_sweep()["restarted"] == []  # once per lease, not once per sweep
    services.run_work(run_id=run.id)  # what the sent task does: takes over the dead claims
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    assert Rating.objects.filter(run=run).count() == 3


def test_sweeper_cancels_a_cancelling_run_whose_worker_died(endpoint_factory):
    study = texts_study_make(texts=["a", "b"])[0]
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory("openai"))
    services.items_claim(run_id=run.id, token="dead-loop", limit=10)
    services.run_cancel(run_id=run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLING  # its items are still held by the dead loop
    _age(run, seconds=services.LEASE_SECONDS + 1)
    assert services.runs_sweep()["finalized"] == [run.id]
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert set(RunItem.objects.filter(run=run).values_list("status", flat=True)) == {"pending"}


def test_sweeper_finishes_a_run_whose_last_loop_died_before_finalizing(endpoint_factory):
    study = texts_study_make(texts=["a"])[0]
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory("openai"))
    RunItem.objects.filter(run=run).update(status="done")
    assert services.runs_sweep()["finalized"] == [run.id]
    run.refresh_from_db()
    assert run.status == Run.Status.DONE and run.finished_at is not None


def test_sweep_runs_command_sweeps_once_and_refuses_a_bad_period(endpoint_factory, capsys):
    from django.core.management.base import CommandError

    study = texts_study_make(texts=["a"])[0]
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory("openai"))
    RunItem.objects.filter(run=run).update(status="done")  # its last loop died before finalizing
    call_command("sweep_runs")
    assert f"finalized runs [{run.id}]" in capsys.readouterr().out
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    with pytest.raises(CommandError, match="--every must be a positive number of seconds"):
        call_command("sweep_runs", every=0)


def test_beat_schedules_the_sweeper():
    from django.conf import settings

    from mentalbench.celery import app

    app.loader.import_default_modules()
    (entry,) = [e for e in app.conf.beat_schedule.values() if e["task"].endswith("runs_sweep")]
    assert entry["task"] == "judging.tasks.runs_sweep"
    assert entry["schedule"].total_seconds() == settings.JUDGING_SWEEP_SECONDS
    assert entry["options"]["expires"] == settings.JUDGING_SWEEP_SECONDS
