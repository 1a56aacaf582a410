"""A fake LLM server speaking the OpenAI and Anthropic wire protocols over real HTTP.

- OpenAI chat completions: POST /v1/chat/completions
- Anthropic messages:       POST /v1/messages
- Control: GET /_fake/stats (request counts), POST /_fake/reset

It runs on aiohttp (asyncio), so hundreds of requests can be in flight at once with an artificial
delay each — enough for throughput benchmarks. Use it from tests:

    with FakeLLMServer(delay=0.0) as server:
        client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="k")

or standalone for benchmarks:

    python -m tests.fakes.llm_server --port 8001 --delay 0.3

What it answers
- A judge prompt (one whose text contains the Table 7 output format, `"Name": X` lines): a
  valid judge JSON with one score per attribute, deterministic — derived from a SHA-256 of the
  prompt (scenario markers removed), so reruns give identical scores.
- A cognitive-distortion prompt ("COGNITIVE DISTORTIONS LIST"): one or two labels of the list.
- Anything else: a short, deterministic supportive reply.
- Answers longer than the request's max_tokens are cut, with finish_reason "length" /
  stop_reason "max_tokens", as a real server would.

Scenarios are chosen per request by a marker anywhere in the messages, built with `scenario()`:

    [[scenario:NAME key=value ...]]

The counter for "first n calls" is per distinct marker text, so give each test its own marker
(e.g. add key=<test name>). Names:
    ok                     the default answer
    429                    first n (1) calls: HTTP 429 with Retry-After: retry_after seconds (1);
                           or retry_after_ms=…, or http_date=S (Retry-After as an HTTP-date S s
                           ahead), or no_header=1; then ok
    500                    first n (1) calls: HTTP `status` (500); then ok
    slow                   first n (1) calls sleep `delay` seconds (5) before answering; then ok
    400 / 401              always (n=all by default): invalid request / authentication error;
                           401 echoes the API key back, as real servers do with part of it
    reject_json_mode       400 when the request asks for response_format, else ok
    malformed              invalid JSON (a doubled comma, a trailing comma), closed
    not_json               HTTP 200 whose body is not JSON (`html=1`: an HTML page served as
                           text/html, as a proxy's error page; default: a cut-off body served as
                           application/json)
    fenced                 JSON inside a ```json fence
    prose                  JSON with prose before and after
    truncated              JSON cut halfway, finish_reason "length" / stop_reason "max_tokens"
    cut_after_answer       a complete judge JSON, then prose cut by the limit: finish_reason
                           "length" / stop_reason "max_tokens" although the JSON parses
    cut_unreported         JSON cut in its explanation with finish_reason "stop" (a server that
                           does not say it cut)
    think                  <think>…</think> then the answer (any prompt, not only judge JSON)
    think_unopened         reasoning then </think> then the answer (DeepSeek-R1 template style)
    think_truncated        an unterminated <think> block, cut by the token limit
    missing_keys           the JSON without its last `drop` (2) attributes
    fraction               scores written as "4/5" strings
    revised                first n (all) calls: two fenced JSON answers that disagree (every
                           score 1, then "Actually, revised:" every score 5); then ok
    The answer deformations (malformed … fraction, not_json) apply to every call of a marker
    unless `n` is given: then to the first n calls, and later calls get the valid answer (or,
    with `then=500`, HTTP 500).
    reasoning_field        OpenAI: message.reasoning_content; Anthropic: a thinking block
    labels                 scripted distortion answers: call k of the marker answers the k-th
                           entry of `script` (cycling), entries separated by "|", "_" for a
                           space, "EMPTY" for an empty answer; e.g.
                           script=Labeling|Mental_Filter,_Magical_Thinking|EMPTY
Structured outputs: a request that carries a JSON schema (OpenAI/vLLM `response_format`
json_schema, llama.cpp `response_format` json_object + schema, vLLM `guided_json` or
`structured_outputs.json`, or an Anthropic forced tool call) gets its distortion answer as
{"labels": [...]}; an Anthropic forced tool call is answered with a `tool_use` block whose input
is the answer object (stop_reason "tool_use"). `request_schema(body)` finds the schema.
    out_of_range           a judge JSON whose first attribute scores `score` (6), as llama.cpp's
                           grammar allows when a schema gives bounds instead of an enum
Every request is counted per scenario name (`counts`) and recorded (`requests`, without
credentials) so tests can assert attempts and what was sent; `key_sha256` is the SHA-256 of the
API key it carried, so tests can check which key arrived without the key being kept. What the
server actually delivered is counted apart: `sent` (completions, input_tokens, output_tokens of
HTTP 200 answers written to a client that was still connected: an answer to a client that timed
out or died is not "sent"), and `in_flight` / `max_in_flight` (requests being handled now / at
most at once). `hold()` makes every request wait before it is answered until `release()` — a
worker can then be killed with all its requests in the server's hands, and
`handled_with_client_connected()` says when the server has seen all of their connections close
(`held_with_client_connected()` counts only those waiting at the gate).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.utils
import hashlib
import itertools
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import json_repair
from aiohttp import web

from tests.fakes.batch_endpoints import BatchEndpoints

MARKER = re.compile(r"\[\[scenario:([A-Za-z0-9_]+)((?:\s+[A-Za-z_]+=[^\s\]]*)*)\s*\]\]")
_TEMPLATE_KEY = re.compile(r'"([^"\n]+)"\s*:\s*X\b')
_RESERVED_KEYS = ("Overall", "Explanation")
_DISTORTION_LIST = re.compile(r"COGNITIVE DISTORTIONS LIST:`?\s*\[([^\]]*)\]")


def _connected(requests: list[web.Request]) -> int:
    """How many of `requests` still have their client on the line."""
    return sum(1 for r in requests if r.transport is not None and not r.transport.is_closing())


def scenario(name: str, **params: object) -> str:
    """The marker string that forces `name` for requests containing it."""
    extra = "".join(f" {key}={value}" for key, value in params.items())
    return f"[[scenario:{name}{extra}]]"


@dataclass
class RecordedRequest:
    protocol: str  # "openai" | "anthropic"
    scenario: str
    marker: str
    body: dict[str, Any]
    headers: dict[str, str]
    received_at: float
    key_sha256: str = ""


@dataclass
class _Reply:
    """What one request gets, before protocol-specific framing."""

    text: str = ""
    finish: str = "stop"  # "stop" | "length"
    reasoning: str | None = None
    status: int = 200
    error_type: str = ""
    error_message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: str | None = None  # sent verbatim with HTTP 200 (the not_json scenario)
    content_type: str = "application/json"


def request_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a request asks its answer to follow, in any dialect we speak, or None."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return (response_format.get("json_schema") or {}).get("schema")
    if response_format.get("type") == "json_object" and "schema" in response_format:
        return response_format["schema"]
    if "guided_json" in body:
        return body["guided_json"]
    structured = body.get("structured_outputs") or {}
    if "json" in structured:
        return structured["json"]
    tool = _forced_tool(body)
    return tool.get("input_schema") if tool else None


def _forced_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    choice = body.get("tool_choice") or {}
    if choice.get("type") != "tool":
        return None
    return next((t for t in body.get("tools") or [] if t.get("name") == choice.get("name")), None)


def approx_tokens(text: str) -> int:
    # About four characters per token for English, as tokenizers give on average.
    return max(1, (len(text) + 3) // 4)


class FakeLLMServer(BatchEndpoints):
    """The fake server; start/stop it in a background thread, or use it as a context manager."""

    def __init__(
        self,
        *,
        delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        models: dict[str, str] | None = None,
    ) -> None:
        self.delay = delay
        # As a real provider: with `api_key` set, any other key gets HTTP 401 (echoing the key
        # it got, as real servers echo part of it); with `models` set (requested name → the
        # name answered, e.g. "gpt-4o" → "gpt-4o-2024-08-06"), any other model gets HTTP 404.
        self.api_key = api_key
        self.models = models
        self.record = True  # keep every request (benchmarks turn it off: 100,000 bodies)
        self.host = host
        self.port = port
        self.counts: Counter[str] = Counter()
        self.requests: list[RecordedRequest] = []
        self._marker_calls: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._gate: asyncio.Event | None = None  # created on the server's loop
        self._held: dict[int, web.Request] = {}  # requests waiting at the gate, by id()
        self._handled: dict[int, web.Request] = {}  # every request being handled, by id()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.init_batches()

    # ----------------------------------------------------------------- addresses and state

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """For openai.AsyncOpenAI(base_url=…): the SDK appends /chat/completions."""
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """For anthropic.AsyncAnthropic(base_url=…): the SDK appends /v1/messages."""
        return self.base_url

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.requests.clear()
            self._marker_calls.clear()
            self.sent.clear()
            self.max_in_flight = self.in_flight
        self.reset_batches()

    def reset_peak(self) -> None:
        """Start measuring max_in_flight afresh (from the requests in flight now)."""
        with self._lock:
            self.max_in_flight = self.in_flight

    def hold(self) -> None:
        """Requests wait (already counted, not answered) until `release()`.

        Returns once the server's loop has closed the gate: a request reaching the gate after
        this call is held (one already past it is answered as usual)."""
        self._on_loop(lambda: self._gate_event().clear())

    def release(self) -> None:
        self._on_loop(lambda: self._gate_event().set())

    def _on_loop(self, action: Callable[[], None]) -> None:
        assert self._loop is not None, "the server is not started"

        async def apply() -> None:
            action()

        asyncio.run_coroutine_threadsafe(apply(), self._loop).result(timeout=10)

    def held_with_client_connected(self) -> int:
        """How many held requests still have their client on the line (0: all hung up)."""
        with self._lock:
            held = list(self._held.values())
        return _connected(held)

    def handled_with_client_connected(self) -> int:
        """How many requests being handled, wherever they are (reading the body, in a `delay` or
        `slow` sleep, at the gate), still have their client on the line. After a client is
        killed, 0 means the server has seen every one of its connections close, so none of its
        requests can be answered (and counted as sent) afterwards; `held_with_client_connected`
        misses those not yet at the gate."""
        with self._lock:
            handled = list(self._handled.values())
        return _connected(handled)

    def _gate_event(self) -> asyncio.Event:
        if self._gate is None:
            self._gate = asyncio.Event()
            self._gate.set()
        return self._gate

    def _count_sent(self, request: web.Request, input_tokens: int, output_tokens: int) -> None:
        transport = request.transport
        if transport is None or transport.is_closing():
            return  # the client gave up (timeout) or died: nothing reaches it
        with self._lock:
            self.sent["completions"] += 1
            self.sent["input_tokens"] += input_tokens
            self.sent["output_tokens"] += output_tokens

    def requests_for(self, marker: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.marker == marker]

    # ----------------------------------------------------------------- app

    def make_app(self) -> web.Application:
        # Batch request files and Anthropic batch bodies run to hundreds of megabytes.
        app = web.Application(client_max_size=1024**3)
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_get("/_fake/stats", self._stats)
        app.router.add_post("/_fake/reset", self._reset)
        self.add_batch_routes(app)
        return app

    async def _stats(self, request: web.Request) -> web.Response:
        with self._lock:
            counts, sent = dict(self.counts), dict(self.sent)
        return web.json_response({"counts": counts, "total": sum(counts.values()), "sent": sent})

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})

    # ----------------------------------------------------------------- lifecycle (thread)

    def start(self) -> FakeLLMServer:
        if self._thread is not None:
            raise RuntimeError("FakeLLMServer already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._startup())
            except BaseException as exc:  # report to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-llm-server", daemon=True)
        self._thread.start()
        ready.wait(timeout=10)
        if failure:
            raise RuntimeError(f"fake LLM server failed to start: {failure[0]!r}")
        return self

    async def _startup(self) -> None:
        # shutdown_timeout: do not wait for "slow" handlers whose clients gave up long ago.
        self._runner = web.AppRunner(self.make_app(), access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        sockets = site._server.sockets if site._server else ()  # port 0: the OS picked one
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        # Handlers still sleeping in a "slow" scenario: cancel them rather than leave pending
        # tasks behind when the loop closes.
        current = asyncio.current_task()
        leftovers = [task for task in asyncio.all_tasks() if task is not current]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        future.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop = self._thread = self._runner = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- protocol handlers

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        with self._tracked(request):
            return await self._openai_answer(request)

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        with self._tracked(request):
            return await self._anthropic_answer(request)

    @contextlib.contextmanager
    def _tracked(self, request: web.Request) -> Iterator[None]:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._handled[id(request)] = request
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1
                self._handled.pop(id(request), None)

    async def _openai_answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        texts = openai_texts(body)
        reply, name = await self._decide(
            request,
            protocol="openai",
            body=body,
            texts=texts,
            max_tokens=body.get("max_completion_tokens") or body.get("max_tokens"),
        )
        request_id = f"req_{next(self._ids):06d}"
        headers = {"x-request-id": request_id, **reply.headers}
        if reply.raw_body is not None and reply.status == 200:
            return _raw_response(reply, headers)
        status, payload = self._openai_payload(body, texts, reply, request_id)
        if status == 200:
            usage = payload["usage"]
            self._count_sent(request, usage["prompt_tokens"], usage["completion_tokens"])
        return web.json_response(payload, status=status, headers=headers)

    def _answered_model(self, body: dict[str, Any]) -> str:
        requested = body.get("model", "fake-model")
        return self.models.get(requested, requested) if self.models else requested

    def _openai_payload(
        self, body: dict[str, Any], texts: list[str], reply: _Reply, request_id: str
    ) -> tuple[int, dict[str, Any]]:
        if reply.status != 200:
            error = {
                "message": reply.error_message,
                "type": reply.error_type,
                "param": None,
                "code": reply.error_type,
            }
            return reply.status, {"error": error}
        prompt_tokens = sum(approx_tokens(t) for t in texts)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        completion_tokens = approx_tokens(reply.text + (reply.reasoning or ""))
        return 200, {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self._answered_model(body),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.finish,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    async def _anthropic_answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        texts = anthropic_texts(body)
        reply, name = await self._decide(
            request, protocol="anthropic", body=body, texts=texts, max_tokens=body.get("max_tokens")
        )
        request_id = f"req_{next(self._ids):06d}"
        headers = {"request-id": request_id, **reply.headers}
        if reply.raw_body is not None and reply.status == 200:
            return _raw_response(reply, headers)
        status, payload = self._anthropic_payload(body, texts, reply, request_id)
        if status == 200:
            usage = payload["usage"]
            self._count_sent(request, usage["input_tokens"], usage["output_tokens"])
        return web.json_response(payload, status=status, headers=headers)

    def _anthropic_payload(
        self, body: dict[str, Any], texts: list[str], reply: _Reply, request_id: str
    ) -> tuple[int, dict[str, Any]]:
        if reply.status != 200:
            error = {"type": reply.error_type, "message": reply.error_message}
            return reply.status, {"type": "error", "error": error}
        messages = body.get("messages") or []
        text = reply.text
        # A prefilled assistant turn: the model continues it, so the reply omits the prefix.
        if messages and messages[-1].get("role") == "assistant":
            prefix = _content_text(messages[-1].get("content"))
            if text.startswith(prefix):
                text = text[len(prefix) :]
        content: list[dict[str, Any]] = []
        if reply.reasoning is not None:
            content.append({"type": "thinking", "thinking": reply.reasoning, "signature": "fake"})
        tool = _forced_tool(body)
        stop_reason = "max_tokens" if reply.finish == "length" else "end_turn"
        if tool is not None:
            try:
                answer = json.loads(text)
            except ValueError:
                # Cut by max_tokens inside the tool input: the fields that came, as a salvaging
                # server would hand them over (every score may be there, the explanation cut).
                answer = json_repair.loads(text) if reply.finish == "length" else None
            if not isinstance(answer, dict):
                answer = {"answer": text}
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{request_id}",
                    "name": tool["name"],
                    "input": answer,
                }
            )
            stop_reason = "tool_use" if reply.finish != "length" else stop_reason
        else:
            content.append({"type": "text", "text": text})
        return 200, {
            "id": f"msg_{request_id}",
            "type": "message",
            "role": "assistant",
            "model": self._answered_model(body),
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": sum(approx_tokens(t) for t in texts),
                "output_tokens": approx_tokens(text + (reply.reasoning or "")),
            },
        }

    # ----------------------------------------------------------------- behaviour

    async def _decide(
        self,
        request: web.Request,
        *,
        protocol: str,
        body: dict[str, Any],
        texts: list[str],
        max_tokens: int | None,
    ) -> tuple[_Reply, str]:
        headers = {
            k.lower(): v
            for k, v in request.headers.items()
            if k.lower() not in ("authorization", "x-api-key")
        }
        api_key = request.headers.get("x-api-key") or request.headers.get(
            "authorization", ""
        ).removeprefix("Bearer ")
        reply, name, params, call = self._scripted(
            protocol=protocol, body=body, texts=texts, headers=headers, api_key=api_key
        )
        if self.delay:
            await asyncio.sleep(self.delay)
        if reply.status == 200 and name == "slow" and call <= failing_calls(params, default=1):
            await asyncio.sleep(float(params.get("delay", 5)))
        with self._lock:
            self._held[id(request)] = request
        try:
            await self._gate_event().wait()
        finally:
            with self._lock:
                self._held.pop(id(request), None)
        return self._shaped(reply, body=body, max_tokens=max_tokens), name

    def _scripted(
        self,
        *,
        protocol: str,
        body: dict[str, Any],
        texts: list[str],
        headers: dict[str, str],
        api_key: str,
    ) -> tuple[_Reply, str, dict[str, str], int]:
        """Count and record the request; the reply its scenario scripts (before shaping)."""
        joined = "\n".join(texts)
        match = MARKER.search(joined)
        name = match.group(1) if match else "ok"
        marker = match.group(0) if match else ""
        params = dict(p.split("=", 1) for p in match.group(2).split()) if match else {}
        with self._lock:
            self.counts[name] += 1
            self._marker_calls[marker] += 1
            call = self._marker_calls[marker]
            if self.record:
                self.requests.append(
                    RecordedRequest(
                        protocol=protocol,
                        scenario=name,
                        marker=marker,
                        body=body,
                        headers=headers,
                        received_at=time.monotonic(),
                        key_sha256=hashlib.sha256(api_key.encode()).hexdigest(),
                    )
                )
        prompt = MARKER.sub("", joined)
        reply = self._reply(
            name,
            params,
            call=call,
            protocol=protocol,
            body=body,
            prompt=prompt,
            api_key=api_key,
        )
        return reply, name, params, call

    @staticmethod
    def _shaped(reply: _Reply, *, body: dict[str, Any], max_tokens: int | None) -> _Reply:
        """Structured label answers as JSON; answers longer than max_tokens cut."""
        schema = request_schema(body)
        if reply.status == 200 and schema and "labels" in (schema.get("properties") or {}):
            try:
                json.loads(reply.text)
            except ValueError:
                labels = [part.strip() for part in reply.text.split(",") if part.strip()]
                reply.text = json.dumps({"labels": labels})
        if reply.status == 200 and max_tokens and reply.finish == "stop":
            limit_chars = int(max_tokens) * 4
            if len(reply.text) > limit_chars:
                reply.text, reply.finish = reply.text[:limit_chars], "length"
        return reply

    def _reply(
        self,
        name: str,
        params: dict[str, str],
        *,
        call: int,
        protocol: str,
        body: dict[str, Any],
        prompt: str,
        api_key: str,
    ) -> _Reply:
        rate_type = "rate_limit_exceeded" if protocol == "openai" else "rate_limit_error"
        if self.api_key is not None and api_key != self.api_key:
            return _Reply(
                status=401,
                error_type="authentication_error",
                error_message=f"Incorrect API key provided: {api_key}.",
            )
        if self.models is not None and body.get("model") not in self.models:
            return _Reply(
                status=404,
                error_type="model_not_found" if protocol == "openai" else "not_found_error",
                error_message=f"The model `{body.get('model')}` does not exist or you do not "
                "have access to it.",
            )
        if name == "429" and call <= failing_calls(params, default=1):
            headers: dict[str, str] = {}
            if "retry_after_ms" in params:
                headers["retry-after-ms"] = params["retry_after_ms"]
            elif "http_date" in params:
                when = time.time() + float(params["http_date"])
                headers["retry-after"] = email.utils.formatdate(when, usegmt=True)
            elif not params.get("no_header"):
                headers["retry-after"] = params.get("retry_after", "1")
            return _Reply(
                status=429,
                error_type=rate_type,
                error_message="Rate limit reached for requests. Please try again later.",
                headers=headers,
            )
        if name == "500" and call <= failing_calls(params, default=1):
            status = int(params.get("status", 500))
            kind = "overloaded_error" if status == 529 else "api_error"
            return _Reply(
                status=status,
                error_type="server_error" if protocol == "openai" else kind,
                error_message="The server had an error while processing your request.",
            )
        if name == "400" and call <= failing_calls(params, default=None):
            return _Reply(
                status=400,
                error_type="invalid_request_error",
                error_message="Invalid request: 'messages' is malformed.",
            )
        if name == "401" and call <= failing_calls(params, default=None):
            return _Reply(
                status=401,
                error_type="authentication_error",
                # Real servers echo (part of) the key; the full key makes redaction tests strict.
                error_message=f"Incorrect API key provided: {api_key}. You can find your API "
                "key in your account settings.",
            )
        if body.get("stream"):
            return _Reply(
                status=400,
                error_type="invalid_request_error",
                error_message="fake server: streaming is not implemented",
            )
        if name == "reject_json_mode" and "response_format" in body:
            return _Reply(
                status=400,
                error_type="invalid_request_error",
                error_message="response_format is not supported by this server",
            )

        if name == "labels":
            entries = params.get("script", "").split("|") or [""]
            entry = entries[(call - 1) % len(entries)].replace("_", " ")
            return _Reply(text="" if entry == "EMPTY" else entry)
        answer, as_json = _default_answer(prompt)
        if name == "batch_error" and call <= failing_calls(params, default=1):
            return _Reply(
                status=500,
                error_type="server_error" if protocol == "openai" else "api_error",
                error_message="The server had an error while processing this batch request.",
            )
        if name in ("ok", "429", "500", "slow", "400", "401", "reject_json_mode", "batch_error"):
            return _Reply(text=answer)
        if name == "batch_expired":  # expiry is decided by the batch endpoints
            return _Reply(text=answer)
        if "n" in params and call > failing_calls(params, default=None):
            if params.get("then") == "500":  # an unusable answer, then a server that fails
                return _Reply(
                    status=500,
                    error_type="server_error" if protocol == "openai" else "api_error",
                    error_message="The server had an error while processing your request.",
                )
            return _Reply(text=answer)  # a deformation limited to the first n calls
        if name == "not_json":
            if params.get("html"):
                page = "<html><body><h1>502 Bad Gateway</h1></body></html>"
                return _Reply(raw_body=page, content_type="text/html")
            return _Reply(raw_body='{"id": "chatcmpl-cut", "choices": [{"index": 0, "mess')
        # Reasoning-model variants apply to any prompt (generation as well as judging).
        if name == "think":
            return _Reply(text=f"<think>\n{_THOUGHT}\n</think>\n\n{answer}")
        if name == "think_unopened":
            return _Reply(text=f"{_THOUGHT}\n</think>\n\n{answer}")
        if name == "think_truncated":
            return _Reply(text=f"<think>\n{_THOUGHT} {_THOUGHT}", finish="length")
        if name == "reasoning_field":
            return _Reply(text=answer, reasoning=_THOUGHT)
        if as_json is None:
            # The variants below deform a judge JSON; for other prompts answer normally.
            return _Reply(text=answer)
        if name == "malformed":
            # Broken but finished: an answer that never closes is a cut-off one, not malformed.
            broken = json.dumps(as_json).replace(", ", ",, ", 1)[:-1] + " ,}"
            return _Reply(text=broken)
        if name == "fenced":
            return _Reply(text="```json\n" + json.dumps(as_json, indent=2) + "\n```")
        if name == "prose":
            return _Reply(
                text="Here is my evaluation of the response.\n\n"
                + json.dumps(as_json)
                + "\n\nOverall the response is reasonable; I hope this helps."
            )
        if name == "truncated":
            full = json.dumps(as_json, indent=2)
            return _Reply(text=full[: len(full) // 2], finish="length")
        if name == "cut_after_answer":
            return _Reply(text=json.dumps(as_json) + "\n\nIn addition, the", finish="length")
        if name == "cut_unreported":
            full = json.dumps(as_json)
            return _Reply(text=full[: full.index('"Explanation"') + 30])
        if name == "out_of_range":
            first = next(k for k in as_json if k not in _RESERVED_KEYS)
            return _Reply(text=json.dumps({**as_json, first: int(params.get("score", 6))}))
        if name == "missing_keys":
            drop = int(params.get("drop", 2))
            attributes = [k for k in as_json if k not in _RESERVED_KEYS]
            kept = {
                k: v for k, v in as_json.items() if k not in attributes[len(attributes) - drop :]
            }
            return _Reply(text=json.dumps(kept))
        if name == "fraction":
            scored = {
                k: (f"{v}/5" if k not in ("Explanation",) and isinstance(v, int) else v)
                for k, v in as_json.items()
            }
            return _Reply(text=json.dumps(scored))
        if name == "revised":
            if call > failing_calls(params, default=None):
                return _Reply(text=answer)
            first = {k: (1 if isinstance(v, int) else v) for k, v in as_json.items()}
            second = {k: (5 if isinstance(v, int) else v) for k, v in as_json.items()}
            return _Reply(
                text="```json\n" + json.dumps(first, indent=2) + "\n```\n\nActually, revised:"
                "\n\n```json\n" + json.dumps(second, indent=2) + "\n```"
            )
        return _Reply(
            status=400,
            error_type="invalid_request_error",
            error_message=f"fake server: unknown scenario {name!r}",
        )


_THOUGHT = (
    "Let me weigh the response against each attribute. It acknowledges the user's feelings, "
    "suggests concrete next steps and stays on topic; it could be more explicit about safety."
)


def _raw_response(reply: _Reply, headers: dict[str, str]) -> web.Response:
    return web.Response(text=reply.raw_body or "", content_type=reply.content_type, headers=headers)


def failing_calls(params: dict[str, str], *, default: int | None) -> float:
    """How many calls of a marker get the scripted failure ("all" or absent default = always)."""
    raw = params.get("n")
    if raw is None:
        return float("inf") if default is None else default
    return float("inf") if raw == "all" else int(raw)


def openai_texts(body: dict[str, Any]) -> list[str]:
    return [_content_text(m.get("content")) for m in body.get("messages") or []]


def anthropic_texts(body: dict[str, Any]) -> list[str]:
    system = body.get("system")
    texts = [_content_text(system)] if system else []
    return texts + [_content_text(m.get("content")) for m in body.get("messages") or []]


def _content_text(content: Any) -> str:
    """Text of an OpenAI/Anthropic message content (a string or a list of text blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return str(content)


def _default_answer(prompt: str) -> tuple[str, dict[str, Any] | None]:
    """(text, judge JSON or None) for a prompt, deterministic in the prompt text."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    keys = [k for k in dict.fromkeys(_TEMPLATE_KEY.findall(prompt)) if k not in _RESERVED_KEYS]
    if keys:
        scale_high = 5
        scores = {key: 1 + digest[i % len(digest)] % scale_high for i, key in enumerate(keys)}
        judge: dict[str, Any] = dict(scores)
        judge["Overall"] = round(sum(scores.values()) / len(scores))
        judge["Explanation"] = (
            f"Deterministic fake judgement {digest.hex()[:8]}: the response is supportive and "
            "mostly on topic."
        )
        return json.dumps(judge), judge
    distortions = _DISTORTION_LIST.search(prompt)
    if distortions:
        labels = [label.strip() for label in distortions.group(1).split(",") if label.strip()]
        if digest[0] % 5 == 0 or not labels:
            return "No Distortion", None
        first = labels[digest[1] % len(labels)]
        second = labels[digest[2] % len(labels)]
        chosen = [first] if second == first or digest[3] % 2 else [first, second]
        return ", ".join(chosen), None
    return (
        "I'm really sorry you're going through this. What you describe sounds exhausting, and "
        "it makes sense that you feel overwhelmed. It may help to write down when these feelings "
        "are strongest and to talk with a licensed therapist who can work through them with you. "
        f"(fake reply {digest.hex()[:8]})",
        None,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI + Anthropic server for benchmarks")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds added to each request")
    parser.add_argument("--no-record", action="store_true", help="do not keep request bodies")
    args = parser.parse_args(argv)
    server = FakeLLMServer(delay=args.delay, host=args.host, port=args.port)
    server.record = not args.no_record
    print(
        f"fake LLM server on http://{args.host}:{args.port} "
        f"(OpenAI base_url http://{args.host}:{args.port}/v1), delay {args.delay}s",
        flush=True,
    )
    web.run_app(
        server.make_app(),
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        backlog=1024,
    )


if __name__ == "__main__":
    main()
