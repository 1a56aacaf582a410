"""The provider layer through the official SDKs, over real HTTP, against the fake LLM server.

No SDK is monkeypatched: every call goes openai/anthropic SDK → httpx → socket → aiohttp.
Django is not imported, so this module runs with `-p no:django` and no database.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from judging.prompts import DEFAULT_RUBRIC, judge_messages
from judging.providers import (
    Completion,
    EndpointConfig,
    PermanentError,
    RateLimited,
    TransientError,
    VLLMNotInstalled,
    backoff_delay,
    complete,
    complete_with_retries,
    generate_offline,
    make_client,
    parse_retry_after,
    redact,
)
from judging.ratelimit import LocalRateLimiter, RedisRateLimiter
from scoring.parsing import strip_think
from tests.conftest import worker_redis_url
from tests.fakes.llm_server import FakeLLMServer, scenario

API_KEY = "sk-test-Sup3rS3cretKeyThatMustNeverLeak-0123456789"
REDIS_URL = worker_redis_url(os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15"))
PROTOCOLS = ["openai", "anthropic"]
ATTRIBUTES = [a["name"] for a in DEFAULT_RUBRIC]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


def endpoint(server: FakeLLMServer, provider: str, **overrides: Any) -> EndpointConfig:
    base_url = server.anthropic_base_url if provider == "anthropic" else server.openai_base_url
    options: dict[str, Any] = {
        "provider": provider,
        "model": f"fake-{provider}",
        "base_url": base_url,
        "api_key": API_KEY,
        "timeout": 5.0,
    }
    options.update(overrides)
    return EndpointConfig(**options)


def marker(name: str, **params: object) -> str:
    """A scenario marker unique to this call site, so 'first n calls' counters never collide."""
    return scenario(name, key=uuid.uuid4().hex[:10], **params)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def wait_until(condition: Callable[[], bool], *, what: str, timeout: float = 60) -> None:
    """Poll for an event; the timeout only bounds a broken run, it is not a speed limit."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g}s waiting for {what}")
        time.sleep(0.01)


async def async_wait_until(
    condition: Callable[[], bool], *, what: str, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.01)


def judge_prompt(extra: str = "") -> tuple[str, str]:
    system, user = judge_messages(
        "I can't sleep and I keep worrying about my exams.",
        "That sounds stressful. Try a regular bedtime and talk to someone you trust." + extra,
    )
    return system, user


# ------------------------------------------------------------------------------ success


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_judge_call_returns_parseable_json_with_usage(server: FakeLLMServer, provider: str) -> None:
    system, user = judge_prompt()
    result = run(
        complete(
            endpoint(server, provider),
            system=system,
            user=user,
            temperature=0.0,
            max_tokens=400,
            json_mode=True,
        )
    )
    assert isinstance(result, Completion)
    scores = json.loads(result.text)
    assert set(ATTRIBUTES) <= set(scores) and {"Overall", "Explanation"} <= set(scores)
    assert all(1 <= scores[name] <= 5 for name in ATTRIBUTES)
    assert result.finish_reason == "stop" and not result.truncated
    assert result.input_tokens and result.input_tokens > 100  # the rubric is long
    assert result.output_tokens and result.output_tokens > 0
    assert result.request_id and result.request_id.startswith("req_")
    assert result.model == f"fake-{provider}"
    assert result.latency_s > 0
    assert result.attempts == 1


def test_fake_scores_are_deterministic_per_prompt(server: FakeLLMServer) -> None:
    config = endpoint(server, "openai")
    system, user = judge_prompt()
    first = run(complete(config, system=system, user=user, max_tokens=400))
    again = run(complete(config, system=system, user=user, max_tokens=400))
    # A scenario marker does not change the scores: only the prompt does.
    fenced = run(complete(config, system=system, user=user + marker("fenced"), max_tokens=400))
    assert json.loads(first.text) == json.loads(again.text)
    assert json.loads(fenced.text.strip("`\njson")) == json.loads(first.text)


