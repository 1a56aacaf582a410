"""One way to call an LLM, whoever serves it.

Providers:
- "openai": OpenAI's API through the official `openai` SDK (AsyncOpenAI).
- "openai_compatible" / "vllm": the same SDK with a configurable base_url — vLLM's
  OpenAI-compatible server, Gemini's OpenAI endpoint, any local server.
- "anthropic": Anthropic's Messages API through the official `anthropic` SDK (AsyncAnthropic).
- vLLM *offline* (in-process, GPU) through `generate_offline`, which imports vllm lazily.

Errors are mapped to three classes — RateLimited, TransientError, PermanentError — so callers
decide on retries without knowing which SDK was used. Retries happen in exactly one place,
`complete_with_retries` (see `make_client` for why the SDKs' own retries are off).

Pure Python: no Django import here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import functools
import inspect
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Any, Protocol

# The SDKs take ~1.5 s to import together; every management command, web and worker process
# imports this module (through judging.models), and only LLM calls need them, so the functions
# that do import them on first use.
if TYPE_CHECKING:
    import anthropic
    import openai

from scoring.parsing import strip_think  # noqa: F401  (re-exported: providers strip answers)

logger = logging.getLogger(__name__)

OPENAI_LIKE = frozenset({"openai", "openai_compatible", "vllm"})
PROVIDERS = OPENAI_LIKE | {"anthropic"}

# Structured outputs: how a JSON schema for the answer is sent, per server kind. "off" (the
# default) sends none: the papers' judges were prompted for JSON, so reproductions stay
# prompt-only. Whatever comes back goes through the same never-guess parsers either way.
STRUCTURED_OFF = "off"
STRUCTURED_OUTPUTS: dict[str, str] = {
    STRUCTURED_OFF: "off (prompt only)",
    # OpenAI's strict JSON schema; vLLM's server accepts the same field.
    "json_schema": "response_format json_schema, strict (OpenAI, vLLM)",
    # vLLM's own fields: guided_json until v0.11, structured_outputs.json from v0.10.2 on.
    "vllm_guided_json": "vLLM guided_json (vLLM before 0.12)",
    "vllm_structured_outputs": "vLLM structured_outputs.json (vLLM 0.10.2 and later)",
    # llama-cpp-python's server: a json_object response_format carrying the schema.
    "llama_cpp": "llama.cpp response_format json_object + schema",
    # Anthropic has no schema field: a forced call of one tool whose input is the answer.
    "anthropic_tool": "Anthropic forced tool call",
}
_ANTHROPIC_STRUCTURED = frozenset({STRUCTURED_OFF, "anthropic_tool"})

# Anthropic requires max_tokens; used when neither the call nor the endpoint gives one.
DEFAULT_MAX_TOKENS = 1024

Message = Mapping[str, str]


# ------------------------------------------------------------------------------------- config


@dataclass(frozen=True, kw_only=True)
class EndpointConfig:
    """Where and how to reach one model.

    default_params are sent with every request (e.g. {"top_p": 0.9, "seed": 7}); explicit
    arguments of `complete` win over them. supports_json_mode=False for OpenAI-compatible
    servers that reject `response_format`. json_prefill only affects Anthropic (see
    `_anthropic_call`). supports_temperature=False for OpenAI reasoning models (o1/o3/o4-mini
    accept only their default temperature, and answer 400 to any other). max_tokens_param names
    the request field for the token limit: None means "max_completion_tokens" for OpenAI (the
    reasoning models reject the older "max_tokens") and "max_tokens" elsewhere.
    """

    provider: str
    model: str
    base_url: str | None = None
    # repr=False keeps the key out of every repr, log line and traceback that prints a config.
    api_key: str | None = field(default=None, repr=False)
    default_params: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 60.0
    supports_json_mode: bool = True
    json_prefill: bool = False
    supports_temperature: bool = True
    max_tokens_param: str | None = None
    structured_output: str = STRUCTURED_OFF
    name: str = ""

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(
                f"unknown provider {self.provider!r}; expected one of {sorted(PROVIDERS)}"
            )
        if not self.model:
            raise ValueError("EndpointConfig.model is empty")
        if self.timeout <= 0:
            raise ValueError(f"EndpointConfig.timeout must be positive, got {self.timeout!r}")
        if self.max_tokens_param not in (None, "max_tokens", "max_completion_tokens"):
            raise ValueError(
                f"max_tokens_param must be 'max_tokens' or 'max_completion_tokens', "
                f"got {self.max_tokens_param!r}"
            )
        structured_output_check(provider=self.provider, mode=self.structured_output)

    @property
    def label(self) -> str:
        """A printable name for logs, errors and rate-limit keys (never contains the key)."""
        if self.name:
            return self.name
        where = self.base_url or "default"
        return f"{self.provider}:{self.model}@{where}"


def structured_output_check(*, provider: str, mode: str) -> None:
    """Raise ValueError when `mode` is unknown or not one the provider's servers speak."""
    if mode not in STRUCTURED_OUTPUTS:
        raise ValueError(
            f"unknown structured output mode {mode!r}; expected one of {sorted(STRUCTURED_OUTPUTS)}"
        )
    if provider == "anthropic" and mode not in _ANTHROPIC_STRUCTURED:
        raise ValueError(
            f"structured output {mode!r} is for OpenAI-compatible servers; Anthropic endpoints "
            "use 'anthropic_tool' (or 'off')"
        )
    if provider != "anthropic" and mode == "anthropic_tool":
        raise ValueError(
            "structured output 'anthropic_tool' is for Anthropic endpoints; OpenAI-compatible "
            "servers use 'json_schema', 'vllm_guided_json', 'vllm_structured_outputs' or "
            "'llama_cpp'"
        )


