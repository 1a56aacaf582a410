"""The providers' batch interfaces through their official SDKs: OpenAI Batch (JSONL file upload,
/v1/batches, output and error files) and Anthropic Message Batches (/v1/messages/batches,
streamed results).

Request bodies come from `openai_request` / `anthropic_request` and answers are read by
`openai_completion` / `anthropic_completion`, exactly as in immediate mode, so a
batch run sends the same prompts, sampling and structured output and parses the same way.
Clients are synchronous: batch work runs in short Celery tasks, never waiting on the provider.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final

# The SDKs are imported where they are used: every web process imports this module (through
# judging.views), and only batch work needs them.
if TYPE_CHECKING:
    import anthropic
    import openai

from .anthropic_adapter import anthropic_completion, anthropic_request
from .client import sdk_api_key, without_worker_account
from .config import Completion, EndpointConfig, OutputSchema, Request, request_build
from .errors import ProviderError, TransientError, map_exception, redact
from .openai_adapter import openai_completion, openai_request

OPENAI_ENDPOINT: Final = "/v1/chat/completions"
COMPLETION_WINDOW: Final = "24h"


def supports_batch(*, provider: str, flag: bool) -> bool:
    """OpenAI and Anthropic always have a batch interface; other servers only where they say so."""
    return provider in ("openai", "anthropic") or (provider == "openai_compatible" and flag)


def client(config: EndpointConfig) -> openai.OpenAI | anthropic.Anthropic:
    """A synchronous SDK client (no SDK retries: a failed poll is simply polled again later)."""
    import anthropic
    import openai

    api_key = sdk_api_key(config)
    if config.provider == "anthropic":
        return anthropic.Anthropic(
            api_key=api_key, base_url=config.base_url, timeout=config.timeout, max_retries=0
        )
    return without_worker_account(
        openai.OpenAI(
            api_key=api_key, base_url=config.base_url, timeout=config.timeout, max_retries=0
        )
    )


# ------------------------------------------------------------------------------ request lines


@dataclass(frozen=True, kw_only=True)
class RequestSpec:
    """How every request of a run is asked (one per item; the prompt differs)."""

    temperature: float | None
    max_tokens: int | None
    json_mode: bool
    schema: OutputSchema | None


def request_line(
    config: EndpointConfig, *, custom_id: str, system: str, user: str, spec: RequestSpec
) -> dict[str, Any]:
    """One request of a batch, in the provider's format."""
    request = request_build(
        config,
        system=system,
        user=user,
        temperature=spec.temperature,
        max_tokens=spec.max_tokens,
        json_mode=spec.json_mode,
        schema=spec.schema,
    )
    if config.provider == "anthropic":
        wire, body, _, _ = anthropic_request(config, request)
        return {
            "custom_id": custom_id,
            "params": {"model": config.model, "messages": wire, **body},
        }
    wire, body = openai_request(config, request)
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": OPENAI_ENDPOINT,
        "body": {"model": config.model, "messages": wire, **body},
    }


def answer_tool(config: EndpointConfig, spec: RequestSpec) -> tuple[OutputSchema | None, bool]:
    """(answer tool, prefilled) of an Anthropic request, to read its results back."""
    empty = Request(system=None, turns=[], params={}, json_mode=spec.json_mode, schema=spec.schema)
    _, _, tool, prefill = anthropic_request(config, empty)
    return tool, prefill


# ------------------------------------------------------------------------------ submit, poll


@dataclass(frozen=True, kw_only=True)
class Submitted:
    batch_id: str
    input_file_id: str


def submit(
    sdk: openai.OpenAI | anthropic.Anthropic,
    config: EndpointConfig,
    *,
    jsonl: IO[bytes],
    token: str,
) -> Submitted:
    """Upload the request file (OpenAI) or send its requests (Anthropic) and create the batch.

    `jsonl` is the file of request lines, read from disk: OpenAI gets it as the upload as it
    is; Anthropic takes the requests in one JSON body, so one part is read into memory (the
    part size is bounded by the batch limits in settings).
    """
    import anthropic
    import openai

    try:
        if isinstance(sdk, anthropic.Anthropic):
            requests = [json.loads(line) for line in jsonl if line.strip()]
            batch = sdk.messages.batches.create(requests=requests)
            return Submitted(batch_id=batch.id, input_file_id="")
        uploaded = sdk.files.create(file=(f"{token}.jsonl", jsonl), purpose="batch")
        created = sdk.batches.create(
            input_file_id=uploaded.id,
            endpoint=OPENAI_ENDPOINT,
            completion_window=COMPLETION_WINDOW,
            metadata={"mentalbench_batch": token},
        )
        return Submitted(batch_id=created.id, input_file_id=uploaded.id)
    except (openai.APIError, anthropic.APIError) as exc:
        raise _mapped(config, exc) from None


@dataclass(frozen=True, kw_only=True)
class BatchState:
    """Where a provider batch stands: "in_progress", "ended" (results to download, whatever
    their mix), "failed" (the whole batch was refused: nothing was answered)."""

    state: str
    provider_status: str
    error: str = ""
    output_file_id: str | None = None
    error_file_id: str | None = None


