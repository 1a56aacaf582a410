"""Judge and generation runs end to end against the fake LLM server over real HTTP.

The work loop (`services.run_work`) runs in the test process here; tests/judging/test_worker.py
runs it on real Celery workers. No SDK is monkeypatched.
"""

from __future__ import annotations

import logging
import threading
import uuid

import pytest
import redis
from django.db import OperationalError, connection

from annotation.models import Rating, Response, Score
from annotation.selectors import study_rubric
from judging import selectors, services
from judging.models import ModelEndpoint, Run, RunItem
from judging.prompts import GENERATION_SYSTEM_PROMPT
from judging.ratelimit import LimiterUnavailable, RedisRateLimiter
from judging.services import Outcome
from scoring.parsing import parse_judge_output
from tests.celery_workers import wait_for
from tests.factories import case_context, case_reply, study_make, texts_study_make

from .conftest import API_KEY, LIMITER_REDIS_URL
from .runs import ATTRIBUTES, judge, marker


def ratings(run: Run) -> list[Rating]:
    return list(Rating.objects.filter(run=run).prefetch_related("scores").order_by("id"))


# ------------------------------------------------------------------------------ judge runs


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_judge_run_stores_one_complete_rating_per_item_and_repeat(
    study, endpoint_factory, fake_llm, provider
):
    endpoint = endpoint_factory(provider)
    run = judge(study, endpoint, repeats=2, temperature=0.5)
    assert run.status == Run.Status.DONE and run.finished_at
    stored = ratings(run)
    assert len(stored) == 6 * 2
    assert {(r.response_id, r.repeat) for r in stored} == {
        (response.id, k)
        for response in Response.objects.filter(conversation__study=study)
        for k in (0, 1)
    }
    for rating in stored:
        assert rating.status == Rating.Status.COMPLETE and rating.source == Rating.Source.JUDGE
        assert rating.rater == run.rater and rating.rater.kind == "judge"
        assert sorted(s.attribute.name for s in rating.scores.all()) == sorted(ATTRIBUTES)
        assert rating.raw_output and rating.rationale and rating.overall is not None
    progress = selectors.run_progress(run=run)
    assert (progress.total, progress.done, progress.failed, progress.pending) == (12, 12, 0, 0)
    assert progress.input_tokens > 12 * 100 and progress.output_tokens > 0
    expected_cost = (progress.input_tokens * 2.5 + progress.output_tokens * 10.0) / 1e6
    assert progress.cost_usd == pytest.approx(expected_cost)