@dataclass(frozen=True, kw_only=True)
class OutputSchema:
    """The JSON schema an answer must follow, and a short name for it (OpenAI and the Anthropic
    tool need one: letters, digits, _ and -)."""

    name: str
    schema: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class Completion:
    """One model answer, normalised across providers.

    finish_reason is "stop", "length" (cut by max_tokens / context window) or the provider's
    own word for anything else (e.g. "content_filter", "tool_calls", "refusal");
    raw_finish_reason keeps the provider's word. `reasoning` is a separate reasoning channel
    when the server returns one (vLLM's reasoning_content, Anthropic thinking blocks); inline
    <think> tags stay in `text` — use `strip_think`.
    """

    text: str
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str
    raw_finish_reason: str | None
    truncated: bool
    latency_s: float
    model: str
    request_id: str | None = None
    response_id: str | None = None
    reasoning: str | None = None
    attempts: int = 1


# ------------------------------------------------------------------------------------- errors


class ProviderError(Exception):
    """Base of our error classes. Messages are redacted: they never contain the API key."""

    def __init__(
        self,
        message: str,
        *,
        endpoint: str = "",
        status_code: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.status_code = status_code
        self.request_id = request_id
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


def _map_exception(config: EndpointConfig, exc: BaseException) -> ProviderError | None:
    """Our error for an SDK/asyncio exception, or None when it is not one we know."""
    import anthropic
    import openai

    if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError):
        return _map_status(config, exc)
    if isinstance(exc, openai.APITimeoutError | anthropic.APITimeoutError | TimeoutError):
        return TransientError(
            f"{config.label}: no answer within {config.timeout:g}s", endpoint=config.label
        )
    if isinstance(exc, openai.APIConnectionError | anthropic.APIConnectionError):
        cause = redact(str(exc.__cause__ or exc), config.api_key)
        return TransientError(f"{config.label}: connection error: {cause}", endpoint=config.label)
    if isinstance(exc, json.JSONDecodeError):
        # HTTP 200 with a body that is not JSON (a proxy's error page, a half-written answer):
        # the SDK's decoder raises; the next attempt may well get a proper answer.
        return TransientError(f"{config.label}: response body is not JSON", endpoint=config.label)
    if isinstance(exc, openai.APIResponseValidationError | anthropic.APIResponseValidationError):
        # A malformed body from the server: usually a proxy or overloaded server, worth a retry.
        return TransientError(f"{config.label}: malformed response body", endpoint=config.label)
    if isinstance(exc, openai.OpenAIError | anthropic.AnthropicError):
        # Client-side problems: missing key, bad arguments.
        detail = redact(str(exc), config.api_key)
        return PermanentError(f"{config.label}: {detail}", endpoint=config.label)
    return None