def retrieve(
    sdk: openai.OpenAI | anthropic.Anthropic, config: EndpointConfig, *, batch_id: str
) -> BatchState:
    import anthropic
    import openai

    try:
        if isinstance(sdk, anthropic.Anthropic):
            batch = sdk.messages.batches.retrieve(batch_id)
            status = batch.processing_status
            return BatchState(
                state="ended" if status == "ended" else "in_progress", provider_status=status
            )
        job = sdk.batches.retrieve(batch_id)
    except (openai.APIError, anthropic.APIError) as exc:
        raise _mapped(config, exc) from None
    if job.status == "failed":
        errors = job.errors.data if job.errors and job.errors.data else []
        why = "; ".join(f"{e.code}: {e.message}" for e in errors) or "the provider failed it"
        return BatchState(state="failed", provider_status=job.status, error=why)
    if job.status in ("completed", "expired", "cancelled"):
        return BatchState(
            state="ended",
            provider_status=job.status,
            output_file_id=job.output_file_id,
            error_file_id=job.error_file_id,
        )
    return BatchState(state="in_progress", provider_status=job.status)


def cancel(
    sdk: openai.OpenAI | anthropic.Anthropic, config: EndpointConfig, *, batch_id: str
) -> None:
    import anthropic
    import openai

    try:
        if isinstance(sdk, anthropic.Anthropic):
            sdk.messages.batches.cancel(batch_id)
        else:
            sdk.batches.cancel(batch_id)
    except (openai.APIError, anthropic.APIError) as exc:
        raise _mapped(config, exc) from None


# ------------------------------------------------------------------------------ results


@dataclass(frozen=True, kw_only=True)
class BatchResult:
    """One request's result: a completion, or why there is none.

    kind: "succeeded", "errored" (the request failed at the provider), "expired" (not run
    within the window), "canceled" (the batch was cancelled before it ran), "unreadable" (an
    answer the SDK could not read).
    """

    custom_id: str
    kind: str
    completion: Completion | None = None
    error: str = ""


def results(
    sdk: openai.OpenAI | anthropic.Anthropic,
    config: EndpointConfig,
    *,
    batch_id: str,
    state: BatchState,
    spec: RequestSpec,
) -> Iterator[BatchResult]:
    """Every result of an ended batch, streamed line by line (never the whole file in memory)."""
    import anthropic
    import openai

    try:
        if isinstance(sdk, anthropic.Anthropic):
            tool, prefill = answer_tool(config, spec)
            for entry in sdk.messages.batches.results(batch_id):
                yield _anthropic_result(config, entry, tool=tool, prefill=prefill)
            return
        for file_id in (state.output_file_id, state.error_file_id):
            if not file_id:
                continue
            with sdk.files.with_streaming_response.content(file_id) as response:
                for line in response.iter_lines():
                    if line.strip():
                        yield _openai_result(config, json.loads(line))
    except (openai.APIError, anthropic.APIError) as exc:
        raise _mapped(config, exc) from None


def _openai_result(config: EndpointConfig, line: dict[str, Any]) -> BatchResult:
    import openai

    custom_id = str(line.get("custom_id") or "")
    error = line.get("error") or {}
    response = line.get("response") or {}
    if error:
        code = error.get("code") or ""
        kind = (
            "expired" if code == "batch_expired" else "canceled" if "cancel" in code else "errored"
        )
        return BatchResult(custom_id=custom_id, kind=kind, error=f"{code}: {error.get('message')}")
    body = response.get("body") or {}
    status = response.get("status_code")
    if status != 200:
        detail = (body.get("error") or {}).get("message") if isinstance(body, dict) else body
        return BatchResult(
            custom_id=custom_id, kind="errored", error=f"HTTP {status}: {detail or 'no detail'}"
        )
    try:
        parsed = openai.types.chat.ChatCompletion.model_validate(body)
        completion = openai_completion(
            config, parsed, latency=0.0, request_id=response.get("request_id")
        )
    except (ValueError, ProviderError) as exc:
        return BatchResult(custom_id=custom_id, kind="unreadable", error=str(exc)[:500])
    return BatchResult(custom_id=custom_id, kind="succeeded", completion=completion)


def _anthropic_result(
    config: EndpointConfig, entry: Any, *, tool: OutputSchema | None, prefill: bool
) -> BatchResult:
    result = entry.result
    if result.type == "succeeded":
        try:
            completion = anthropic_completion(
                config, result.message, tool=tool, prefill=prefill, latency=0.0
            )
        except ProviderError as exc:
            return BatchResult(custom_id=entry.custom_id, kind="unreadable", error=str(exc))
        return BatchResult(custom_id=entry.custom_id, kind="succeeded", completion=completion)
    if result.type == "errored":
        inner = getattr(result.error, "error", None)
        detail = f"{getattr(inner, 'type', '')}: {getattr(inner, 'message', '')}"
        return BatchResult(custom_id=entry.custom_id, kind="errored", error=detail)
    return BatchResult(custom_id=entry.custom_id, kind=result.type, error=result.type)


def _mapped(config: EndpointConfig, exc: BaseException) -> ProviderError:
    mapped = map_exception(config, exc)
    if mapped is not None:
        return mapped
    return TransientError(
        f"{config.label}: {redact(str(exc), config.api_key)}", endpoint=config.label
    )


# ------------------------------------------------------------------------------ token counts


def count_input_tokens(
    sdk: anthropic.Anthropic, config: EndpointConfig, *, system: str, user: str, spec: RequestSpec
) -> int:
    """Anthropic's token-counting endpoint for one request exactly as it would be sent."""
    import anthropic
    import openai

    line = request_line(config, custom_id="count", system=system, user=user, spec=spec)
    params = {
        k: v
        for k, v in line["params"].items()
        if k in ("model", "messages", "system", "tools", "tool_choice")
    }
    try:
        return sdk.messages.count_tokens(**params).input_tokens
    except (openai.APIError, anthropic.APIError) as exc:
        raise _mapped(config, exc) from None
