"""An endpoint's configuration, the answer every call returns, and how a call's arguments
become request fields (shared by the OpenAI and Anthropic adapters).

Pure Python: no Django import, no SDK import.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

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


@dataclass(frozen=True, kw_only=True)
class EndpointConfig:
    """Where and how to reach one model.

    default_params are sent with every request (e.g. {"top_p": 0.9, "seed": 7}); explicit
    arguments of `complete` win over them. supports_json_mode=False for OpenAI-compatible
    servers that reject `response_format`. json_prefill only affects Anthropic (see
    `anthropic_call`). supports_temperature=False for OpenAI reasoning models (o1/o3/o4-mini
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
    <think> tags stay in `text` — use `scoring.parsing.strip_think`.
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


def request_messages(
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


def normalise_finish(raw: str | None) -> str:
    """ "stop", "length" (cut off by the token limit or the context window) or the server's
    own word, from any provider's finish or stop reason."""
    if raw in ("stop", "end_turn", "stop_sequence"):
        return "stop"
    # Anthropic: "max_tokens", or the context window filled up while generating.
    if raw in ("length", "max_tokens", "model_context_window_exceeded"):
        return "length"
    return raw or "unknown"


def sampling_params(
    config: EndpointConfig, *, temperature: float | None, max_tokens: int | None
) -> dict[str, Any]:
    """The sampling fields of a request: the endpoint's defaults, overridden by the call's
    temperature and token limit, the limit under the name this endpoint's server expects."""
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


def sdk_arguments(method: Callable[..., Any], params: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of an SDK method for the request fields `params`.

    SDK versions add and drop sampling fields (recent `anthropic` no longer names temperature;
    vLLM takes top_k or repetition_penalty that `openai` does not know). What the method does
    not name still reaches the server through extra_body, so the endpoint decides.
    """
    accepted = _accepted(method)
    named = {k: v for k, v in params.items() if k in accepted}
    extra = {k: v for k, v in params.items() if k not in accepted}
    if extra:
        named["extra_body"] = extra
    return named


class CallFields(TypedDict, total=False):
    """What a caller of `complete` / `complete_with_retries` says about one request: `user`
    (and optionally `system`) or `messages`, and the call's own sampling and answer format."""

    system: str | None
    user: str | None
    messages: Sequence[Message] | None
    temperature: float | None
    max_tokens: int | None
    json_mode: bool
    schema: OutputSchema | None


@dataclass(frozen=True, kw_only=True)
class Request:
    """One request as both adapters and both modes (immediate, batch) build it."""

    system: str | None
    turns: list[dict[str, str]]
    params: dict[str, Any]
    json_mode: bool = False
    schema: OutputSchema | None = None


def request_build(
    config: EndpointConfig,
    *,
    system: str | None = None,
    user: str | None = None,
    messages: Sequence[Message] | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    json_mode: bool = False,
    schema: OutputSchema | None = None,
) -> Request:
    """The request a call's fields (`CallFields`) make for this endpoint."""
    system_text, turns = request_messages(system=system, user=user, messages=messages)
    return Request(
        system=system_text,
        turns=turns,
        params=sampling_params(config, temperature=temperature, max_tokens=max_tokens),
        json_mode=json_mode,
        schema=schema,
    )
