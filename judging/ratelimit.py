"""Request-rate limits per LLM endpoint: in one process, and across all worker processes.

Both limiters use the same arithmetic, GCRA (the "generic cell rate algorithm", a token bucket
kept as one timestamp): `tat` is the theoretical arrival time of the next request at the
allowed rate. A caller *reserves* the next free slot and sleeps until it, so waiting callers
queue up in order instead of polling and stampeding, and each acquire is one operation
(one Redis round trip for the global limiter).

- `LocalRateLimiter`: asyncio, one process.
- `RedisRateLimiter`: one Lua script on Redis, so every Celery worker shares the same budget
  per endpoint; Redis' own clock (TIME) is used so worker clocks need not agree.

Both support `pause(seconds)`: after a 429 with Retry-After, nobody sends to that endpoint until
the pause ends (in Redis: a "paused until" key every worker reads on acquire).

A limit of the limiter itself makes a caller wait, never fail: more callers than Redis
connections wait for one, and a Redis that stays away after the client's retries raises
`LimiterUnavailable`, which a work loop treats as a 429 (the item goes back to the queue).

Pure Python + redis-py: no Django import.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

KEY_PREFIX = "mentalbench:ratelimit"
REDIS_RETRIES = 30  # with the backoff below: a Redis away for up to about a minute
# Connections of a limiter's own client when its caller does not say how many callers it has.
DEFAULT_MAX_CONNECTIONS = 100


class LimiterUnavailable(Exception):
    """The shared limiter's Redis did not answer, after the client's own retries: the caller
    should give its work back and try again later, as after a 429, rather than fail it."""


def _check(rate: float, burst: int) -> None:
    if not rate > 0 or math.isinf(rate):
        raise ValueError(f"rate must be a positive number of requests per second, got {rate!r}")
    if burst < 1:
        raise ValueError(f"burst must be at least 1, got {burst!r}")


class LocalRateLimiter:
    """At most `rate` requests per second on average, at most `burst` at once, in this process.

    Not thread-safe (asyncio only); reservations are computed without awaiting, so no lock is
    needed inside one event loop.
    """

    def __init__(
        self,
        *,
        rate: float,
        burst: int = 1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        _check(rate, burst)
        self.interval = 1.0 / rate
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tat = 0.0
        self._paused_until = 0.0

    def reserve(self) -> float:
        """Take the next slot; return how many seconds until it (0 when it is now)."""
        now = self._clock()
        tolerance = (self.burst - 1) * self.interval
        slot = max(now, self._paused_until, self._tat - tolerance)
        self._tat = max(self._tat, slot) + self.interval
        return slot - now

    async def acquire(self) -> None:
        delay = self.reserve()
        while delay > 0:
            await self._sleep(delay)
            # A pause that began while we slept (another caller got a 429) still applies.
            delay = self._paused_until - self._clock()

    async def pause(self, seconds: float) -> None:
        self._paused_until = max(self._paused_until, self._clock() + max(0.0, seconds))


# KEYS[1] = tat key, KEYS[2] = paused-until key
# ARGV[1] = interval (s), ARGV[2] = burst
# Returns the delay in seconds until the reserved slot, as a string (Lua numbers returned to
# Redis are truncated to integers).
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local paused = tonumber(redis.call('GET', KEYS[2]) or '0')
local slot = math.max(now, paused, tat - (burst - 1) * interval)
local new_tat = math.max(tat, slot) + interval
-- The key expires once it no longer constrains anyone, so idle endpoints leave nothing behind.
local ttl_ms = math.ceil((new_tat - now) * 1000) + 1000
redis.call('SET', KEYS[1], string.format('%.6f', new_tat), 'PX', ttl_ms)
return string.format('%.6f', slot - now)
"""