# ------------------------------------------------------------------------------------- clients


def make_client(config: EndpointConfig) -> openai.AsyncOpenAI | anthropic.AsyncAnthropic:
    """The SDK client for `config`. Reuse one per endpoint per event loop (it pools connections).

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
            )
        return openai.AsyncOpenAI(
            api_key=api_key,
            base_url=config.base_url,
            timeout=config.timeout,
            max_retries=0,
        )
    except (openai.OpenAIError, anthropic.AnthropicError) as exc:
        raise PermanentError(
            f"{config.label}: cannot create client: {redact(str(exc), config.api_key)}",
            endpoint=config.label,
        ) from None


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


# ------------------------------------------------------------------------------------- requests


def _messages(
    *, system: str | None, user: str | None, messages: Sequence[Message] | None
) -> tuple[str | None, list[dict[str, str]]]:
    """(system text, non-system turns) from either system+user or an OpenAI-style list."""
    if messages is not None:
        if user is not None:
            raise ValueError("pass either messages or user, not both")
        system_parts = [system] if system else []
        turns: list[dict[str, str]] = []
        for message in messages:
            role, content = message.get("role"), message.get("content")
            if role not in ("system", "user", "assistant") or not isinstance(content, str):
                raise ValueError(f"bad message {dict(message)!r}: need role and text content")
            if role == "system":
                system_parts.append(content)
            else:
                turns.append({"role": role, "content": content})
        return ("\n\n".join(system_parts) or None), turns
    if user is None:
        raise ValueError("complete() needs user (with optional system) or messages")
    return system, [{"role": "user", "content": user}]


def _normalise_finish(raw: str | None) -> str:
    if raw in ("stop", "end_turn", "stop_sequence"):
        return "stop"
    # Anthropic: "max_tokens", or the context window filled up while generating.
    if raw in ("length", "max_tokens", "model_context_window_exceeded"):
        return "length"
    return raw or "unknown"


def _sampling(
    config: EndpointConfig, *, temperature: float | None, max_tokens: int | None
) -> dict[str, Any]:
    params = dict(config.default_params)
    limit = params.pop("max_tokens", None)
    limit = params.pop("max_completion_tokens", limit)
    if max_tokens is not None:
        limit = max_tokens
    if config.provider == "anthropic":
        limit_name = "max_tokens"
    elif config.max_tokens_param:
        limit_name = config.max_tokens_param
    else:
        limit_name = "max_completion_tokens" if config.provider == "openai" else "max_tokens"
    params[limit_name] = DEFAULT_MAX_TOKENS if limit is None else int(limit)
    if temperature is not None:
        params["temperature"] = temperature
    if not config.supports_temperature:
        params.pop("temperature", None)
    return params


@functools.cache
def _accepted(method: Callable[..., Any]) -> frozenset[str]:
    return frozenset(inspect.signature(method).parameters)


def _split_params(
    method: Callable[..., Any], params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(named arguments, extra_body) for an SDK method.

    SDK versions add and drop sampling fields (recent `anthropic` no longer names temperature;
    vLLM takes top_k or repetition_penalty that `openai` does not know). What the method does
    not name still reaches the server through extra_body, so the endpoint decides.
    """
    accepted = _accepted(method)
    named = {k: v for k, v in params.items() if k in accepted}
    extra = {k: v for k, v in params.items() if k not in accepted}
    return named, extra


