"""The three error classes every provider's failure maps to, and the mapping from the SDKs'
exceptions: callers decide on retries without knowing which SDK was used. Messages never hold
the API key (`redact`).
"""

from __future__ import annotations

import email.utils
import json
import re
import socket
import time
from collections.abc import Mapping
from datetime import UTC
from typing import TYPE_CHECKING, Any

from .config import EndpointConfig

if TYPE_CHECKING:
    import anthropic
    import openai


class ProviderError(Exception):
    """Base of our error classes. Messages are redacted: they never contain the API key.

    `reason` says what failed, for people: "status" (the server answered an HTTP error:
    see status_code), "timeout", "connection", "body" (an answer that could not be read) or
    "client" (our side: configuration, a missing key).
    """

    def __init__(
        self,
        message: str,
        *,
        endpoint: str = "",
        status_code: int | None = None,
        request_id: str | None = None,
        reason: str = "",
    ) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.status_code = status_code
        self.request_id = request_id
        self.reason = reason or ("status" if status_code is not None else "client")
        self.attempts = 1


class RateLimited(ProviderError):
    """HTTP 429. retry_after is the server's Retry-After in seconds, when it sent one."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class TransientError(ProviderError):
    """Worth retrying: 5xx, 408/409, timeouts, connection errors."""


class PermanentError(ProviderError):
    """Retrying cannot help: 400/401/403/404/413/422, bad configuration, missing package."""


class VLLMNotInstalled(PermanentError):
    """generate_offline was called where the vllm package is not installed."""


# OpenAI/Anthropic ("sk-…", "sk-proj-…", "sk-ant-…") and Google ("AIza…") key shapes, also when
# partly masked with asterisks.
_KEYLIKE = re.compile(r"\b(sk-(?:ant-|proj-)?|AIza)[A-Za-z0-9_\-*]{6,}")


def redact(text: str, api_key: str | None) -> str:
    """Remove the API key (and anything shaped like an OpenAI/Anthropic key) from `text`.

    Servers echo keys back: OpenAI's 401 says "Incorrect API key provided: sk-abc***xyz".
    """
    if api_key:
        text = text.replace(api_key, "[redacted]")
        # Servers often echo a shortened key ("sk-proj-ab****wxyz"); its head is distinctive
        # enough to remove without mangling ordinary words.
        if len(api_key) >= 20:
            text = text.replace(api_key[:10], "[redacted]")
    return _KEYLIKE.sub(r"\1[redacted]", text)


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: float | None = None
) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` in seconds or as an HTTP-date.

    Returns None when there is no usable header; never a negative number.
    """
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if not raw:
        return None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        when = when.replace(tzinfo=UTC)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def _map_status(
    config: EndpointConfig, exc: openai.APIStatusError | anthropic.APIStatusError
) -> ProviderError:
    status = exc.status_code
    request_id = getattr(exc, "request_id", None)
    detail = redact(_status_detail(exc), config.api_key)
    message = f"{config.label}: HTTP {status}: {detail}"
    common: dict[str, Any] = {
        "endpoint": config.label,
        "status_code": status,
        "request_id": request_id,
    }
    if status == 429:
        retry_after = parse_retry_after(dict(exc.response.headers))
        return RateLimited(message, retry_after=retry_after, **common)
    # 408 request timeout and 409 conflict are retried by both SDKs by default; 5xx includes
    # Anthropic's 529 "overloaded".
    if status in (408, 409) or status >= 500:
        return TransientError(message, **common)
    return PermanentError(message, **common)


def _status_detail(exc: openai.APIStatusError | anthropic.APIStatusError) -> str:
    """The server's own error message, short; falls back to the SDK's text."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:500]
    return str(exc.message)[:500]


def _connection_detail(exc: BaseException) -> str:
    """Why a connection failed, from the OS error at the bottom of the SDK's chain: httpx says
    only "All connection attempts failed" for a refused connection."""
    link: BaseException | None = exc
    for _ in range(10):
        if link is None:
            break
        if isinstance(link, ConnectionRefusedError):
            return f"connection refused ({link})"
        if isinstance(link, socket.gaierror):
            return f"host not found ({link})"
        link = link.__cause__ or link.__context__
    return str(exc.__cause__ or exc)


def map_exception(config: EndpointConfig, exc: BaseException) -> ProviderError | None:
    """Our error for an SDK/asyncio exception, or None when it is not one we know."""
    import anthropic
    import openai

    if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError):
        return _map_status(config, exc)
    if isinstance(exc, openai.APITimeoutError | anthropic.APITimeoutError | TimeoutError):
        return TransientError(
            f"{config.label}: no answer within {config.timeout:g}s",
            endpoint=config.label,
            reason="timeout",
        )
    if isinstance(exc, openai.APIConnectionError | anthropic.APIConnectionError):
        cause = redact(_connection_detail(exc), config.api_key)
        return TransientError(
            f"{config.label}: connection error: {cause}", endpoint=config.label, reason="connection"
        )
    if isinstance(exc, json.JSONDecodeError):
        # HTTP 200 with a body that is not JSON (a proxy's error page, a half-written answer):
        # the SDK's decoder raises; the next attempt may well get a proper answer.
        return TransientError(
            f"{config.label}: response body is not JSON", endpoint=config.label, reason="body"
        )
    if isinstance(exc, openai.APIResponseValidationError | anthropic.APIResponseValidationError):
        # A malformed body from the server: usually a proxy or overloaded server, worth a retry.
        return TransientError(
            f"{config.label}: malformed response body", endpoint=config.label, reason="body"
        )
    if isinstance(exc, openai.OpenAIError | anthropic.AnthropicError):
        # Client-side problems: missing key, bad arguments.
        detail = redact(str(exc), config.api_key)
        return PermanentError(f"{config.label}: {detail}", endpoint=config.label)
    return None