# KEYS[1] = paused-until key; ARGV[1] = seconds. Only ever extends a pause.
_PAUSE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local untl = now + tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if untl > current then
  local ttl_ms = math.ceil(tonumber(ARGV[1]) * 1000) + 1000
  redis.call('SET', KEYS[1], string.format('%.6f', untl), 'PX', ttl_ms)
  return string.format('%.6f', untl - now)
end
return string.format('%.6f', current - now)
"""

# KEYS[1] = paused-until key. Seconds of pause left (0 when not paused).
_REMAINING = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
return string.format('%.6f', math.max(0, current - now))
"""


class RedisRateLimiter:
    """The same limit as LocalRateLimiter, shared by every process using the same Redis and key.

    `redis` is a `redis.asyncio.Redis` or a URL. A redis.asyncio client is bound to the event
    loop it first ran in: a Celery task that calls `asyncio.run` per task should build the
    limiter (or pass a URL) inside that run. `key` names the endpoint (EndpointConfig.label is a
    good choice): every limiter with the same key shares one budget. `max_connections` sizes the
    client built from a URL: give it the most callers that may acquire at once (a work loop's
    concurrency); callers beyond it wait for a connection.
    """

    def __init__(
        self,
        *,
        redis: aioredis.Redis | str,
        key: str,
        rate: float,
        burst: int = 1,
        prefix: str = KEY_PREFIX,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        _check(rate, burst)
        if not key:
            raise ValueError("RedisRateLimiter needs a key naming the endpoint")
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections!r}")
        if isinstance(redis, str):
            # A blocking pool: a caller beyond max_connections waits for a connection (with no
            # time limit: each holds one for a single round trip). redis-py's default pool
            # raised MaxConnectionsError instead, which failed the item asking.
            # A Redis that restarts (a few seconds) is waited out, not an item's failure: each
            # command is tried again on a lost connection, backing off to 2 s, for about a minute.
            pool = aioredis.BlockingConnectionPool.from_url(
                redis,
                max_connections=max_connections,
                timeout=None,
                retry=Retry(ExponentialBackoff(cap=2.0, base=0.1), REDIS_RETRIES),
                retry_on_error=[redis_errors.ConnectionError, redis_errors.TimeoutError],
            )
            self._redis = aioredis.Redis.from_pool(pool)
        else:
            self._redis = redis
        self._owns_client = isinstance(redis, str)
        self.interval = 1.0 / rate
        self.burst = burst
        self.tat_key = f"{prefix}:{key}:tat"
        self.pause_key = f"{prefix}:{key}:paused_until"
        self._sleep = sleep
        self._reserve = self._redis.register_script(_RESERVE)
        self._pause = self._redis.register_script(_PAUSE)
        self._remaining = self._redis.register_script(_REMAINING)

    async def reserve(self) -> float:
        """Take the next shared slot; return how many seconds until it."""
        try:
            raw = await self._reserve(
                keys=[self.tat_key, self.pause_key], args=[self.interval, self.burst]
            )
        except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
            raise LimiterUnavailable(f"rate limiter: Redis unavailable: {exc}") from exc
        return float(raw)

    async def acquire(self) -> None:
        delay = await self.reserve()
        while delay > 0:
            await self._sleep(delay)
            # Slots reserved before someone else's 429 must still respect the pause.
            delay = await self.paused_for()

    async def pause(self, seconds: float) -> None:
        """Stop every worker from sending to this endpoint for `seconds` (never shortens)."""
        try:
            await self._pause(keys=[self.pause_key], args=[max(0.0, float(seconds))])
        except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
            raise LimiterUnavailable(f"rate limiter: Redis unavailable: {exc}") from exc

    async def paused_for(self) -> float:
        """Seconds left in the current pause (0.0 when not paused)."""
        try:
            return float(await self._remaining(keys=[self.pause_key]))
        except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
            raise LimiterUnavailable(f"rate limiter: Redis unavailable: {exc}") from exc

    async def aclose(self) -> None:
        """Close the Redis client if this limiter created it from a URL."""
        if self._owns_client:
            await self._redis.aclose()
