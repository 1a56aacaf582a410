"""OpenAI's Chat Completions through the official `openai` SDK: OpenAI, vLLM's
OpenAI-compatible server and any other OpenAI-compatible server (a configurable base_url).

The request and answer functions serve immediate and batch mode alike.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .config import (
    STRUCTURED_OFF,
    Completion,
    EndpointConfig,
    OutputSchema,
    Request,
    normalise_finish,
    sdk_arguments,
)
from .errors import PermanentError, TransientError

if TYPE_CHECKING:
    import openai


def openai_structured(config: EndpointConfig, schema: OutputSchema | None) -> dict[str, Any]:
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
    config: EndpointConfig, request: Request
) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """(messages, other body fields) of a chat completion, for immediate and batch mode alike."""
    wire: list[dict[str, str]] = []
    if request.system:
        wire.append({"role": "system", "content": request.system})
    wire.extend(request.turns)
    params = request.params
    structured = openai_structured(config, request.schema)
    if structured:
        params = {**params, **structured}
    elif request.json_mode and config.supports_json_mode:
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
    finish = normalise_finish(choice.finish_reason)
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


async def openai_call(
    client: openai.AsyncOpenAI, config: EndpointConfig, request: Request
) -> Completion:
    """One chat completion through the OpenAI SDK; errors are the SDK's own (see `complete`)."""
    wire, params = openai_request(config, request)
    started = time.perf_counter()
    response = await client.chat.completions.create(
        model=config.model,
        messages=wire,  # type: ignore[arg-type]
        **sdk_arguments(type(client.chat.completions).create, params),
    )
    latency = time.perf_counter() - started
    return openai_completion(
        config, response, latency=latency, request_id=getattr(response, "_request_id", None)
    )
