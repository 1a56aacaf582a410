"""Batch-mode runs against the fake server's batch endpoints, over real HTTP, through the
official SDKs (files + batches for OpenAI, message batches for Anthropic). Submit and poll run
in the test process; no SDK is monkeypatched.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from django.db import connection, transaction

from annotation.models import Rating, Score
from judging import selectors, services
from judging.models import ProviderBatch, Run, RunItem
from judging.providers import batch_api
from judging.services import batch, costs
from tests.celery_workers import wait_for
from tests.factories import (
    case_context,
    case_reply,
    distortion_study_make,
    study_make,
    texts_study_make,
)

from .conftest import ROOT
from .runs import ATTRIBUTES, batch_endpoint, launch, marker, poll_until_settled, script


@pytest.fixture(autouse=True)
def _fresh_batches(fake_llm):
    fake_llm.reset_batches()
    yield
    fake_llm.reset_batches()


def complete_ratings(run: Run) -> list[Rating]:
    return list(
        Rating.objects.filter(run=run, status=Rating.Status.COMPLETE).prefetch_related("scores")
    )


# ------------------------------------------------------------------------------ launch → done


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_batch_run_from_launch_to_done_matches_immediate_mode(
    provider, study, endpoint_factory, fake_llm
):
    endpoint = batch_endpoint(endpoint_factory, provider)
    fake_llm.batch_polls = 2  # results arrive over two polls
    run = launch(study, endpoint, repeats=2)
    assert run.mode == Run.Mode.BATCH
    assert ProviderBatch.objects.filter(run=run, status="in_progress").count() == 1
    run = poll_until_settled(run)
    assert run.status == Run.Status.DONE
    items = RunItem.objects.filter(run=run)
    assert items.count() == 12 and set(items.values_list("status", flat=True)) == {"done"}
    ratings = complete_ratings(run)
    assert len(ratings) == 12
    assert Score.objects.filter(rating__run=run).count() == 12 * len(ATTRIBUTES)

    # The same prompts and parsing as immediate mode: an immediate run gives identical scores.
    immediate = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory(provider))
    services.run_work(run_id=immediate.id)

    def scores(r: Run) -> dict:
        return {
            (x.response_id, x.repeat): {s.attribute_id: s.value for s in x.scores.all()}
            for x in complete_ratings(r)
        }

    batch_scores, live_scores = scores(run), scores(immediate)
    assert all(batch_scores[(rid, 0)] == live for (rid, _), live in live_scores.items())
    live_body = next(r.body for r in fake_llm.requests if r.body.get("model") == endpoint.model)
    assert live_body  # the batch requests were recorded like live ones

    # Tokens and cost equal the usage the fake server reported, priced at the batch prices.
    progress = selectors.run_progress(run=run)
    assert progress.input_tokens == fake_llm.batch_sent["input_tokens"]
    assert progress.output_tokens == fake_llm.batch_sent["output_tokens"]
    assert progress.billed_completions == fake_llm.batch_sent["completions"] == 12
    expected = (progress.input_tokens * 1.25 + progress.output_tokens * 5.0) / 1_000_000
    assert progress.cost_usd == pytest.approx(expected)


def test_the_same_request_body_as_immediate_mode(study, endpoint_factory, fake_llm):
    endpoint = batch_endpoint(endpoint_factory, "openai")
    fake_llm.reset()
    run = poll_until_settled(launch(study, endpoint))
    batch_bodies = [r.body for r in fake_llm.requests]
    fake_llm.reset()
    immediate = services.judge_run_create(study_id=study.id, endpoint=endpoint)
    services.run_work(run_id=immediate.id)
    live_bodies = [r.body for r in fake_llm.requests]
    key = lambda body: body["messages"][-1]["content"]  # noqa: E731
    assert run.status == Run.Status.DONE
    assert sorted(batch_bodies, key=key) == sorted(live_bodies, key=key)


def test_batch_mode_is_refused_for_servers_without_batches(study, endpoint_factory):
    endpoint = endpoint_factory("openai_compatible")
    with pytest.raises(batch.BatchModeError, match="batch mode needs"):
        services.judge_run_create(study_id=study.id, endpoint=endpoint, mode=Run.Mode.BATCH)
    assert not Run.objects.filter(endpoint=endpoint).exists()  # nothing written


# ------------------------------------------------------------------------------ limits


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_requests_are_split_at_the_count_and_byte_limits(
    provider, study, endpoint_factory, fake_llm, settings
):
    endpoint = batch_endpoint(endpoint_factory, provider)
    settings.JUDGING_BATCH_LIMITS = {
        provider: {"requests": 4, "bytes": 10**9},
        "openai" if provider == "anthropic" else "anthropic": {"requests": 1, "bytes": 1},
    }
    run = launch(study, endpoint)  # 6 items
    assert list(
        ProviderBatch.objects.filter(run=run).order_by("id").values_list("request_count", flat=True)
    ) == [4, 2]
    run = poll_until_settled(run)
    assert run.status == Run.Status.DONE and len(complete_ratings(run)) == 6

    # Bytes: room for two request lines per file.
    first = ProviderBatch.objects.filter(run=run).order_by("id").first()
    line_bytes = first.bytes // first.request_count
    settings.JUDGING_BATCH_LIMITS = {
        "openai": {"requests": 100, "bytes": int(line_bytes * 2.5)},
        "anthropic": {"requests": 100, "bytes": int(line_bytes * 2.5)},
    }
    run = launch(study, batch_endpoint(endpoint_factory, provider))
    counts = list(ProviderBatch.objects.filter(run=run).values_list("request_count", flat=True))
    assert counts == [2, 2, 2]
    run = poll_until_settled(run)
    assert run.status == Run.Status.DONE and len(complete_ratings(run)) == 6
    assert RunItem.objects.filter(run=run, attempts=1).count() == 6  # a cut is not an attempt


@pytest.mark.django_db(transaction=True)
def test_two_pollers_lease_two_batches_of_one_run_at_once(
    study, endpoint_factory, fake_llm, settings
):
    settings.JUDGING_BATCH_LIMITS = {
        "openai": {"requests": 3, "bytes": 10**9},
        "anthropic": {"requests": 3, "bytes": 10**9},
    }
    run = launch(study, batch_endpoint(endpoint_factory, "openai"))  # 6 items: 2 batches
    first, second = ProviderBatch.objects.filter(run=run).order_by("id")
    leased: list[ProviderBatch | None] = []

    def other_poller() -> None:
        try:
            leased.append(batch.batch_lease(batch_id=second.id, force=True))
        finally:
            connection.close()

    with transaction.atomic():
        # One poller holds its lease on the first batch (its lock lasts until it commits) ...
        assert batch.batch_lease(batch_id=first.id, force=True) is not None
        thread = threading.Thread(target=other_poller)
        thread.start()
        thread.join(timeout=30)
    # ... and the other, on another batch of the same run, is not turned away.
    assert [b.id if b else None for b in leased] == [second.id]
    run = poll_until_settled(run)
    assert run.status == Run.Status.DONE and len(complete_ratings(run)) == 6


# ------------------------------------------------------------------------------ re-asks


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_errors_expiries_and_unparseable_outputs_go_into_a_follow_up_batch(
    provider, endpoint_factory, fake_llm
):
    study, ids = texts_study_make(
        texts={
            "error": marker("batch_error", n=1),
            "expired": marker("batch_expired", n=1),
            "missing": marker("missing_keys", n=1),
            "ok": "fine",
            "hopeless": marker("batch_error", n="all"),
        }
    )
    fake_llm.batch_polls = 3
    run = poll_until_settled(launch(study, batch_endpoint(endpoint_factory, provider)))
    assert run.status == Run.Status.DONE
    batches = ProviderBatch.objects.filter(run=run).order_by("id")
    assert [b.request_count for b in batches] == [5, 4, 1]
    items = {i.response_id: i for i in RunItem.objects.filter(run=run)}
    for label in ("error", "expired", "missing"):
        item = items[ids[label]]
        assert item.status == "done" and item.attempts == 2, (label, item.last_error)
    assert items[ids["ok"]].attempts == 1
    assert batches[0].results_reasked == 4 and batches[1].results_reasked == 1
    hopeless = items[ids["hopeless"]]
    assert hopeless.status == "failed" and hopeless.attempts == 3
    assert hopeless.last_error.count("attempt") == 3 and "had an error" in hopeless.last_error
    assert not Rating.objects.filter(run=run, response_id=ids["hopeless"]).exists()
    assert len(complete_ratings(run)) == 4
    assert Rating.objects.filter(run=run).count() == 4  # exactly one per stored item


def test_a_batch_that_fails_is_sent_again(study, endpoint_factory, fake_llm):
    fake_llm.batch_fail_next = 1
    run = poll_until_settled(launch(study, batch_endpoint(endpoint_factory, "openai")))
    assert run.status == Run.Status.DONE
    statuses = list(
        ProviderBatch.objects.filter(run=run).order_by("id").values_list("status", flat=True)
    )
    assert statuses == ["failed", "stored"]
    assert "failed validation" in ProviderBatch.objects.filter(run=run).first().error
    assert len(complete_ratings(run)) == 6


def test_a_batch_that_fails_every_time_fails_its_items_with_the_reason(
    study, endpoint_factory, fake_llm
):
    fake_llm.batch_fail_next = 2
    run = poll_until_settled(
        launch(study, batch_endpoint(endpoint_factory, "openai"), max_output_attempts=2)
    )
    # Not one item succeeded: the run failed, and says so.
    assert run.status == Run.Status.FAILED and run.error.startswith("every item failed (6 of 6)")
    assert set(RunItem.objects.filter(run=run).values_list("status", flat=True)) == {"failed"}
    assert "failed validation" in RunItem.objects.filter(run=run).first().last_error
    assert not Rating.objects.filter(run=run).exists()


# ------------------------------------------------------------------------------ exactly once


@pytest.mark.django_db(transaction=True)
def test_two_racing_pollers_store_each_result_once(study, endpoint_factory, fake_llm):
    endpoint = batch_endpoint(endpoint_factory, "anthropic")
    run = launch(study, endpoint)
    record = ProviderBatch.objects.get(run=run)
    plan = batch.load_plan(run=Run.objects.select_related("endpoint").get(id=run.id))
    sdk = batch_api.client(plan.config)
    state = batch_api.retrieve(sdk, plan.config, batch_id=record.provider_batch_id)
    assert state.state == "ended"
    results = list(
        batch_api.results(
            sdk,
            plan.config,
            batch_id=record.provider_batch_id,
            state=state,
            spec=batch.request_spec(plan=plan),
        )
    )
    stored: list[int] = []
    start = threading.Barrier(2)

    def poller() -> None:
        try:
            start.wait()
            stored.append(
                batch.results_store(plan=plan, token=record.token, results=results).stored
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=poller) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(stored) == [0, 6]
    # A third poll (the beat) downloads again and stores nothing more.
    run = poll_until_settled(run)
    assert run.status == Run.Status.DONE
    assert Rating.objects.filter(run=run).count() == 6
    assert Score.objects.filter(rating__run=run).count() == 6 * len(ATTRIBUTES)
    assert sum(RunItem.objects.filter(run=run).values_list("billed_completions", flat=True)) == 6


@pytest.mark.slow  # kills a poller process mid-download
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_poller_killed_mid_download_loses_and_duplicates_nothing(
    provider, study, endpoint_factory, fake_llm
):
    from django.conf import settings

    endpoint = batch_endpoint(endpoint_factory, provider)
    run = launch(study, endpoint)
    # The poller stores two results per transaction; the download stalls after five lines
    # (an SDK may hold a line back until the next one starts): two chunks are stored.
    fake_llm.batch_hold_after_lines = 5
    fake_llm.hold()
    database = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{database['USER'] or 'postgres'}@{database['HOST']}:"
        f"{database['PORT'] or 5432}/{database['NAME']}",
        "JUDGING_BATCH_STORE_CHUNK": "2",
    }
    poller = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from judging.services import batch; "
            "batch.batches_poll(force=True)",
        ],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "mentalbench.settings"},
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: RunItem.objects.filter(run=run, status="done").count() == 4,
            timeout=60,
            what="the poller to store its first two chunks",
        )
        wait_for(
            lambda: fake_llm.held_with_client_connected() == 1,
            timeout=30,
            what="the download to stall",
        )
    finally:
        os.killpg(poller.pid, signal.SIGKILL)
        poller.wait(timeout=10)
        fake_llm.release()
    assert Rating.objects.filter(run=run).count() == 4
    run = poll_until_settled(run)
    assert run.status == Run.Status.DONE
    assert Rating.objects.filter(run=run).count() == 6
    assert Score.objects.filter(rating__run=run).count() == 6 * len(ATTRIBUTES)
    assert sum(RunItem.objects.filter(run=run).values_list("billed_completions", flat=True)) == 6


# ------------------------------------------------------------------------------ cancel, resume


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_cancel_mid_batch_keeps_what_came_back_and_resume_finishes_once(
    provider, endpoint_factory, fake_llm
):
    study, _ = texts_study_make(texts={f"t{i}": f"text {i}" for i in range(8)})
    fake_llm.batch_polls = 2
    run = launch(study, batch_endpoint(endpoint_factory, provider))
    batch.batches_poll(force=True)  # half of the requests answered at the provider
    services.run_cancel(run_id=run.id)
    assert batch.run_cancel_batches(run_id=run.id) == 1
    assert (
        fake_llm.batch_calls[
            "batches.cancel" if provider == "openai" else "messages.batches.cancel"
        ]
        == 1
    )
    run = poll_until_settled(run)
    assert run.status == Run.Status.CANCELLED
    assert RunItem.objects.filter(run=run, status="done").count() == 4
    assert RunItem.objects.filter(run=run, status="pending").count() == 4
    assert Rating.objects.filter(run=run).count() == 4
    services.run_resume(run_id=run.id)
    batch.run_submit(run_id=run.id)
    run = poll_until_settled(run)
    assert run.status == Run.Status.DONE
    assert Rating.objects.filter(run=run).count() == 8
    assert set(RunItem.objects.filter(run=run).values_list("attempts", flat=True)) == {1}


def test_the_sweeper_and_stale_work_messages_leave_batch_runs_to_the_poller(
    study, endpoint_factory, fake_llm
):
    fake_llm.reset()
    run = launch(study, batch_endpoint(endpoint_factory, "openai"))
    Run.objects.filter(id=run.id).update(heartbeat_at=None)
    assert services.run_sweep(run_id=run.id) == ""
    services.run_work(run_id=run.id)  # a stale message claims nothing
    assert RunItem.objects.filter(run=run, claim_token="").count() == 0
    assert fake_llm.counts.total() == 0  # no live request was made
    run = poll_until_settled(run)
    assert run.status == Run.Status.DONE and Rating.objects.filter(run=run).count() == 6


# ------------------------------------------------------------------------------ cost


def test_cost_estimate_counts_tokens_with_anthropic_and_chars_elsewhere(
    study, endpoint_factory, fake_llm
):
    prompts = [("system prompt " * 10, "user text " * 40)] * 3
    anthropic = batch_endpoint(endpoint_factory, "anthropic")
    estimate = costs.cost_estimate(endpoint=anthropic, prompts=prompts, repeats=2, max_tokens=100)
    assert estimate.method == "count_tokens"
    assert fake_llm.batch_calls["messages.count_tokens"] == 3
    per_prompt = (len(prompts[0][0]) + 3) // 4 + (len(prompts[0][1]) + 3) // 4
    assert estimate.input_tokens == pytest.approx(per_prompt * 3 * 2, abs=2)
    assert estimate.requests == 6 and estimate.output_tokens == 600
    assert estimate.immediate_usd == pytest.approx((estimate.input_tokens * 2.5 + 600 * 10.0) / 1e6)
    assert estimate.batch_usd == pytest.approx((estimate.input_tokens * 1.25 + 600 * 5.0) / 1e6)

    openai = batch_endpoint(endpoint_factory, "openai")
    estimate = costs.cost_estimate(endpoint=openai, prompts=prompts, repeats=1, max_tokens=100)
    assert estimate.method == "chars/4"
    assert estimate.input_tokens == -(-3 * (len(prompts[0][0]) + len(prompts[0][1])) // 4)


def test_the_launch_form_estimates_as_it_is_filled_and_launches_in_one_step(
    client, study, endpoint_factory, fake_llm, django_capture_on_commit_callbacks
):
    from django.contrib.auth import get_user_model
    from django.urls import reverse

    from annotation.models import Rater

    user = get_user_model().objects.create_user("boss", password="pw-123456", is_staff=True)
    client.force_login(user)
    endpoint = batch_endpoint(endpoint_factory, "anthropic")
    data = {
        "study": study.pk,
        "endpoint": endpoint.pk,
        "mode": "batch",
        "subset": "all",
        "sample_seed": 0,
        "repeats": 1,
        "max_tokens": 1024,
        "max_output_attempts": 3,
        "concurrency": 8,
        "parallel_tasks": 1,
    }
    estimate = client.get(reverse("judging:run_estimate", args=["judge"]), data)
    html = estimate.content.decode()
    assert estimate.status_code == 200 and "What this run would cost" in html
    assert "token-counting endpoint" in html and "Batch" in html
    assert not Run.objects.exists() and not Rater.objects.filter(name=endpoint.name).exists()
    half = client.get(reverse("judging:run_estimate", args=["judge"]), {"mode": "batch"})
    assert "Choose a study and an endpoint" in half.content.decode()
    # Study and endpoint chosen, a sample without its size yet (typed, not left): the estimate
    # names the field, not a study that is there.
    unsized = client.get(
        reverse("judging:run_estimate", args=["judge"]), {**data, "subset": "sample"}
    ).content.decode()
    assert "Sample size: A sample needs a size." in unsized
    assert "Choose a study" not in unsized
    with django_capture_on_commit_callbacks(execute=False):
        answer = client.post(reverse("judging:judge_new"), data)
    run = Run.objects.get()
    assert answer.status_code == 302 and run.mode == Run.Mode.BATCH
    assert run.cost_estimate["requests"] == 6 and run.cost_estimate["method"] == "count_tokens"
    assert run.cost_estimate["batch_usd"] < run.cost_estimate["immediate_usd"]
    assert "Batch (provider batch interface" in client.get(answer.url).content.decode()


# ------------------------------------------------------------------------------ Celery and beat


def test_beat_schedules_the_batch_poll():
    from django.conf import settings

    from mentalbench.celery import app

    app.loader.import_default_modules()
    (entry,) = [e for e in app.conf.beat_schedule.values() if e["task"].endswith("batches_poll")]
    assert entry["task"] == "judging.tasks.batches_poll"
    assert entry["schedule"].total_seconds() == settings.JUDGING_BATCH_POLL_SECONDS


@pytest.fixture
def _fast_batch_polls(monkeypatch):
    # Read by the worker and beat processes, which inherit the environment.
    monkeypatch.setenv("JUDGING_BATCH_POLL_SECONDS", "1")
    monkeypatch.setenv("JUDGING_BATCH_POLL_MAX_SECONDS", "1")


@pytest.mark.slow
def test_a_batch_run_on_real_workers_and_beat_survives_their_restart(
    _fast_batch_polls, celery_worker_factory, endpoint_factory, fake_llm
):
    study, _ = texts_study_make(texts={f"t{i}": f"text {i}" for i in range(10)})
    fake_llm.batch_polls = 1_000_000  # the provider holds every answer until told otherwise
    worker = celery_worker_factory("worker.log")
    beat = celery_worker_factory("beat.log", beat=True)
    # Launched like the admin page does: batch_submit goes to Redis when the launch commits.
    run = services.judge_run_create(
        study_id=study.id, endpoint=batch_endpoint(endpoint_factory, "openai"), mode="batch"
    )
    wait_for(
        lambda: ProviderBatch.objects.filter(run=run, status="in_progress").exists(),
        timeout=60,
        what="the worker to submit the batch",
    )
    wait_for(
        lambda: ProviderBatch.objects.filter(run=run, poll_attempts__gte=2).exists(),
        timeout=60,
        what="beat to poll it",
    )
    worker.kill()
    beat.kill()
    fake_llm.batch_polls = 1  # the batch ends at its next poll
    celery_worker_factory("worker-2.log")
    celery_worker_factory("beat-2.log", beat=True)
    wait_for(lambda: (run.refresh_from_db() or run.status) == "done", timeout=90, what="done")
    assert Rating.objects.filter(run=run, status="complete").count() == 10
    assert Score.objects.filter(rating__run=run).count() == 10 * len(ATTRIBUTES)
    assert ProviderBatch.objects.filter(run=run).count() == 1


@pytest.mark.slow
def test_a_batch_run_submits_within_a_minute_beside_a_long_immediate_run(
    _fast_batch_polls, celery_worker_factory, endpoint_factory, fake_llm
):
    """The processes of bin/up and docker compose: a run worker with 2 processes, an upkeep
    worker and beat. An immediate run holds both run processes (parallel tasks 2) for minutes;
    the batch run beside it is submitted and polled on time, and the sweeper keeps sweeping."""
    from tests.fakes.llm_server import FakeLLMServer

    study, _ = texts_study_make(texts={f"t{i}": f"text {i}" for i in range(10)})
    fake_llm.batch_polls = 1_000_000  # the batch stays open: this is about submit and polls
    with FakeLLMServer(delay=3.0) as slow:
        long_study = study_make(
            name="long run",
            conversations=100,
            responders=("gpt4o", "llama_3"),
            context=case_context,
            text=case_reply,
        )
        celery_worker_factory("runs.log", concurrency=2, queues="runs")
        upkeep = celery_worker_factory("upkeep.log", concurrency=1, queues="upkeep")
        celery_worker_factory("beat.log", beat=True)
        long_run = services.judge_run_create(
            study_id=long_study.id,
            endpoint=endpoint_factory("openai", base_url=slow.openai_base_url),
            concurrency=2,
            parallel_tasks=2,  # both run processes: 200 items at 3 s, 2 at a time = 5 minutes
        )
        wait_for(lambda: slow.in_flight == 2, timeout=60, what="the long run to hold both")
        launched = time.monotonic()
        run = services.judge_run_create(
            study_id=study.id, endpoint=batch_endpoint(endpoint_factory, "openai"), mode="batch"
        )
        wait_for(
            lambda: ProviderBatch.objects.filter(run=run, status="in_progress").exists(),
            timeout=60,
            what="the batch run beside the long run to be submitted",
        )
        submitted_s = time.monotonic() - launched
        wait_for(
            lambda: ProviderBatch.objects.filter(run=run, poll_attempts__gte=2).exists(),
            timeout=30,
            what="beat's polls of it to run",
        )
        long_run.refresh_from_db()
        assert long_run.status == Run.Status.RUNNING  # it held the run processes all along
        assert RunItem.objects.filter(run=long_run, status="pending").count() > 150
        sweeps = len(re.findall(r"runs_sweep\[[^]]+\] succeeded", upkeep.log.read_text()))
        assert sweeps >= 4, f"{sweeps} sweeps ran beside the long run"  # 1 s period (fixture)
        services.run_cancel(run_id=long_run.id)
        wait_for(
            lambda: (long_run.refresh_from_db() or long_run.status) == "cancelled",
            timeout=30,
            what="the long run to let go",
        )
    print(f"batch submitted {submitted_s:.1f} s after launch beside a run holding every run slot")


# ------------------------------------------------------------------------------ other run kinds


def test_generation_and_labelling_runs_in_batch_mode(endpoint_factory, fake_llm):
    from annotation.models import LabelAnnotation, Response

    study = study_make(
        name=f"gen {uuid.uuid4().hex[:6]}",
        conversations=3,
        responders=("gpt4o",),
        context=case_context,
        text=case_reply,
    )
    endpoint = endpoint_factory(
        "openai_compatible", name=f"vllm-{uuid.uuid4().hex[:4]}", supports_batch=True
    )
    run = services.generation_run_create(study_id=study.id, endpoint=endpoint, mode="batch")
    batch.run_submit(run_id=run.id)
    run = poll_until_settled(run)
    assert run.status == Run.Status.DONE
    generated = Response.objects.filter(responder=run.responder)
    assert generated.count() == 3
    assert all(r.text and r.metadata["run_id"] == run.id for r in generated)
    assert all(r.metadata["input_tokens"] > 0 for r in generated)

    labelling = distortion_study_make(
        messages=["I am a failure. " + script("Labeling", "Mental Filter")]
    )
    run = services.labelling_run_create(
        study_id=labelling.id,
        endpoint=batch_endpoint(endpoint_factory, "anthropic"),
        repeats=2,
        mode="batch",
    )
    batch.run_submit(run_id=run.id)
    run = poll_until_settled(run)
    assert run.status == Run.Status.DONE
    assert sorted(
        tuple(a.labels) for a in LabelAnnotation.objects.filter(run=run, status="complete")
    ) == [("Labeling",), ("Mental Filter",)]
