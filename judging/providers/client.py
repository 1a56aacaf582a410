"""The SDK client of an endpoint and one request through it, whichever SDK serves it.

The SDKs take ~1.5 s to import together; every management command, web and worker process
imports this package (through judging.models), and only LLM calls need them, so the functions
that do import them on first use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from .anthropic_adapter import anthropic_call
from .config import CallFields, Completion, EndpointConfig, request_build
from .errors import PermanentError, ProviderError, map_exception, redact
from .openai_adapter import openai_call

if TYPE_CHECKING:
    import anthropic
    import openai

OpenAIClient = TypeVar("OpenAIClient", "openai.OpenAI", "openai.AsyncOpenAI")


def make_client(
    config: EndpointConfig, *, max_connections: int | None = None
) -> openai.AsyncOpenAI | anthropic.AsyncAnthropic:
    """The SDK client for `config`. Reuse one per endpoint per event loop (it pools connections).

    `max_connections`: the most requests the caller keeps in flight (a work loop's concurrency).
    The pool then keeps that many connections open between requests; the SDKs' default keeps
    100, so above 100 in flight an answer's connection could be closed and the next request
    open a new one. None: the SDK's defaults.

    max_retries=0: the SDKs retry 429/5xx/timeouts twice by default. Our retries live in
    `complete_with_retries`, and a Celery task may retry again on top — with SDK retries left on,
    one logical call could hit a rate-limited endpoint 3 × 5 × N times, the backoff and
    Retry-After handling would be split between code we do not control and ours, and our attempt
    counts would be wrong. So every retry decision is taken in one place: ours.
    """
    import anthropic
    import openai

    api_key = sdk_api_key(config)
    try:
        if config.provider == "anthropic":
            return anthropic.AsyncAnthropic(
                api_key=api_key,
                base_url=config.base_url,
                timeout=config.timeout,
                max_retries=0,
                **_http_client(anthropic.DefaultAsyncHttpxClient, max_connections),
            )
        return without_worker_account(
            openai.AsyncOpenAI(
                api_key=api_key,
                base_url=config.base_url,
                timeout=config.timeout,
                max_retries=0,
                **_http_client(openai.DefaultAsyncHttpxClient, max_connections),
            )
        )
    except (openai.OpenAIError, anthropic.AnthropicError) as exc:
        raise PermanentError(
            f"{config.label}: cannot create client: {redact(str(exc), config.api_key)}",
            endpoint=config.label,
        ) from None


def _http_client(factory: Callable[..., Any], max_connections: int | None) -> dict[str, Any]:
    """`http_client=` for the SDK's constructor: its own httpx client (the SDK's timeouts and
    redirects) with a pool of `max_connections`, or nothing for the SDK's default."""
    if max_connections is None:
        return {}
    import httpx2  # the SDKs' HTTP library: their http_client must be one of its clients

    limits = httpx2.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    return {"http_client": factory(limits=limits)}


def without_worker_account(client: OpenAIClient) -> OpenAIClient:
    """The OpenAI SDK, given no organization or project, takes the worker's OPENAI_ORG_ID and
    OPENAI_PROJECT_ID and sends them as headers with every request: to whatever URL an endpoint
    names, and to OpenAI billing another account than the endpoint's key belongs to. Only what
    an endpoint configures is sent, so they are cleared (the header is then left out)."""
    client.organization = None
    client.project = None
    return client


# What a server that needs no key is sent as the key. The SDKs insist on a key, and when given
# none they fall back on the worker's own OPENAI_API_KEY / ANTHROPIC_API_KEY / ANTHROPIC_AUTH_TOKEN
# (or a credentials file) and send it to whatever URL the endpoint names: a secret nobody
# configured for that endpoint, at an address its editor chose.
NO_KEY = "EMPTY"


def sdk_api_key(config: EndpointConfig) -> str:
    """The key handed to the SDK, never None: the endpoint's own key; for an OpenAI-compatible
    server or vLLM without one, the placeholder NO_KEY (they accept any key); for OpenAI and
    Anthropic without one, a PermanentError (their APIs need a key, and only a key configured
    for this endpoint may be sent)."""
    if config.api_key:
        return config.api_key
    if config.provider in ("openai_compatible", "vllm"):
        return NO_KEY
    raise PermanentError(
        f"{config.label}: no API key: type the endpoint's key, or name the environment variable "
        "that holds it in api_key_env (e.g. OPENAI_API_KEY); a worker's variables are never sent "
        "unless an endpoint names them",
        endpoint=config.label,
    )


async def complete(
    config: EndpointConfig,
    *,
    client: openai.AsyncOpenAI | anthropic.AsyncAnthropic | None = None,
    **fields: Unpack[CallFields],
) -> Completion:
    """One request, no retries. Raises RateLimited, TransientError or PermanentError.

    Give either `user` (and optionally `system`) or `messages` (OpenAI-style dicts; system
    messages are merged into Anthropic's `system`). `schema` is sent as the endpoint's
    structured-output mode says (nothing when it is "off"). `client` should be a long-lived
    client from `make_client(config)`; without one a client is created and closed for this call.
    """
    import anthropic

    request = request_build(config, **fields)
    own_client = client is None
    sdk_client = make_client(config) if client is None else client
    is_anthropic = config.provider == "anthropic"
    if is_anthropic != isinstance(sdk_client, anthropic.AsyncAnthropic):
        raise PermanentError(
            f"{config.label}: client type {type(sdk_client).__name__} does not match provider",
            endpoint=config.label,
        )
    try:
        # The SDK timeout bounds each connect/read; this bounds the whole call, so a server that
        # trickles bytes cannot hold a worker forever.
        async with asyncio.timeout(config.timeout):
            if is_anthropic:
                return await anthropic_call(sdk_client, config, request)  # type: ignore[arg-type]
            return await openai_call(sdk_client, config, request)  # type: ignore[arg-type]
    except ProviderError:
        raise
    except Exception as exc:
        mapped = map_exception(config, exc)
        if mapped is None:
            raise
    finally:
        if own_client:
            await sdk_client.close()
    # Raised outside the except block on purpose: the SDK exception can hold the server's echo
    # of our key, and must not ride along as __context__ into tracebacks or error trackers.
    raise mapped