def _openai_structured(config: EndpointConfig, schema: OutputSchema | None) -> dict[str, Any]:
    """The request fields that carry `schema` for this endpoint's server ({} when off).

    Fields the SDK does not name (vLLM's) reach the server through extra_body.
    """
    mode = config.structured_output
    if schema is None or mode == STRUCTURED_OFF:
        return {}
    body = dict(schema.schema)
    if mode == "json_schema":
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": schema.name, "strict": True, "schema": body},
            }
        }
    if mode == "vllm_guided_json":
        return {"guided_json": body}
    if mode == "vllm_structured_outputs":
        return {"structured_outputs": {"json": body}}
    if mode == "llama_cpp":
        # llama-cpp-python turns the schema into a grammar; it has no json_schema type.
        return {"response_format": {"type": "json_object", "schema": body}}
    raise PermanentError(
        f"{config.label}: structured output {mode!r} cannot be sent to an OpenAI-compatible server",
        endpoint=config.label,
    )


def openai_request(
    config: EndpointConfig,
    *,
    system: str | None,
    turns: list[dict[str, str]],
    params: dict[str, Any],
    json_mode: bool,
    schema: OutputSchema | None = None,
) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """(messages, other body fields) of a chat completion, for immediate and batch mode alike."""
    wire: list[dict[str, str]] = []
    if system:
        wire.append({"role": "system", "content": system})
    wire.extend(turns)
    structured = _openai_structured(config, schema)
    if structured:
        params = {**params, **structured}
    elif json_mode and config.supports_json_mode:
        params = {**params, "response_format": {"type": "json_object"}}
    return wire, params


def openai_completion(
    config: EndpointConfig, response: Any, *, latency: float, request_id: str | None = None
) -> Completion:
    """A Completion from a ChatCompletion (a live answer, or one line of a batch's results)."""
    import openai

    if not isinstance(response, openai.types.chat.ChatCompletion):
        # A non-JSON content type: the SDK hands back the body as a string instead of raising.
        raise TransientError(f"{config.label}: response body is not JSON", endpoint=config.label)
    if not response.choices:
        raise TransientError(f"{config.label}: response without choices", endpoint=config.label)
    choice = response.choices[0]
    message = choice.message
    # vLLM's reasoning parsers (and some other servers) return the chain of thought apart from
    # the answer; the field is not in the SDK's model, so it arrives as an extra attribute.
    reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
    usage = response.usage
    finish = _normalise_finish(choice.finish_reason)
    return Completion(
        text=message.content or "",
        input_tokens=usage.prompt_tokens if usage else None,
        output_tokens=usage.completion_tokens if usage else None,
        finish_reason=finish,
        raw_finish_reason=choice.finish_reason,
        truncated=finish == "length",
        latency_s=latency,
        model=response.model or config.model,
        request_id=request_id,
        response_id=response.id,
        reasoning=reasoning if isinstance(reasoning, str) else None,
    )


async def _openai_call(
    client: openai.AsyncOpenAI,
    config: EndpointConfig,
    *,
    system: str | None,
    turns: list[dict[str, str]],
    params: dict[str, Any],
    json_mode: bool,
    schema: OutputSchema | None = None,
) -> Completion:
    wire, params = openai_request(
        config, system=system, turns=turns, params=params, json_mode=json_mode, schema=schema
    )
    named, extra = _split_params(type(client.chat.completions).create, params)
    if extra:
        named["extra_body"] = extra
    started = time.perf_counter()
    response = await client.chat.completions.create(
        model=config.model,
        messages=wire,  # type: ignore[arg-type]
        **named,
    )
    latency = time.perf_counter() - started
    return openai_completion(
        config, response, latency=latency, request_id=getattr(response, "_request_id", None)
    )


def anthropic_request(
    config: EndpointConfig,
    *,
    system: str | None,
    turns: list[dict[str, str]],
    params: dict[str, Any],
    json_mode: bool,
    schema: OutputSchema | None = None,
) -> tuple[list[dict[str, str]], dict[str, Any], OutputSchema | None, bool]:
    """(messages, other body fields, answer tool, prefilled) of a message request.

    Anthropic has no JSON mode. By default we rely on the prompt alone: the judge prompt
    already spells out the JSON output format, the parser copes with prose or fences around
    it, and the judge then sees exactly the same conversation as an OpenAI judge (a prefill
    would change the task for one family of judges only). Prefilling "{" is opt-in per
    endpoint (json_prefill) because it is rejected with extended thinking and by some newer
    models.
    """
    tool = schema if config.structured_output == "anthropic_tool" else None
    if tool is not None:
        # Structured output: one tool whose input is the answer, and the model made to call it.
        # (A forced tool call is refused together with extended thinking.)
        params = {
            **params,
            "tools": [
                {
                    "name": tool.name,
                    "description": "Record your answer in exactly this structure.",
                    "input_schema": dict(tool.schema),
                }
            ],
            "tool_choice": {"type": "tool", "name": tool.name},
        }
    prefill = json_mode and config.json_prefill and tool is None
    wire = list(turns)
    if prefill:
        wire.append({"role": "assistant", "content": "{"})
    if system:
        params = {**params, "system": system}
    return wire, params, tool, prefill


