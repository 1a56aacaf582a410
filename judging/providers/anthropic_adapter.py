"""Anthropic's Messages API through the official `anthropic` SDK.

The request and answer functions serve immediate and batch mode alike.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from .config import (
    Completion,
    EndpointConfig,
    OutputSchema,
    Request,
    normalise_finish,
    sdk_arguments,
)
from .errors import TransientError

if TYPE_CHECKING:
    import anthropic


def anthropic_request(
    config: EndpointConfig, request: Request
) -> tuple[list[dict[str, str]], dict[str, Any], OutputSchema | None, bool]:
    """(messages, other body fields, answer tool, prefilled) of a message request.

    Anthropic has no JSON mode. By default we rely on the prompt alone: the judge prompt
    already spells out the JSON output format, the parser copes with prose or fences around
    it, and the judge then sees exactly the same conversation as an OpenAI judge (a prefill
    would change the task for one family of judges only). Prefilling "{" is opt-in per
    endpoint (json_prefill) because it is rejected with extended thinking and by some newer
    models.
    """
    params = request.params
    tool = request.schema if config.structured_output == "anthropic_tool" else None
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
    prefill = request.json_mode and config.json_prefill and tool is None
    wire = list(request.turns)
    if prefill:
        wire.append({"role": "assistant", "content": "{"})
    if request.system:
        params = {**params, "system": request.system}
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
    finish = "stop" if tool_inputs and stop_reason == "tool_use" else normalise_finish(stop_reason)
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


async def anthropic_call(
    client: anthropic.AsyncAnthropic, config: EndpointConfig, request: Request
) -> Completion:
    """One message through the Anthropic SDK; errors are the SDK's own (see `complete`)."""
    wire, params, tool, prefill = anthropic_request(config, request)
    started = time.perf_counter()
    response = await client.messages.create(
        model=config.model,
        messages=wire,  # type: ignore[arg-type]
        **sdk_arguments(type(client.messages).create, params),
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