def test_openai_request_carries_system_params_and_json_mode(server: FakeLLMServer) -> None:
    tag = marker("ok")
    run(
        complete(
            endpoint(server, "openai", default_params={"top_p": 0.9, "top_k": 20}),
            system="SYS",
            user="hello " + tag,
            temperature=0.7,
            max_tokens=512,
            json_mode=True,
        )
    )
    (sent,) = server.requests_for(tag)
    body = sent.body
    assert body["messages"][0] == {"role": "system", "content": "SYS"}
    assert body["temperature"] == 0.7 and body["top_p"] == 0.9
    # OpenAI proper takes max_completion_tokens (its reasoning models reject max_tokens).
    assert body["max_completion_tokens"] == 512 and "max_tokens" not in body
    assert body["response_format"] == {"type": "json_object"}
    # A field the SDK does not name still reaches the server (through extra_body).
    assert body["top_k"] == 20
    assert "authorization" not in sent.headers  # the fake never records credentials


def test_the_workers_openai_account_variables_are_not_sent(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only what an endpoint configures reaches its server: not the worker's organization and
    project, which the SDK would otherwise send as headers."""
    monkeypatch.setenv("OPENAI_ORG_ID", "org-of-the-worker")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-of-the-worker")
    tag = marker("ok")
    run(complete(endpoint(server, "openai"), user="hello " + tag, max_tokens=64))
    (sent,) = server.requests_for(tag)
    assert "openai-organization" not in sent.headers
    assert "openai-project" not in sent.headers
    assert "worker" not in json.dumps(sent.headers)


def test_vllm_endpoint_sends_max_tokens_and_works_without_key(server: FakeLLMServer) -> None:
    tag = marker("ok")
    config = endpoint(server, "vllm", api_key=None)
    result = run(complete(config, user="hi " + tag, max_tokens=64))
    (sent,) = server.requests_for(tag)
    assert sent.body["max_tokens"] == 64 and "max_completion_tokens" not in sent.body
    assert result.text


def test_json_mode_can_be_disabled_for_servers_that_reject_it(server: FakeLLMServer) -> None:
    tag = marker("reject_json_mode")
    strict = endpoint(server, "openai_compatible")
    with pytest.raises(PermanentError, match="response_format"):
        run(complete(strict, user="x " + tag, max_tokens=50, json_mode=True))
    lenient = endpoint(server, "openai_compatible", supports_json_mode=False)
    result = run(complete(lenient, user="x " + tag, max_tokens=200, json_mode=True))
    assert result.finish_reason == "stop"
    assert "response_format" not in server.requests_for(tag)[-1].body


def test_reasoning_models_can_drop_temperature(server: FakeLLMServer) -> None:
    tag = marker("ok")
    config = endpoint(server, "openai", supports_temperature=False)
    run(complete(config, user="x " + tag, temperature=0.7, max_tokens=50))
    assert "temperature" not in server.requests_for(tag)[0].body


def test_anthropic_request_shape(server: FakeLLMServer) -> None:
    tag = marker("ok")
    run(
        complete(
            endpoint(server, "anthropic"),
            messages=[
                {"role": "system", "content": "SYS"},
                {"role": "user", "content": "hello " + tag},
            ],
            temperature=0.2,
            max_tokens=300,
            json_mode=True,
        )
    )
    (sent,) = server.requests_for(tag)
    assert sent.body["system"] == "SYS"
    assert sent.body["messages"] == [{"role": "user", "content": "hello " + tag}]
    assert sent.body["max_tokens"] == 300 and sent.body["temperature"] == 0.2
    assert "response_format" not in sent.body  # Anthropic has no JSON mode
    assert sent.headers.get("anthropic-version")


def test_anthropic_json_prefill_is_opt_in_and_restores_the_brace(server: FakeLLMServer) -> None:
    system, user = judge_prompt()
    tag = marker("ok")
    config = endpoint(server, "anthropic", json_prefill=True)
    result = run(complete(config, system=system, user=user + tag, max_tokens=400, json_mode=True))
    (sent,) = server.requests_for(tag)
    assert sent.body["messages"][-1] == {"role": "assistant", "content": "{"}
    assert set(ATTRIBUTES) <= set(json.loads(result.text))


# ------------------------------------------------------------------------------ rate limits


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_429_retry_after_is_honoured_then_succeeds(server: FakeLLMServer, provider: str) -> None:
    tag = marker("429", n=2, retry_after=0.2)
    waits: list[float] = []

    async def recording_sleep(seconds: float) -> None:
        waits.append(seconds)  # not slept: what is asked for is the behaviour under test

    result = run(
        complete_with_retries(
            endpoint(server, provider),
            user="x " + tag,
            max_tokens=50,
            base_delay=0.01,
            sleep=recording_sleep,
        )
    )
    assert result.attempts == 3
    assert len(server.requests_for(tag)) == 3
    # The base delay is 0.01 s: only the server's Retry-After makes each wait 0.2 s or more.
    assert len(waits) == 2 and all(w >= 0.2 for w in waits)


def test_retry_after_ms_header_is_used(server: FakeLLMServer) -> None:
    tag = marker("429", n=1, retry_after_ms=150)
    with pytest.raises(RateLimited) as caught:
        run(complete(endpoint(server, "openai"), user="x " + tag, max_tokens=20))
    assert caught.value.retry_after == pytest.approx(0.15)
    assert caught.value.status_code == 429


def test_retry_after_beyond_max_delay_is_raised_for_the_caller(server: FakeLLMServer) -> None:
    tag = marker("429", n=1, retry_after=120)
    limiter = LocalRateLimiter(rate=1000)
    with pytest.raises(RateLimited) as caught:
        run(
            complete_with_retries(
                endpoint(server, "openai"),
                user="x " + tag,
                max_tokens=20,
                max_delay=5,
                limiter=limiter,
            )
        )
    assert caught.value.retry_after == 120 and caught.value.attempts == 1
    assert len(server.requests_for(tag)) == 1
    # The limiter is paused for everyone for the server's requested time.
    assert limiter.reserve() > 100


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "0.25"}) == 0.25
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    now = 1_700_000_000.0
    date = "Tue, 14 Nov 2023 22:13:30 GMT"  # now + 10 s
    assert parse_retry_after({"retry-after": date}, now=now) == pytest.approx(10.0)
    assert parse_retry_after({"retry-after": date}, now=now + 60) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None


def test_http_date_retry_after_from_server(server: FakeLLMServer) -> None:
    tag = marker("429", n=1, http_date=3)
    with pytest.raises(RateLimited) as caught:
        run(complete(endpoint(server, "anthropic"), user="x " + tag, max_tokens=20))
    # HTTP-dates have one-second resolution.
    assert caught.value.retry_after is not None and 1.0 <= caught.value.retry_after <= 3.0


# ------------------------------------------------------------------------------ transient


@pytest.mark.parametrize(("provider", "status"), [("openai", 500), ("anthropic", 529)])
def test_server_error_then_success(server: FakeLLMServer, provider: str, status: int) -> None:
    tag = marker("500", n=1, status=status)
    result = run(
        complete_with_retries(
            endpoint(server, provider), user="x " + tag, max_tokens=50, base_delay=0.01
        )
    )
    assert result.attempts == 2
    assert len(server.requests_for(tag)) == 2


def test_gives_up_with_last_error_after_max_attempts(server: FakeLLMServer) -> None:
    tag = marker("500", n="all", status=503)
    with pytest.raises(TransientError) as caught:
        run(
            complete_with_retries(
                endpoint(server, "openai"),
                user="x " + tag,
                max_tokens=50,
                max_attempts=3,
                base_delay=0.01,
            )
        )
    assert caught.value.attempts == 3 and caught.value.status_code == 503
    assert len(server.requests_for(tag)) == 3


@pytest.mark.parametrize("provider", PROTOCOLS)
@pytest.mark.parametrize("html", [0, 1])
def test_http_200_body_that_is_not_json_is_transient_and_retried(
    server: FakeLLMServer, provider: str, html: int
) -> None:
    # A cut-off JSON body makes the SDK's decoder raise JSONDecodeError; an HTML page makes the
    # SDK hand back a string. Either used to escape the provider layer and kill the worker loop.
    tag = marker("not_json", n=1, html=html)
    config = endpoint(server, provider)
    with pytest.raises(TransientError, match="response body is not JSON"):
        run(complete(config, user="x " + tag, max_tokens=20))
    result = run(complete_with_retries(config, user="x " + tag, max_tokens=20, base_delay=0.01))
    assert result.attempts == 1 and result.text  # the marker's second call: a valid answer
    assert len(server.requests_for(tag)) == 2


def test_fake_server_counts_only_answers_a_client_received() -> None:
    with FakeLLMServer() as fake:
        config = endpoint(fake, "openai", timeout=10)
        impatient = endpoint(fake, "openai", timeout=0.3)
        received = run(complete(config, user="hello", max_tokens=50))
        with pytest.raises(TransientError):  # the client gives up before the answer comes
            run(complete(impatient, user="x " + marker("slow", n=1, delay=2), max_tokens=50))
        with pytest.raises(TransientError):
            run(complete(config, user="x " + marker("not_json"), max_tokens=50))
        # The slow answer is written after the client left: wait for the server to finish it.
        wait_until(lambda: fake.in_flight == 0, what="the abandoned slow request to end")
        assert fake.sent == {
            "completions": 1,
            "input_tokens": received.input_tokens,
            "output_tokens": received.output_tokens,
        }
        # The abandoned slow request was still in the server while the next one came.
        assert fake.counts["slow"] == 1 and fake.in_flight == 0 and fake.max_in_flight == 2


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_timeout_is_transient_and_retried(provider: str) -> None:
    # A server of its own: its slow handlers (60 s) are cancelled when it stops.
    with FakeLLMServer() as fake:
        tag = marker("slow", n=1, delay=60)
        # 1 s, not less: the server must have begun the request before the client gives up,
        # and on a loaded CI machine its loop took over 0.3 s to get there.
        config = endpoint(fake, provider, timeout=1.0)
        with pytest.raises(TransientError, match="no answer within"):
            run(complete(config, user="x " + tag, max_tokens=20))
        # The client gave up while the server was still working on the answer.
        assert fake.in_flight == 1 and fake.sent["completions"] == 0
        # The marker's first call was the slow one; a fresh marker for the retry test.
        tag = marker("slow", n=1, delay=60)
        result = run(complete_with_retries(config, user="x " + tag, max_tokens=20, base_delay=0.01))
        assert result.attempts == 2
        assert len(fake.requests_for(tag)) == 2


def test_connection_refused_is_transient() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    config = EndpointConfig(
        provider="openai_compatible",
        model="m",
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key=API_KEY,
        timeout=2,
    )
    with pytest.raises(TransientError, match="connection error") as caught:
        run(complete_with_retries(config, user="x", max_attempts=2, base_delay=0.01))
    assert caught.value.attempts == 2


def test_backoff_grows_and_stays_capped() -> None:
    low = [backoff_delay(n, base_delay=0.5, max_delay=4, rng=lambda: 0.0) for n in range(1, 7)]
    high = [backoff_delay(n, base_delay=0.5, max_delay=4, rng=lambda: 1.0) for n in range(1, 7)]
    assert low == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert high == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


# ------------------------------------------------------------------------------ permanent


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_bad_request_is_permanent_and_not_retried(server: FakeLLMServer, provider: str) -> None:
    tag = marker("400")
    with pytest.raises(PermanentError) as caught:
        run(complete_with_retries(endpoint(server, provider), user="x " + tag, max_tokens=20))
    assert caught.value.status_code == 400 and caught.value.attempts == 1
    assert len(server.requests_for(tag)) == 1


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_api_key_never_appears_in_errors_or_logs(
    server: FakeLLMServer, provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # the SDKs' and httpx's debug logs included
    config = endpoint(server, provider)
    with pytest.raises(PermanentError) as caught:
        run(complete_with_retries(config, user="x " + marker("401"), max_tokens=20))
    error = caught.value
    assert error.status_code == 401
    assert "Incorrect API key" in str(error)  # the server's message is kept...
    assert API_KEY not in str(error) and API_KEY not in repr(error)  # ...without the key
    assert error.__cause__ is None and error.__context__ is None
    # Retried failures are logged; none of it may carry the key either.
    run(
        complete_with_retries(
            config, user="x " + marker("500", n=1), max_tokens=20, base_delay=0.01
        )
    )
    assert any("retrying" in r.getMessage() for r in caplog.records)
    assert API_KEY not in caplog.text
    assert API_KEY not in repr(config)


def test_redact_removes_full_and_masked_keys() -> None:
    assert "Sup3r" not in redact(f"bad key {API_KEY}!", API_KEY)
    assert redact("Incorrect API key provided: sk-proj-abcd****wxyz.", None) == (
        "Incorrect API key provided: sk-proj-[redacted]."
    )


def test_client_of_the_wrong_kind_is_refused(server: FakeLLMServer) -> None:
    openai_client = make_client(endpoint(server, "openai"))
    with pytest.raises(PermanentError, match="does not match"):
        run(complete(endpoint(server, "anthropic"), user="x", client=openai_client))


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_missing_api_key_is_a_clear_permanent_error(
    server: FakeLLMServer, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    config = endpoint(server, provider, api_key=None)
    with pytest.raises(PermanentError, match="(?i)api.?key"):
        run(complete_with_retries(config, user="x", max_tokens=20))


def test_endpoint_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="unknown provider"):
        EndpointConfig(provider="cohere", model="m")
    with pytest.raises(ValueError, match="timeout"):
        EndpointConfig(provider="openai", model="m", timeout=0)
    with pytest.raises(ValueError, match="max_tokens_param"):
        EndpointConfig(provider="openai", model="m", max_tokens_param="tokens")


# ------------------------------------------------------------------------------ output shapes


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_truncation_is_marked(server: FakeLLMServer, provider: str) -> None:
    config = endpoint(server, provider)
    system, user = judge_prompt()
    short = run(complete(config, system=system, user=user, max_tokens=8))
    assert short.truncated and short.finish_reason == "length"
    assert short.raw_finish_reason == ("max_tokens" if provider == "anthropic" else "length")
    scripted = run(complete(config, system=system, user=user + marker("truncated"), max_tokens=400))
    assert scripted.truncated
    with pytest.raises(json.JSONDecodeError):
        json.loads(scripted.text)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_think_tags_are_stripped(server: FakeLLMServer, provider: str) -> None:
    config = endpoint(server, provider)
    system, user = judge_prompt()
    for name in ("think", "think_unopened"):
        result = run(complete(config, system=system, user=user + marker(name), max_tokens=600))
        answer, thinking = strip_think(result.text)
        assert set(ATTRIBUTES) <= set(json.loads(answer)), name
        assert "weigh the response" in thinking
    cut = run(
        complete(config, system=system, user=user + marker("think_truncated"), max_tokens=600)
    )
    answer, thinking = strip_think(cut.text)
    assert cut.truncated and answer == "" and thinking


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_separate_reasoning_channel_is_captured(server: FakeLLMServer, provider: str) -> None:
    system, user = judge_prompt()
    result = run(
        complete(
            endpoint(server, provider),
            system=system,
            user=user + marker("reasoning_field"),
            max_tokens=600,
        )
    )
    assert result.reasoning and "weigh the response" in result.reasoning
    assert set(ATTRIBUTES) <= set(json.loads(result.text))


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("fenced", lambda t: t.startswith("```json")),
        ("prose", lambda t: t.startswith("Here is") and "{" in t),
        ("malformed", lambda t: t.startswith("{")),
        ("missing_keys", lambda t: "Understanding" not in json.loads(t)),
        ("fraction", lambda t: json.loads(t)["Guidance"].endswith("/5")),
    ],
)
def test_fake_server_output_variants(server: FakeLLMServer, name: str, check: Any) -> None:
    system, user = judge_prompt()
    result = run(
        complete(
            endpoint(server, "openai"), system=system, user=user + marker(name), max_tokens=600
        )
    )
    assert check(result.text), result.text
    if name == "malformed":
        with pytest.raises(json.JSONDecodeError):
            json.loads(result.text)


@pytest.mark.parametrize(
    ("text", "answer", "thinking"),
    [
        ("plain answer", "plain answer", ""),
        ('<think>hmm</think>\n{"a": 1}', '{"a": 1}', "hmm"),
        ("  <THINK>\nhmm\n</THINK>answer", "answer", "hmm"),
        ("reasoning only closed</think>\nanswer", "answer", "reasoning only closed"),
        ("<think>cut off by the token li", "", "cut off by the token li"),
        ("<think>a</think>x<think>b</think>y", "xy", "a\n\nb"),
        ("<thinking>t</thinking>done", "done", "t"),
        ("", "", ""),
    ],
)
def test_strip_think(text: str, answer: str, thinking: str) -> None:
    assert strip_think(text) == (answer, thinking)


# ------------------------------------------------------------------------------ concurrency


def test_many_requests_in_flight_at_once() -> None:
    """100 requests on one client are all in the server's hands at once, not one after another.

    The server holds every request until all 100 have arrived, so the count is exact whatever
    the machine's load; a client that queued requests would never get there. (Throughput is
    measured in benchmarks/judge_throughput.py.)
    """
    with FakeLLMServer() as held_server:
        config = endpoint(held_server, "openai", timeout=60)
        held_server.hold()

        async def burst() -> tuple[list[Completion], int]:
            client = make_client(config)
            try:
                calls = [
                    asyncio.ensure_future(
                        complete(config, user=f"message {i}", max_tokens=50, client=client)
                    )
                    for i in range(100)
                ]
                await async_wait_until(
                    lambda: held_server.in_flight == 100, what="100 requests in flight"
                )
                peak = held_server.max_in_flight
                held_server.release()
                return await asyncio.gather(*calls), peak
            finally:
                await client.close()

        results, peak = run(burst())
    assert peak == 100
    assert len(results) == 100 and all(r.text for r in results)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_client_sized_for_its_concurrency_has_every_request_in_flight(provider: str) -> None:
    """make_client(max_connections=n): n requests at once are all in the server's hands (a work
    loop sizes its client's pool by its concurrency; the SDKs' default keeps only 100 open)."""
    with FakeLLMServer() as held_server:
        config = endpoint(held_server, provider, timeout=60)
        held_server.hold()

        async def burst() -> tuple[list[Completion], int]:
            client = make_client(config, max_connections=20)
            try:
                calls = [
                    asyncio.ensure_future(
                        complete(config, user=f"message {i}", max_tokens=50, client=client)
                    )
                    for i in range(20)
                ]
                await async_wait_until(
                    lambda: held_server.in_flight == 20, what="20 requests in flight"
                )
                peak = held_server.max_in_flight
                held_server.release()
                return await asyncio.gather(*calls), peak
            finally:
                await client.close()

        results, peak = run(burst())
    assert peak == 20
    assert len(results) == 20 and all(r.text for r in results)


# ------------------------------------------------------------------------------ limiters


def test_local_limiter_spaces_requests(server: FakeLLMServer) -> None:
    # A fake clock that only the limiter's sleeps move: the spacing is exact under any load.
    now = [100.0]
    tag = marker("ok")
    sent_before_wait: list[int] = []

    async def fake_sleep(seconds: float) -> None:
        sent_before_wait.append(len(server.requests_for(tag)))
        now[0] += seconds

    limiter = LocalRateLimiter(rate=20, clock=lambda: now[0], sleep=fake_sleep)
    config = endpoint(server, "openai")

    async def calls() -> None:
        client = make_client(config)
        try:
            for i in range(5):
                await complete_with_retries(
                    config, user=f"m{i} {tag}", max_tokens=10, client=client, limiter=limiter
                )
        finally:
            await client.close()

    run(calls())
    assert len(server.requests_for(tag)) == 5
    # 4 gaps of 50 ms, each waited before the next request went out.
    assert now[0] == pytest.approx(100.2)
    assert sent_before_wait == [1, 2, 3, 4]


def test_local_limiter_reservations_with_fake_clock() -> None:
    now = [100.0]
    limiter = LocalRateLimiter(rate=10, burst=3, clock=lambda: now[0])
    delays = [limiter.reserve() for _ in range(5)]
    assert delays == pytest.approx([0, 0, 0, 0.1, 0.2])
    now[0] += 10  # idle long enough: the burst is available again
    assert limiter.reserve() == 0
    run(limiter.pause(5))
    assert limiter.reserve() == pytest.approx(5.0)


@pytest.fixture
def redis_key() -> Iterator[str]:
    key = f"test-endpoint-{uuid.uuid4().hex}"
    yield key
    client = redis.Redis.from_url(REDIS_URL)
    try:
        leftover = list(client.scan_iter(match=f"mentalbench:ratelimit:{key}*"))
        if leftover:
            client.delete(*leftover)
    finally:
        client.close()


# The Redis limiters run on Redis' own clock, which a test cannot stop. Their tests use a slow
# rate (one request per 100 s) and long pauses, so the milliseconds a loaded machine takes
# between two calls are lost in the tolerance while a broken limiter is off by whole intervals.
SLOW_RATE = 0.01
INTERVAL = 100.0


def test_redis_limiter_shares_one_budget_across_instances(redis_key: str) -> None:
    async def scenario_() -> tuple[list[float], float]:
        # Two clients, as two worker processes would have.
        first = RedisRateLimiter(redis=REDIS_URL, key=redis_key, rate=SLOW_RATE)
        second = RedisRateLimiter(
            redis=aioredis.Redis.from_url(REDIS_URL), key=redis_key, rate=SLOW_RATE
        )
        other = RedisRateLimiter(redis=REDIS_URL, key=redis_key + "-other", rate=SLOW_RATE)
        try:
            delays = []
            for i in range(6):
                delays.append(await (first if i % 2 else second).reserve())
            independent = await other.reserve()
            return delays, independent
        finally:
            await first.aclose()
            await second._redis.aclose()
            await other.aclose()

    delays, independent = run(scenario_())
    # Each reservation lands one interval after the previous, whichever instance asked.
    expected = [i * INTERVAL for i in range(6)]
    assert delays == pytest.approx(expected, abs=5)
    assert independent == 0.0


def test_redis_limiter_acquire_waits_across_instances(redis_key: str) -> None:
    waits: list[float] = []

    async def recording_sleep(seconds: float) -> None:
        waits.append(seconds)  # not slept: the slot each caller waits for is what is tested

    async def scenario_() -> None:
        first = RedisRateLimiter(
            redis=REDIS_URL, key=redis_key, rate=SLOW_RATE, sleep=recording_sleep
        )
        second = RedisRateLimiter(
            redis=REDIS_URL, key=redis_key, rate=SLOW_RATE, sleep=recording_sleep
        )
        try:
            await asyncio.gather(*(lim.acquire() for lim in [first, second] * 3))
        finally:
            await first.aclose()
            await second.aclose()

    run(scenario_())
    # 6 requests, one budget: the first goes at once, the others wait 1 to 5 intervals.
    expected = [i * INTERVAL for i in range(1, 6)]
    assert sorted(waits) == pytest.approx(expected, abs=5)


def test_redis_pause_stops_everyone_and_keys_expire(redis_key: str) -> None:
    async def scenario_() -> tuple[float, float, int, int]:
        first = RedisRateLimiter(redis=REDIS_URL, key=redis_key, rate=100)
        second = RedisRateLimiter(redis=REDIS_URL, key=redis_key, rate=100)
        try:
            await first.pause(50)
            await first.pause(10)  # a shorter pause never shortens the current one
            paused = await second.paused_for()
            delay = await second.reserve()
            raw = second._redis
            return paused, delay, await raw.pttl(second.pause_key), await raw.pttl(second.tat_key)
        finally:
            await first.aclose()
            await second.aclose()

    paused, delay, pause_ttl, tat_ttl = run(scenario_())
    assert 40 <= paused <= 50
    assert 40 <= delay <= 50
    # Nothing lingers in Redis: both keys expire about a second after the pause ends.
    assert 0 < pause_ttl <= 51_000 and 0 < tat_ttl <= 52_000


def test_429_pauses_the_shared_limiter(server: FakeLLMServer, redis_key: str) -> None:
    tag = marker("429", n=1, retry_after=20)
    seen: dict[str, float] = {}

    async def scenario_() -> Completion:
        worker_a = RedisRateLimiter(redis=REDIS_URL, key=redis_key, rate=100)
        worker_b = RedisRateLimiter(redis=REDIS_URL, key=redis_key, rate=100)

        async def retry_sleep(seconds: float) -> None:
            # Called when worker A has its 429 and is about to sleep on Retry-After: this is
            # the moment to look at worker B. Then the pause is ended instead of slept through.
            seen["a_waits"] = seconds
            seen["b_paused_for"] = await worker_b.paused_for()
            await worker_b._redis.delete(worker_b.pause_key)

        try:
            return await complete_with_retries(
                endpoint(server, "openai"),
                user="x " + tag,
                max_tokens=20,
                limiter=worker_a,
                sleep=retry_sleep,
                rng=lambda: 0.0,
            )
        finally:
            await worker_a.aclose()
            await worker_b.aclose()

    result = run(scenario_())
    assert result.attempts == 2
    assert seen["a_waits"] == 20
    assert 10 < seen["b_paused_for"] <= 20  # worker B was told to hold off too


def test_redis_limiter_callers_beyond_its_connections_wait_instead_of_failing(
    redis_key: str,
) -> None:
    # Each acquire holds a Redis connection for one round trip: a run with more requests in
    # flight than the client's pool (redis-py's default: 100) got MaxConnectionsError, and the
    # item failed on the platform's own limit.
    async def scenario_() -> None:
        limiter = RedisRateLimiter(redis=REDIS_URL, key=redis_key, rate=100_000, burst=300)
        try:
            await asyncio.gather(*(limiter.acquire() for _ in range(300)))
        finally:
            await limiter.aclose()

    run(scenario_())


def test_limiter_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="rate"):
        LocalRateLimiter(rate=0)
    with pytest.raises(ValueError, match="burst"):
        LocalRateLimiter(rate=1, burst=0)
    with pytest.raises(ValueError, match="key"):
        RedisRateLimiter(redis=REDIS_URL, key="", rate=1)


# ------------------------------------------------------------------------------ vLLM offline


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_generate_offline_without_vllm_says_what_to_install() -> None:
    with pytest.raises(VLLMNotInstalled, match=r"'vllm' package .* not installed"):
        generate_offline("Qwen/Qwen2.5-7B-Instruct", ["hi"], temperature=0.7, max_tokens=512)