def anthropic_completion(
    config: EndpointConfig,
    response: Any,
    *,
    tool: OutputSchema | None,
    prefill: bool,
    latency: float,
    request_id: str | None = None,
) -> Completion:
    """A Completion from a Message (a live answer, or one result of a message batch)."""
    import anthropic

    if not isinstance(response, anthropic.types.Message):
        raise TransientError(f"{config.label}: response body is not JSON", endpoint=config.label)
    texts: list[str] = []
    thoughts: list[str] = []
    tool_inputs: list[str] = []
    for block in response.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "thinking":
            thoughts.append(block.thinking)
        elif block.type == "tool_use" and tool is not None and block.name == tool.name:
            # The tool input is the answer: back to JSON text, so it goes through the same
            # parser as every other output and is kept raw as it came.
            tool_inputs.append(json.dumps(block.input, ensure_ascii=False))
    if tool_inputs:
        # Two calls of the answer tool are two answers: kept both, the parser rejects them.
        text = "\n".join(tool_inputs)
    else:
        text = "".join(texts)
    if prefill:
        text = "{" + text  # the prefilled brace is ours, not in the returned content
    stop_reason = response.stop_reason
    finish = "stop" if tool_inputs and stop_reason == "tool_use" else _normalise_finish(stop_reason)
    return Completion(
        text=text,
        input_tokens=response.usage.input_tokens,
        output_tokens=response.usage.output_tokens,
        finish_reason=finish,
        raw_finish_reason=stop_reason,
        truncated=finish == "length",
        latency_s=latency,
        model=response.model or config.model,
        request_id=request_id,
        response_id=response.id,
        reasoning="\n\n".join(thoughts) or None,
    )


async def _anthropic_call(
    client: anthropic.AsyncAnthropic,
    config: EndpointConfig,
    *,
    system: str | None,
    turns: list[dict[str, str]],
    params: dict[str, Any],
    json_mode: bool,
    schema: OutputSchema | None = None,
) -> Completion:
    wire, params, tool, prefill = anthropic_request(
        config, system=system, turns=turns, params=params, json_mode=json_mode, schema=schema
    )
    kwargs, extra = _split_params(type(client.messages).create, params)
    if extra:
        kwargs["extra_body"] = extra
    started = time.perf_counter()
    response = await client.messages.create(
        model=config.model,
        messages=wire,  # type: ignore[arg-type]
        **kwargs,
    )
    latency = time.perf_counter() - started
    return anthropic_completion(
        config,
        response,
        tool=tool,
        prefill=prefill,
        latency=latency,
        request_id=getattr(response, "_request_id", None),
    )


async def complete(
    config: EndpointConfig,
    *,
    system: str | None = None,
    user: str | None = None,
    messages: Sequence[Message] | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    json_mode: bool = False,
    schema: OutputSchema | None = None,
    client: openai.AsyncOpenAI | anthropic.AsyncAnthropic | None = None,
) -> Completion:
    """One request, no retries. Raises RateLimited, TransientError or PermanentError.

    Give either `user` (and optionally `system`) or `messages` (OpenAI-style dicts; system
    messages are merged into Anthropic's `system`). `schema` is sent as the endpoint's
    structured-output mode says (nothing when it is "off"). `client` should be a long-lived
    client from `make_client(config)`; without one a client is created and closed for this call.
    """
    import anthropic

    system_text, turns = _messages(system=system, user=user, messages=messages)
    params = _sampling(config, temperature=temperature, max_tokens=max_tokens)
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
                return await _anthropic_call(
                    sdk_client,  # type: ignore[arg-type]
                    config,
                    system=system_text,
                    turns=turns,
                    params=params,
                    json_mode=json_mode,
                    schema=schema,
                )
            return await _openai_call(
                sdk_client,  # type: ignore[arg-type]
                config,
                system=system_text,
                turns=turns,
                params=params,
                json_mode=json_mode,
                schema=schema,
            )
    except ProviderError:
        raise
    except Exception as exc:
        mapped = _map_exception(config, exc)
        if mapped is None:
            raise
    finally:
        if own_client:
            await sdk_client.close()
    # Raised outside the except block on purpose: the SDK exception can hold the server's echo
    # of our key, and must not ride along as __context__ into tracebacks or error trackers.
    raise mapped