def test_judge_request_uses_the_study_rubric_prompt_and_json_mode(
    study, endpoint_factory, fake_llm
):
    endpoint = endpoint_factory("openai")
    run = judge(study, endpoint, subset="sample", sample_size=1, temperature=0.3, max_tokens=700)
    (item,) = RunItem.objects.filter(run=run)
    sent = [r for r in fake_llm.requests if item.response.text in str(r.body)][-1].body
    system, user = services.item_messages(item=item, rubric=study_rubric(study_id=study.id))
    assert sent["messages"] == [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]
    assert '"Guidance": X' in system and item.response.conversation.context in user
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["temperature"] == 0.3 and sent["max_completion_tokens"] == 700


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_judge_output_variants_are_parsed_or_recorded_as_failures(
    endpoint_factory, fake_llm, provider
):
    study, ids = texts_study_make(
        texts={
            "fenced": marker("fenced"),
            "prose": marker("prose"),
            "fraction": marker("fraction"),
            "think": marker("think"),
            "think_unopened": marker("think_unopened"),
            "reasoning_field": marker("reasoning_field"),
            "malformed": marker("malformed"),
            "missing_keys": marker("missing_keys", drop=2),
            "truncated": marker("truncated"),
            "think_truncated": marker("think_truncated"),
        }
    )
    run = judge(study, endpoint_factory(provider), max_output_attempts=2)
    by_label = {
        label: Rating.objects.prefetch_related("scores").get(run=run, response_id=response_id)
        for label, response_id in ids.items()
    }
    items = {i.response_id: i for i in RunItem.objects.filter(run=run)}
    # "malformed" is broken JSON whose attribute: value pairs are each unambiguous; the parser
    # accepts those (and only those), so it is rated.
    valid = (
        "fenced",
        "prose",
        "fraction",
        "think",
        "think_unopened",
        "reasoning_field",
        "malformed",
    )
    for label in valid:
        rating = by_label[label]
        assert rating.status == Rating.Status.COMPLETE, (label, rating.error)
        assert rating.scores.count() == len(ATTRIBUTES)
        assert items[ids[label]].status == RunItem.Status.DONE
    expected = {
        "missing_keys": "missing Helpfulness, Understanding",
        "truncated": "cut off by the token limit",
        "think_truncated": "only <think> reasoning",
    }
    for label, reason in expected.items():
        rating, item = by_label[label], items[ids[label]]
        assert rating.status == Rating.Status.INVALID, label
        assert rating.scores.count() == 0  # never a guessed score
        assert rating.raw_output  # the raw text is always kept
        assert reason in rating.error and reason in item.last_error, (label, rating.error)
        assert item.status == RunItem.Status.FAILED
        assert item.requests == 2  # re-asked up to max_output_attempts
        assert "attempt 1:" in item.last_error and "attempt 2:" in item.last_error
    progress = selectors.run_progress(run=run)
    assert (progress.done, progress.failed) == (7, 3)


def test_two_answers_that_disagree_are_re_asked_never_first_wins(endpoint_factory, fake_llm):
    study, ids = texts_study_make(
        texts={"once": marker("revised", n=1), "always": marker("revised", n="all")}
    )
    run = judge(study, endpoint_factory("openai"), max_output_attempts=2)
    items = {i.response_id: i for i in RunItem.objects.filter(run=run)}
    # The re-ask got one answer: that one is stored, not the draft's 1s of the first output.
    once = Rating.objects.prefetch_related("scores").get(run=run, response_id=ids["once"])
    assert once.status == Rating.Status.COMPLETE and once.scores.count() == len(ATTRIBUTES)
    assert "Actually, revised" not in once.raw_output
    assert items[ids["once"]].requests == 2
    # Every output ambiguous: an invalid rating with the raw text and the reason, no score.
    always = Rating.objects.get(run=run, response_id=ids["always"])
    assert always.status == Rating.Status.INVALID and not always.scores.exists()
    assert "Actually, revised" in always.raw_output
    assert "ambiguous: two answers" in always.error
    assert items[ids["always"]].status == RunItem.Status.FAILED
    assert items[ids["always"]].requests == 2


def test_429_with_retry_after_500_and_timeouts_are_retried_inside_one_item(
    endpoint_factory, fake_llm
):
    study, ids = texts_study_make(
        texts={
            "429": marker("429", n=2, retry_after=0.2),
            "500": marker("500", n=1),
            "slow": marker("slow", n=1, delay=3),
        }
    )
    run = judge(study, endpoint_factory("openai", timeout_s=0.5))
    # Two requests for "slow": the first (3 s) was given up at the 0.5 s timeout, not awaited.
    items = {i.response_id: i for i in RunItem.objects.filter(run=run)}
    assert items[ids["429"]].requests == 3
    assert items[ids["500"]].requests == 2
    assert items[ids["slow"]].requests == 2
    assert all(i.status == RunItem.Status.DONE for i in items.values())
    assert Rating.objects.filter(run=run, status=Rating.Status.COMPLETE).count() == 3


