"""Retries: `complete_with_retries` is the one place where LLM calls are retried (see
`make_client` for why the SDKs' own retries are off), sharing an endpoint's rate limit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, Unpack

from .client import complete, make_client
from .config import CallFields, Completion, EndpointConfig
from .errors import PermanentError, ProviderError, RateLimited, TransientError

if TYPE_CHECKING:
    import anthropic
    import openai

logger = logging.getLogger(__name__)


class Limiter(Protocol):
    """What complete_with_retries needs from a rate limiter (see judging.ratelimit)."""

    async def acquire(self) -> None: ...

    async def pause(self, seconds: float) -> None: ...


def backoff_delay(
    attempt: int, *, base_delay: float, max_delay: float, rng: Callable[[], float] = random.random
) -> float:
    """Exponential backoff with "equal jitter" for retry number `attempt` (1 = first retry).

    Half the delay is fixed, half random: workers that failed together spread out, yet nobody
    retries immediately.
    """
    ceiling = min(max_delay, base_delay * (2 ** (attempt - 1)))
    return ceiling / 2 + rng() * ceiling / 2


async def complete_with_retries(
    config: EndpointConfig,
    *,
    client: openai.AsyncOpenAI | anthropic.AsyncAnthropic | None = None,
    max_attempts: int = 5,
    base_delay: float = 0.5,
    max_delay: float = 30.0,
    limiter: Limiter | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: Callable[[], float] = random.random,
    **fields: Unpack[CallFields],
) -> Completion:
    """`complete` with retries: the one place where LLM calls are retried.

    - TransientError: exponential backoff with jitter (`backoff_delay`).
    - RateLimited: waits at least the server's Retry-After (plus a little jitter so waiting
      workers do not return in lockstep) and pauses `limiter` for everyone meanwhile. A
      Retry-After longer than max_delay is not slept through: the RateLimited error is raised
      at once so the caller (a Celery task) can reschedule instead of holding a worker.
    - PermanentError: raised at once.
    After max_attempts the last error is raised; its `attempts` attribute says how many were
    made. `sleep` and `rng` exist for tests.
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    own_client = client is None
    sdk_client = make_client(config) if client is None else client
    try:
        for attempt in range(1, max_attempts + 1):
            if limiter is not None:
                await limiter.acquire()
            try:
                result = await complete(config, client=sdk_client, **fields)
                return dataclasses.replace(result, attempts=attempt)
            except PermanentError as exc:
                exc.attempts = attempt
                raise
            except RateLimited as exc:
                exc.attempts = attempt
                if exc.retry_after is not None:
                    # A little jitter on top, never below what the server asked for.
                    jitter = rng() * min(base_delay, exc.retry_after / 10 + 0.01)
                    delay = exc.retry_after + jitter
                else:
                    delay = backoff_delay(
                        attempt, base_delay=base_delay, max_delay=max_delay, rng=rng
                    )
                if limiter is not None:
                    # Everyone using this endpoint holds off, not only this caller.
                    await limiter.pause(delay)
                if attempt == max_attempts or (exc.retry_after or 0.0) > max_delay:
                    raise
                _log_retry(config, attempt, max_attempts, delay, exc)
                await sleep(delay)
            except TransientError as exc:
                exc.attempts = attempt
                if attempt == max_attempts:
                    raise
                delay = backoff_delay(attempt, base_delay=base_delay, max_delay=max_delay, rng=rng)
                _log_retry(config, attempt, max_attempts, delay, exc)
                await sleep(delay)
    finally:
        if own_client:
            await sdk_client.close()
    raise AssertionError("unreachable")  # the loop returns or raises


def _log_retry(
    config: EndpointConfig, attempt: int, max_attempts: int, delay: float, exc: ProviderError
) -> None:
    # The message is already redacted; the config is logged by label only.
    logger.warning(
        "LLM call to %s failed (attempt %d/%d), retrying in %.2fs: %s",
        config.label,
        attempt,
        max_attempts,
        delay,
        exc,
    )