# ------------------------------------------------------------------------------------- retries


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
    system: str | None = None,
    user: str | None = None,
    messages: Sequence[Message] | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    json_mode: bool = False,
    schema: OutputSchema | None = None,
    client: openai.AsyncOpenAI | anthropic.AsyncAnthropic | None = None,
    max_attempts: int = 5,
    base_delay: float = 0.5,
    max_delay: float = 30.0,
    limiter: Limiter | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: Callable[[], float] = random.random,
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
                result = await complete(
                    config,
                    system=system,
                    user=user,
                    messages=messages,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    json_mode=json_mode,
                    schema=schema,
                    client=sdk_client,
                )
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


# ------------------------------------------------------------------------------------- output


# ------------------------------------------------------------------------------------- vLLM offline


def generate_offline(
    model: str,
    prompts: Sequence[str] | Sequence[Sequence[Message]],
    *,
    temperature: float,
    max_tokens: int,
    seed: int | None = None,
    llm_kwargs: Mapping[str, Any] | None = None,
) -> list[Completion]:
    """Generate with vLLM in this process (needs the `vllm` package and a GPU).

    `prompts` are raw strings (sent as is) or chat conversations — lists of {"role", "content"}
    dicts — which go through the model's chat template via `LLM.chat`. One Completion per
    prompt, in order. latency_s is the batch's wall time divided evenly: vLLM batches the prompts
    together, so there is no per-prompt latency.
    """
    try:
        import vllm  # lazy: the platform installs and runs without vllm or a GPU
    except ImportError:
        raise VLLMNotInstalled(
            "vLLM offline generation needs the 'vllm' package and a GPU, and vllm is not "
            "installed here: install the 'gpu' extra (pip install 'mentalbench[gpu]') on a GPU "
            "machine, or serve the model with `vllm serve` and use provider 'vllm' with a base_url"
        ) from None
    if not prompts:
        return []
    sampling = vllm.SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)
    llm = vllm.LLM(model=model, **dict(llm_kwargs or {}))
    started = time.perf_counter()
    if isinstance(prompts[0], str):
        outputs = llm.generate(list(prompts), sampling)
    else:
        outputs = llm.chat([list(conversation) for conversation in prompts], sampling)
    share = (time.perf_counter() - started) / len(outputs) if outputs else 0.0
    completions = []
    for output in outputs:
        best = output.outputs[0]
        finish = _normalise_finish(best.finish_reason)
        completions.append(
            Completion(
                text=best.text,
                input_tokens=len(output.prompt_token_ids or []),
                output_tokens=len(best.token_ids),
                finish_reason=finish,
                raw_finish_reason=best.finish_reason,
                truncated=finish == "length",
                latency_s=share,
                model=model,
                request_id=str(output.request_id),
            )
        )
    return completions


__all__ = [
    "Completion",
    "EndpointConfig",
    "Limiter",
    "OutputSchema",
    "PermanentError",
    "ProviderError",
    "RateLimited",
    "STRUCTURED_OFF",
    "STRUCTURED_OUTPUTS",
    "TransientError",
    "VLLMNotInstalled",
    "backoff_delay",
    "complete",
    "complete_with_retries",
    "generate_offline",
    "make_client",
    "parse_retry_after",
    "redact",
    "strip_think",
    "structured_output_check",
]