def test_the_run_rate_limit_spaces_requests_across_the_run(
    study, endpoint_factory, fake_llm, monkeypatch
):
    # The run's limiter records the waits it is told to make instead of sleeping them. One
    # request per 100 s: the slots are 100 s apart on Redis' clock, so the milliseconds a busy
    # machine adds between reservations are lost in the tolerance.
    waits: list[float] = []

    async def recording_sleep(seconds: float) -> None:
        waits.append(seconds)

    class RecordingLimiter(services.engine.RedisRateLimiter):
        def __init__(self, **options) -> None:
            super().__init__(**options, sleep=recording_sleep)

    monkeypatch.setattr(services.engine, "RedisRateLimiter", RecordingLimiter)
    endpoint = endpoint_factory("openai")
    run = services.judge_run_create(
        study_id=study.id, endpoint=endpoint, rate_limit=0.01, concurrency=32
    )
    try:
        services.run_work(run_id=run.id)
    finally:
        # The slots reach 10 minutes ahead: leave nothing for a later endpoint with this id.
        client = redis.Redis.from_url(LIMITER_REDIS_URL)
        for key in client.scan_iter(match=f"mentalbench:ratelimit:endpoint-{endpoint.id}:*"):
            client.delete(key)
        client.close()
    assert Rating.objects.filter(run=run).count() == 6
    # 6 requests, 32 allowed at once, one run-wide budget: the first goes at once, the others
    # wait 1 to 5 intervals.
    assert sorted(waits) == pytest.approx([100.0, 200.0, 300.0, 400.0, 500.0], abs=5)


def test_more_requests_in_flight_than_redis_connections_fail_no_item(endpoint_factory):
    # Every request in flight asks the run's Redis rate limiter for a slot at the same moment:
    # more of them than the Redis client's pool made items fail with "Too many connections".
    study = study_make(
        name="Wide run", conversations=75, context=case_context, text=case_reply
    )  # 4 responders: 300 items
    run = judge(study, endpoint_factory("openai"), concurrency=150)
    assert run.status == Run.Status.DONE
    assert not RunItem.objects.filter(run=run).exclude(status=RunItem.Status.DONE).exists()
    assert Rating.objects.filter(run=run, status=Rating.Status.COMPLETE).count() == 300


@pytest.mark.slow
def test_ten_thousand_items_at_concurrency_200_store_every_rating(endpoint_factory):
    # The throughput benchmark's load (docs/benchmarks.md) in one work loop: 200 requests in
    # flight, each with its rate-limiter slot and its HTTP connection, and every rating stored.
    study = study_make(name="Benchmark-sized run", conversations=2500)  # 4 responders
    run = judge(study, endpoint_factory("openai"), concurrency=200)
    assert run.status == Run.Status.DONE
    items = RunItem.objects.filter(run=run)
    assert items.count() == 10_000
    assert not items.exclude(status=RunItem.Status.DONE).exists()
    assert Rating.objects.filter(run=run, status=Rating.Status.COMPLETE).count() == 10_000
    assert Score.objects.filter(rating__run=run).count() == 10_000 * len(ATTRIBUTES)


def test_a_rate_limiter_redis_that_stays_away_puts_items_back_instead_of_failing_them(
    study, endpoint_factory, monkeypatch
):
    # The limiter's Redis gave up (after redis-py's own retries) on the first 4 slots asked for:
    # those items go back to the queue, as after a 429, and are asked again.
    refusals = iter(range(4))
    reserve = RedisRateLimiter.reserve

    async def flaky_reserve(self: RedisRateLimiter) -> float:
        if next(refusals, None) is not None:
            raise LimiterUnavailable("rate limiter: Redis unavailable: Connection refused")
        return await reserve(self)

    monkeypatch.setattr(RedisRateLimiter, "reserve", flaky_reserve)
    run = judge(study, endpoint_factory("openai"), concurrency=2)
    assert run.status == Run.Status.DONE
    items = list(RunItem.objects.filter(run=run))
    assert {item.status for item in items} == {RunItem.Status.DONE}
    assert sum(item.attempts for item in items) == len(items) + 4  # each refusal: one more claim
    assert Rating.objects.filter(run=run, status=Rating.Status.COMPLETE).count() == len(items)


