"""The batch interfaces of the fake LLM server (mixed into FakeLLMServer), over real HTTP.

OpenAI: POST /v1/files (multipart upload, purpose "batch"), GET /v1/files/{id}/content,
POST /v1/batches, GET /v1/batches/{id}, POST /v1/batches/{id}/cancel.
Anthropic: POST /v1/messages/batches, GET /v1/messages/batches/{id},
POST /v1/messages/batches/{id}/cancel, GET /v1/messages/batches/{id}/results,
POST /v1/messages/count_tokens.

Each request of a batch is answered exactly as the live endpoints would answer it (same
scenario markers, same scores, same usage), when the batch is processed. How batches behave:
- `batch_polls` (1): how many retrieves a batch takes to end; each retrieve processes its share
  of the requests, so results arrive over several polls (request counts grow) and the output
  is available once it ended.
- `batch_fail_next` (0): that many next OpenAI batches end `failed` (validation) on their first
  retrieve, answering nothing.
- markers `[[scenario:batch_error n=1]]` (the request errors: HTTP 500 in the error file /
  Anthropic "errored") and `[[scenario:batch_expired n=1]]` (the request expires unanswered: the
  OpenAI batch ends `expired` with a `batch_expired` line in its error file, Anthropic reports
  "expired"); after n calls of the marker the request is answered normally, so re-asks succeed.
- cancel: requests not yet processed are cancelled (absent from OpenAI's output, Anthropic
  "canceled"); what was processed is still returned.
- `hold()` also holds result downloads after `batch_hold_after_lines` lines (default 1): a
  poller can be killed mid-download.
`batch_sent` counts what the batch interfaces answered (completions, input/output tokens).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web


@dataclass
class FakeBatch:
    protocol: str
    id: str
    requests: list[dict[str, Any]]
    api_key: str
    created_at: float = field(default_factory=time.time)
    input_file_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    status: str = "in_progress"
    polls: int = 0
    processed: int = 0
    fail: bool = False
    cancel_requested: bool = False
    results: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (file, line)
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: Counter[str] = field(default_factory=Counter)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


class BatchEndpoints:
    """Mixin: needs FakeLLMServer's `_scripted`, `_shaped`, payload builders, lock and gate."""

    def init_batches(self) -> None:
        self.batch_polls = 1
        self.batch_fail_next = 0
        self.batch_hold_after_lines = 1
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, FakeBatch] = {}
        self.batch_sent: Counter[str] = Counter()
        self.batch_calls: Counter[str] = Counter()  # requests per batch endpoint
        self._batch_ids = itertools.count(1)

    def reset_batches(self) -> None:
        self.batch_polls = 1
        self.batch_fail_next = 0
        self.batch_hold_after_lines = 1
        self.files.clear()
        self.batches.clear()
        self.batch_sent.clear()
        self.batch_calls.clear()

    def add_batch_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/files", self._file_upload)
        app.router.add_get("/v1/files/{id}/content", self._file_content)
        app.router.add_post("/v1/batches", self._openai_batch_create)
        app.router.add_get("/v1/batches/{id}", self._openai_batch_get)
        app.router.add_post("/v1/batches/{id}/cancel", self._openai_batch_cancel)
        app.router.add_post("/v1/messages/batches", self._anthropic_batch_create)
        app.router.add_get("/v1/messages/batches/{id}", self._anthropic_batch_get)
        app.router.add_post("/v1/messages/batches/{id}/cancel", self._anthropic_batch_cancel)
        app.router.add_get("/v1/messages/batches/{id}/results", self._anthropic_results)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)

    # ----------------------------------------------------------------- processing

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._batch_ids):06d}"

    def _key(self, request: web.Request) -> str:
        return request.headers.get("x-api-key") or request.headers.get(
            "authorization", ""
        ).removeprefix("Bearer ")

    def _advance(self, batch: FakeBatch) -> None:
        """One retrieve: process this poll's share; end the batch when all are done."""
        if batch.status in ("completed", "expired", "cancelled", "failed", "ended"):
            return
        if batch.fail:
            batch.status = "failed"
            return
        batch.polls += 1
        total = len(batch.requests)
        if batch.cancel_requested:
            for request in batch.requests[batch.processed :]:
                self._record_cancelled(batch, request)
            batch.processed = total
            self._end(batch, cancelled=True)
            return
        upto = min(total, math.ceil(total * batch.polls / max(1, self.batch_polls)))
        for request in batch.requests[batch.processed : upto]:
            self._answer(batch, request)
        batch.processed = upto
        if upto >= total:
            self._end(batch, cancelled=False)

    def _answer(self, batch: FakeBatch, request: dict[str, Any]) -> None:
        custom_id = request["custom_id"]
        openai_style = batch.protocol == "openai"
        body = request["body"] if openai_style else request["params"]
        texts = _texts(body, openai_style)
        reply, name, params, call = self._scripted(  # type: ignore[attr-defined]
            protocol=batch.protocol, body=body, texts=texts, headers={}, api_key=batch.api_key
        )
        from tests.fakes.llm_server import failing_calls

        if name == "batch_expired" and call <= failing_calls(params, default=1):
            batch.counts["expired"] += 1
            if openai_style:
                error = {
                    "code": "batch_expired",
                    "message": "This request could not be executed "
                    "before the completion window expired.",
                }
                batch.results.append(
                    (
                        "error",
                        {
                            "id": self._next_id("batch_req_"),
                            "custom_id": custom_id,
                            "response": None,
                            "error": error,
                        },
                    )
                )
            else:
                batch.results.append(
                    ("output", {"custom_id": custom_id, "result": {"type": "expired"}})
                )
            return
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        reply = self._shaped(reply, body=body, max_tokens=max_tokens)  # type: ignore[attr-defined]
        request_id = self._next_id("req_b")
        if reply.raw_body is not None and reply.status == 200:
            reply.status, reply.error_type = 500, "server_error"
            reply.error_message = "fake server: a raw body cannot go into a batch"
        if openai_style:
            status, payload = self._openai_payload(body, texts, reply, request_id)  # type: ignore[attr-defined]
            line = {
                "id": self._next_id("batch_req_"),
                "custom_id": custom_id,
                "response": {"status_code": status, "request_id": request_id, "body": payload},
                "error": None,
            }
            if status == 200:
                self._count_batch_sent(
                    payload["usage"]["prompt_tokens"], payload["usage"]["completion_tokens"]
                )
                batch.counts["completed"] += 1
                batch.results.append(("output", line))
            else:
                batch.counts["failed"] += 1
                batch.results.append(("error", line))
            return
        status, payload = self._anthropic_payload(body, texts, reply, request_id)  # type: ignore[attr-defined]
        if status == 200:
            usage = payload["usage"]
            self._count_batch_sent(usage["input_tokens"], usage["output_tokens"])
            batch.counts["succeeded"] += 1
            result: dict[str, Any] = {"type": "succeeded", "message": payload}
        else:
            batch.counts["errored"] += 1
            result = {"type": "errored", "error": payload}
        batch.results.append(("output", {"custom_id": custom_id, "result": result}))

    def _record_cancelled(self, batch: FakeBatch, request: dict[str, Any]) -> None:
        batch.counts["canceled"] += 1
        if batch.protocol == "anthropic":
            batch.results.append(
                ("output", {"custom_id": request["custom_id"], "result": {"type": "canceled"}})
            )
        # OpenAI leaves requests that never ran out of both files.

    def _count_batch_sent(self, input_tokens: int, output_tokens: int) -> None:
        with self._lock:  # type: ignore[attr-defined]
            self.batch_sent["completions"] += 1
            self.batch_sent["input_tokens"] += input_tokens
            self.batch_sent["output_tokens"] += output_tokens

    def _end(self, batch: FakeBatch, *, cancelled: bool) -> None:
        if batch.protocol == "anthropic":
            batch.status = "ended"
            return
        batch.status = (
            "cancelled" if cancelled else ("expired" if batch.counts["expired"] else "completed")
        )
        for kind in ("output", "error"):
            lines = [json.dumps(line) for name, line in batch.results if name == kind]
            if lines:
                file_id = self._next_id("file-")
                self.files[file_id] = ("\n".join(lines) + "\n").encode()
                setattr(batch, f"{kind}_file_id", file_id)

    # ----------------------------------------------------------------- OpenAI

    async def _file_upload(self, request: web.Request) -> web.Response:
        self.batch_calls["files.create"] += 1
        form = await request.post()
        upload = form.get("file")
        data = upload.file.read() if hasattr(upload, "file") else str(upload or "").encode()
        file_id = self._next_id("file-")
        self.files[file_id] = data
        return web.json_response(
            {
                "id": file_id,
                "object": "file",
                "bytes": len(data),
                "created_at": int(time.time()),
                "filename": getattr(upload, "filename", "batch.jsonl"),
                "purpose": str(form.get("purpose") or "batch"),
                "status": "processed",
            }
        )

    async def _file_content(self, request: web.Request) -> web.StreamResponse:
        self.batch_calls["files.content"] += 1
        data = self.files.get(request.match_info["id"])
        if data is None:
            return _not_found("file")
        response = web.StreamResponse(headers={"content-type": "application/octet-stream"})
        await response.prepare(request)
        await self._write_held(request, response, data.splitlines(keepends=True))
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    async def _write_held(
        self, request: web.Request, response: web.StreamResponse, lines: list[bytes]
    ) -> None:
        """Write result lines; with the gate closed, stop after the first few until released."""
        gate: asyncio.Event = self._gate_event()  # type: ignore[attr-defined]
        for index, line in enumerate(lines):
            if index == self.batch_hold_after_lines and not gate.is_set():
                with self._lock:  # type: ignore[attr-defined]
                    self._held[id(request)] = request  # type: ignore[attr-defined]
                try:
                    await gate.wait()
                finally:
                    with self._lock:  # type: ignore[attr-defined]
                        self._held.pop(id(request), None)  # type: ignore[attr-defined]
            try:
                await response.write(line)
            except ConnectionResetError:
                return  # the poller was killed mid-download: nobody is reading any more

    async def _openai_batch_create(self, request: web.Request) -> web.Response:
        self.batch_calls["batches.create"] += 1
        body = await request.json()
        data = self.files.get(body.get("input_file_id", ""))
        if data is None:
            return _not_found("input file")
        requests = [json.loads(line) for line in data.splitlines() if line.strip()]
        batch = FakeBatch(
            protocol="openai",
            id=self._next_id("batch_"),
            requests=requests,
            api_key=self._key(request),
            input_file_id=body["input_file_id"],
            metadata=body.get("metadata") or {},
        )
        if self.batch_fail_next > 0:
            self.batch_fail_next -= 1
            batch.fail = True
        self.batches[batch.id] = batch
        return web.json_response(self._openai_object(batch))

    async def _openai_batch_get(self, request: web.Request) -> web.Response:
        self.batch_calls["batches.retrieve"] += 1
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _not_found("batch")
        self._advance(batch)
        return web.json_response(self._openai_object(batch))

    async def _openai_batch_cancel(self, request: web.Request) -> web.Response:
        self.batch_calls["batches.cancel"] += 1
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _not_found("batch")
        if batch.status == "in_progress":
            batch.cancel_requested, batch.status = True, "cancelling"
        return web.json_response(self._openai_object(batch))

    def _openai_object(self, batch: FakeBatch) -> dict[str, Any]:
        errors = None
        if batch.status == "failed":
            errors = {
                "object": "list",
                "data": [
                    {
                        "code": "invalid_request",
                        "message": "fake: this batch failed validation",
                        "param": None,
                        "line": 1,
                    }
                ],
            }
        if batch.status == "cancelling":
            status = "cancelling"
        else:
            status = batch.status
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "errors": errors,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": int(batch.created_at),
            "request_counts": {
                "total": len(batch.requests),
                "completed": batch.counts["completed"],
                "failed": batch.counts["failed"] + batch.counts["expired"],
            },
            "metadata": batch.metadata,
        }

    # ----------------------------------------------------------------- Anthropic

    async def _anthropic_batch_create(self, request: web.Request) -> web.Response:
        self.batch_calls["messages.batches.create"] += 1
        body = await request.json()
        batch = FakeBatch(
            protocol="anthropic",
            id=self._next_id("msgbatch_"),
            requests=list(body.get("requests") or []),
            api_key=self._key(request),
        )
        self.batches[batch.id] = batch
        return web.json_response(self._anthropic_object(batch, request))

    async def _anthropic_batch_get(self, request: web.Request) -> web.Response:
        self.batch_calls["messages.batches.retrieve"] += 1
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _not_found("batch")
        self._advance(batch)
        return web.json_response(self._anthropic_object(batch, request))

    async def _anthropic_batch_cancel(self, request: web.Request) -> web.Response:
        self.batch_calls["messages.batches.cancel"] += 1
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _not_found("batch")
        if batch.status == "in_progress":
            batch.cancel_requested, batch.status = True, "canceling"
        return web.json_response(self._anthropic_object(batch, request))

    async def _anthropic_results(self, request: web.Request) -> web.StreamResponse:
        self.batch_calls["messages.batches.results"] += 1
        batch = self.batches.get(request.match_info["id"])
        if batch is None or batch.status != "ended":
            return _not_found("results")
        response = web.StreamResponse(headers={"content-type": "application/binary"})
        await response.prepare(request)
        lines = [(json.dumps(line) + "\n").encode() for _, line in batch.results]
        await self._write_held(request, response, lines)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    async def _count_tokens(self, request: web.Request) -> web.Response:
        self.batch_calls["messages.count_tokens"] += 1
        body = await request.json()
        from tests.fakes.llm_server import approx_tokens

        tokens = sum(approx_tokens(text) for text in _texts(body, False))
        return web.json_response({"input_tokens": tokens})

    def _anthropic_object(self, batch: FakeBatch, request: web.Request) -> dict[str, Any]:
        ended = batch.status == "ended"
        status = "canceling" if batch.status == "canceling" else batch.status
        base = f"{request.scheme}://{request.host}"
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": {
                "processing": len(batch.requests) - batch.processed,
                "succeeded": batch.counts["succeeded"],
                "errored": batch.counts["errored"],
                "canceled": batch.counts["canceled"],
                "expired": batch.counts["expired"],
            },
            "created_at": _iso(batch.created_at),
            "expires_at": _iso(batch.created_at + 86400),
            "ended_at": _iso(time.time()) if ended else None,
            "archived_at": None,
            "cancel_initiated_at": _iso(time.time()) if batch.cancel_requested else None,
            "results_url": f"{base}/v1/messages/batches/{batch.id}/results" if ended else None,
        }


def _texts(body: dict[str, Any], openai_style: bool) -> list[str]:
    from tests.fakes.llm_server import anthropic_texts, openai_texts

    return openai_texts(body) if openai_style else anthropic_texts(body)


def _not_found(what: str) -> web.Response:
    return web.json_response(
        {"error": {"type": "not_found_error", "message": f"fake server: no such {what}"}},
        status=404,
    )
