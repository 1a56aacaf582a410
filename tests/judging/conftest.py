"""Fixtures for run tests: a study with responses, fake LLM servers, endpoints (real Celery
workers: `celery_worker_factory` in tests/conftest.py)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import worker_redis_url
from tests.factories import ENDPOINT_API_KEY, case_context, case_reply, endpoint_make, study_make
from tests.fakes.llm_server import FakeLLMServer

API_KEY = ENDPOINT_API_KEY
ROOT = Path(__file__).resolve().parents[2]
LIMITER_REDIS_URL = worker_redis_url(os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15"))


@pytest.fixture(autouse=True)
def _limiter_redis_db(request: pytest.FixtureRequest) -> None:
    if not request.config.pluginmanager.hasplugin("django"):
        return  # the provider tests run with -p no:django: no settings, no run services
    # Rate-limit keys of in-process runs go to the test Redis db, never to db 0.
    request.getfixturevalue("settings").JUDGING_RATELIMIT_REDIS_URL = LIMITER_REDIS_URL


@pytest.fixture(autouse=True)
def _fast_retries(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if not request.config.pluginmanager.hasplugin("django"):
        return
    from judging.services import engine

    monkeypatch.setattr(engine, "RETRY_BASE_DELAY", 0.01)


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Tasks run inside the test process at commit (Celery eager): a launched run executes
    inside the web request. Asked for explicitly."""
    from mentalbench.celery import app

    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = saved


@pytest.fixture(scope="session")
def fake_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def study(db):
    return study_make(
        name="Run test study",
        conversations=3,
        responders=("gpt4o", "llama_3"),
        context=case_context,
        text=case_reply,
    )


@pytest.fixture
def endpoint_factory(db, fake_llm: FakeLLMServer) -> Callable:
    """endpoint_make on the session's fake server (its Anthropic URL for provider="anthropic")."""

    def make(provider: str = "openai", **overrides):
        base_url = (
            fake_llm.anthropic_base_url if provider == "anthropic" else fake_llm.openai_base_url
        )
        return endpoint_make(**{"base_url": base_url, "provider": provider, **overrides})

    return make


# ------------------------------------------------------------------------------ a real model


@pytest.fixture(scope="session")
def local_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """One llama.cpp server with SmolLM2-135M for the whole session (2 threads, small context)."""
    from tests.local_llama import LocalLlama, require_local_model

    require_local_model()
    # LOCAL_MODEL_THREADS=1 on a machine whose cores are busy: llama.cpp's threads spin-wait
    # for each other, and two of them on oversubscribed cores run several times slower than one.
    threads = int(os.environ.get("LOCAL_MODEL_THREADS", "2"))
    log = tmp_path_factory.mktemp("llama") / "server.log"
    server = LocalLlama(log=log, threads=threads).start()
    yield server
    server.stop()