def test_a_deadlock_while_claiming_is_tried_again_not_the_end_of_the_loop(
    study, endpoint_factory, monkeypatch
):
    claim = services.engine.items_claim
    calls = {"n": 0}

    def deadlocked_once(**options: object) -> list[RunItem]:
        calls["n"] += 1
        if calls["n"] == 1:
            cause = type("DeadlockDetected", (Exception,), {"sqlstate": "40P01"})()
            raise OperationalError("deadlock detected") from cause
        return claim(**options)

    monkeypatch.setattr(services.engine, "items_claim", deadlocked_once)
    run = judge(study, endpoint_factory("openai"))
    assert calls["n"] >= 2
    assert run.status == Run.Status.DONE
    assert Rating.objects.filter(run=run, status=Rating.Status.COMPLETE).count() == 6


def test_persistent_server_errors_fail_the_item_with_the_reason_and_no_rating(
    endpoint_factory, fake_llm
):
    study, ids = texts_study_make(texts={"bad": marker("500", n="all", status=503), "ok": "fine"})
    run = judge(study, endpoint_factory("anthropic"))
    failed = RunItem.objects.get(run=run, response_id=ids["bad"])
    assert failed.status == RunItem.Status.FAILED
    assert "HTTP 503" in failed.last_error and "gave up after 5 attempts" in failed.last_error
    assert not Rating.objects.filter(run=run, response_id=ids["bad"]).exists()
    assert run.status == Run.Status.DONE
    assert selectors.run_failure_reasons(run=run)[0]["count"] == 1


def test_failure_reasons_count_every_failed_item_and_mark_a_cut_reason(endpoint_factory):
    study, ids = texts_study_make(texts={f"t{i}": "fine" for i in range(4)})
    run = Run.objects.create(
        study=study, endpoint=endpoint_factory("openai"), kind=Run.Kind.JUDGE, rater=None
    )
    long_reason = "no valid judge output; " + "attempt: no JSON object found; " * 6
    errors = [long_reason + "tail one", long_reason + "tail two", "HTTP 503", ""]
    RunItem.objects.bulk_create(
        RunItem(run=run, response_id=ids[f"t{i}"], status=RunItem.Status.FAILED, last_error=e)
        for i, e in enumerate(errors)
    )
    reasons = selectors.run_failure_reasons(run=run)
    assert reasons[0] == {"reason": long_reason[:120] + "…", "count": 2}
    assert {"reason": "HTTP 503", "count": 1} in reasons
    assert {"reason": "unknown", "count": 1} in reasons


def test_bad_api_key_stops_the_run_and_never_shows_the_key(
    study, endpoint_factory, fake_llm, caplog
):
    caplog.set_level(logging.DEBUG)
    endpoint = endpoint_factory("openai")
    study_texts, ids = texts_study_make(texts={"a": marker("401"), "b": marker("500", n=1)})
    run = judge(study_texts, endpoint)
    assert run.status == Run.Status.FAILED
    assert "HTTP 401" in run.error and API_KEY not in run.error
    assert API_KEY not in caplog.text
    assert API_KEY not in "".join(
        RunItem.objects.filter(run=run).values_list("last_error", flat=True)
    )
    # The 401 item is not failed: fixing the key and resuming rates it.
    assert not RunItem.objects.filter(run=run, status=RunItem.Status.FAILED).exists()


def test_key_from_environment_variable(study, endpoint_factory, fake_llm, monkeypatch):
    endpoint = endpoint_factory("openai", api_key="", api_key_env="MENTALBENCH_KEY_TEST_JUDGE")
    run = judge(study, endpoint, subset="sample", sample_size=2)
    assert run.status == Run.Status.FAILED
    assert "MENTALBENCH_KEY_TEST_JUDGE" in run.error and "not set" in run.error
    monkeypatch.setenv("MENTALBENCH_KEY_TEST_JUDGE", "sk-from-env-0123456789")
    services.run_resume(run_id=run.id)
    services.run_work(run_id=run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.DONE and Rating.objects.filter(run=run).count() == 2


def test_subsets_and_self_preference_exclusion(study, endpoint_factory, fake_llm):
    from annotation.models import Rater
    from annotation.services import clinician_rater_get_or_create

    # A judge of the gpt-4o family never rates gpt4o responses (the paper's exclusion).
    own = endpoint_factory("openai", name="gpt-4o judge", family="openai-gpt4o")
    run = judge(study, own, subset="sample", sample_size=2, sample_seed=7)
    rated = set(Rating.objects.filter(run=run).values_list("response__responder__key", flat=True))
    assert rated == {"llama_3"}
    # "unrated": only what this judge has not rated yet.
    rest = judge(study, own, subset="unrated")
    assert RunItem.objects.filter(run=rest).count() == 1
    # A sample is reproducible from its seed.
    other = endpoint_factory("openai")
    first = services.judge_targets(
        study_id=study.id,
        rater=services.judge_rater_for_endpoint(endpoint=other),
        subset="sample",
        sample_size=3,
        sample_seed=1,
    )
    again = services.judge_targets(
        study_id=study.id,
        rater=Rater.objects.get(name=other.name),
        subset="sample",
        sample_size=3,
        sample_seed=1,
    )
    assert first == again and len(first) == 3
    # "clinician": only responses a clinician has rated.
    clinician = clinician_rater_get_or_create(name="dr test")
    response = Response.objects.filter(conversation__study=study).first()
    Rating.objects.create(rater=clinician, response=response, status="complete", source="form")
    run = judge(study, other, subset="clinician")
    assert list(RunItem.objects.filter(run=run).values_list("response_id", flat=True)) == [
        response.id
    ]


def test_running_the_work_again_stores_nothing_twice(study, endpoint_factory, fake_llm):
    run = judge(study, endpoint_factory("openai"))
    before = fake_llm.counts.total() if hasattr(fake_llm.counts, "total") else None
    run.status = Run.Status.RUNNING
    run.save(update_fields=["status"])
    services.run_work(run_id=run.id)  # a redelivered task
    assert Rating.objects.filter(run=run).count() == 6
    assert Score.objects.filter(rating__run=run).count() == 6 * len(ATTRIBUTES)
    if before is not None:
        assert fake_llm.counts.total() == before  # nothing was asked again


def test_a_stolen_claim_cannot_store(study, endpoint_factory, monkeypatch):
    """A worker whose lease ran out stores nothing; the new owner stores exactly once."""
    endpoint = endpoint_factory("openai")
    run = services.judge_run_create(
        study_id=study.id, endpoint=endpoint, subset="sample", sample_size=1
    )
    plan = services.RunPlan.load(run)
    (slow,) = services.items_claim(run_id=run.id, token="slow-worker", limit=10)
    monkeypatch.setattr(services.claims, "LEASE_SECONDS", 0.0)
    (taker,) = services.items_claim(run_id=run.id, token="new-worker", limit=10)
    assert taker.id == slow.id and taker.attempts == 2
    parse = parse_judge_output(
        '{"Guidance": 4, "Informativeness": 4, "Relevance": 4, "Safety": 5, "Empathy": 4, '
        '"Helpfulness": 3, "Understanding": 4, "Overall": 4, "Explanation": "ok"}',
        ATTRIBUTES,
    )
    outcome = Outcome(raw_output="{...}", parse=parse)
    assert (
        services.judge_item_store(item=slow, token="slow-worker", outcome=outcome, plan=plan)
        is False
    )
    assert services.judge_item_store(item=taker, token="new-worker", outcome=outcome, plan=plan)
    # The same result delivered twice (a redelivered chunk) is stored once.
    assert (
        services.judge_item_store(item=taker, token="new-worker", outcome=outcome, plan=plan)
        is False
    )
    assert Rating.objects.filter(run=run).count() == 1
    assert Score.objects.filter(rating__run=run).count() == len(ATTRIBUTES)


def test_retry_failures_replaces_the_invalid_rating(endpoint_factory, fake_llm):
    study, ids = texts_study_make(texts={"bad": marker("missing_keys"), "ok": "fine"})
    endpoint = endpoint_factory("openai")
    run = judge(study, endpoint, max_output_attempts=1)
    assert Rating.objects.get(run=run, response_id=ids["bad"]).status == Rating.Status.INVALID
    # The server is "fixed": the malformed marker is gone from the response text.
    Response.objects.filter(id=ids["bad"]).update(text="Try a regular bedtime. fixed")
    assert services.run_retry_failures(run_id=run.id) == 1
    services.run_work(run_id=run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    rating = Rating.objects.get(run=run, response_id=ids["bad"])
    assert rating.status == Rating.Status.COMPLETE and rating.scores.count() == len(ATTRIBUTES)
    assert Rating.objects.filter(run=run).count() == 2


def test_offline_vllm_is_refused_for_judging(study, endpoint_factory):
    endpoint = endpoint_factory("vllm_offline", base_url="")
    with pytest.raises(services.RunError, match="generation runs"):
        services.judge_run_create(study_id=study.id, endpoint=endpoint)


# ------------------------------------------------------------------------------ cancel/resume


@pytest.mark.django_db(transaction=True)
def test_cancel_abandons_requests_in_flight_and_resume_finishes_exactly_once(endpoint_factory):
    from tests.fakes.llm_server import FakeLLMServer

    with FakeLLMServer(delay=0.3) as slow_server:
        study = study_make(
            name="cancel study",
            conversations=100,
            responders=("gpt4o", "llama_3"),
            context=case_context,
            text=case_reply,
        )
        endpoint = endpoint_factory("openai", base_url=slow_server.openai_base_url, timeout_s=120)
        run = services.judge_run_create(study_id=study.id, endpoint=endpoint, concurrency=8)

        def work() -> None:
            try:
                services.run_work(run_id=run.id)
            finally:
                connection.close()

        worker = threading.Thread(target=work)
        worker.start()
        wait_for(
            lambda: RunItem.objects.filter(run=run, status="done").count() >= 8,
            timeout=20,
            what="the first results",
        )
        # The server keeps every answer from now on: the slots end up waiting on it, so the
        # loop can only end by abandoning requests in flight, as a cancel must. The loop tops up
        # only when two of its 8 slots are free, so it settles with 7 or 8 requests held; once
        # every request in flight is held and at least 7 are, it sends nothing more.
        slow_server.hold()
        wait_for(
            lambda: slow_server.held_with_client_connected() == slow_server.in_flight >= 7,
            timeout=60,
            what="7 or 8 requests held, none still being answered",
        )
        sent_before_cancel = len(slow_server.requests)
        services.run_cancel(run_id=run.id)
        worker.join(timeout=60)  # a bound for a broken loop, not a speed limit
        stopped = not worker.is_alive()
        slow_server.release()
        if not stopped:
            worker.join(timeout=60)
        assert stopped, "the cancelled loop kept waiting for its answers"
        assert len(slow_server.requests) == sent_before_cancel
        run.refresh_from_db()
        assert run.status == Run.Status.CANCELLED
        assert not RunItem.objects.filter(run=run, status="running").exists()
        done_before = RunItem.objects.filter(run=run, status="done").count()
        assert 8 <= done_before < 200
        assert Rating.objects.filter(run=run).count() == done_before

        services.run_resume(run_id=run.id)
        run.refresh_from_db()
        assert run.status == Run.Status.RUNNING
        endpoint.timeout_s = 10
        run.concurrency = 100
        run.save(update_fields=["concurrency"])
        services.run_work(run_id=run.id)
        run.refresh_from_db()
        assert run.status == Run.Status.DONE
        assert Rating.objects.filter(run=run).count() == 200
        assert (
            Rating.objects.filter(run=run).values("response_id", "repeat").distinct().count() == 200
        )


# ------------------------------------------------------------------------------ generation


def test_generation_run_stores_answers_with_metadata(endpoint_factory, fake_llm):
    study = study_make(
        name=f"generation {uuid.uuid4().hex[:6]}",
        conversations=4,
        responders=("gpt4o",),
        context=case_context,
        text=case_reply,
    )
    contexts = {
        "c0": "I feel anxious all the time.",
        "c1": "I cannot sleep. " + marker("think"),
        "c2": "Work is too much. " + marker("think_truncated"),
        "c3": "I feel alone. " + marker("reasoning_field"),
    }
    for conversation in study.conversations.all():
        conversation.context = contexts[conversation.external_id]
        conversation.save(update_fields=["context"])
    endpoint = endpoint_factory("openai_compatible", name="qwen3 fake", family="qwen")
    (run,) = services.generation_runs_create(study_id=study.id, endpoints=[endpoint])
    assert (run.temperature, run.max_tokens) == (0.7, 512)  # the paper's generation settings
    services.run_work(run_id=run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    stored = {
        r.conversation.external_id: r
        for r in Response.objects.filter(responder=run.responder).select_related("conversation")
    }
    assert set(stored) == {"c0", "c1", "c3"}
    plain = stored["c0"]
    assert plain.text and not plain.truncated
    meta = plain.metadata
    assert meta["run_id"] == run.id and meta["finish_reason"] == "stop"
    assert meta["input_tokens"] > 0 and meta["output_tokens"] > 0 and meta["latency_s"] > 0
    assert "<think>" not in stored["c1"].text and stored["c1"].metadata["thinking"]
    assert stored["c3"].metadata["thinking"]  # a separate reasoning channel is kept too
    failed = RunItem.objects.get(run=run, conversation__external_id="c2")
    assert failed.status == "failed" and "cut off by the token limit" in failed.last_error
    sent = fake_llm.requests_for(contexts["c1"].split(" ", 3)[-1])[0].body
    assert sent["messages"][0] == {"role": "system", "content": GENERATION_SYSTEM_PROMPT}
    assert sent["temperature"] == 0.7 and sent["max_tokens"] == 512
    # Generation again produces only what is missing: nothing new except the failed one.
    again = services.generation_run_create(study_id=study.id, endpoint=endpoint)
    assert RunItem.objects.filter(run=again).count() == 1


def test_generation_leaves_practice_conversations_alone(study, endpoint_factory):
    """A practice conversation's responses are the ones its reference scores describe."""
    practice = study.conversations.order_by("id").first()
    practice.practice = True
    practice.save(update_fields=["practice"])
    endpoint = endpoint_factory("openai_compatible", name="practice fake", family="qwen")
    run = services.generation_run_create(study_id=study.id, endpoint=endpoint)
    targets = set(RunItem.objects.filter(run=run).values_list("conversation_id", flat=True))
    assert targets == set(study.conversations.exclude(id=practice.id).values_list("id", flat=True))
    assert practice.id not in targets


def test_generation_marks_answers_cut_by_the_token_limit(study, endpoint_factory, fake_llm):
    endpoint = endpoint_factory("anthropic", name="haiku fake", family="anthropic")
    run = services.generation_run_create(study_id=study.id, endpoint=endpoint, max_tokens=20)
    services.run_work(run_id=run.id)
    answers = Response.objects.filter(responder=run.responder)
    assert answers.count() == 3
    assert all(r.truncated and r.metadata["finish_reason"] == "length" for r in answers)


def test_offline_vllm_generation_without_vllm_fails_the_run_with_the_reason(
    study, endpoint_factory
):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    endpoint = endpoint_factory("vllm_offline", base_url="", model="Qwen/Qwen2.5-7B-Instruct")
    run = services.generation_run_create(study_id=study.id, endpoint=endpoint)
    services.run_work(run_id=run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "'vllm' package" in run.error
    assert RunItem.objects.filter(run=run, status="pending").count() == 3  # resumable later
    assert ModelEndpoint.objects.filter(id=endpoint.id).exists()
