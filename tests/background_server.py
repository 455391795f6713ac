"""A real rtc-agent server on its own event loop in a background thread, for synchronous tests (hypothesis).

Hypothesis runs its examples synchronously. Rather than nesting event loops, the server, its HTTP client and any
in-process aiortc peers live on one loop in a thread; the test body hands them coroutines with :meth:`run`::

    with BackgroundServer(max_sessions=4) as srv:
        status, headers, body = srv.request("GET", "/health")
        peer = srv.run(connect_peer(srv.url, "echo"))

Engines are the shared ones of :mod:`tests.conftest` (loaded once per test run).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from rtc_agent.app import create_app
from rtc_agent.config import Settings
from rtc_agent.server.keys import REGISTRY
from rtc_agent.worker import Worker
from tests.conftest import free_port, shared_worker

#: ``pytestmark`` for hypothesis tests against this server: aiortc's RTCP loops and aioice's consent checks call
#: ``random.random()`` on the server's thread while hypothesis draws on the test's, which hypothesis takes for a
#: strategy using the ``random`` module (a false positive)
OTHER_THREADS_USE_RANDOM = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module:hypothesis.errors.HypothesisDeprecationWarning")

#: settings that keep a fuzzed server answering 4xx rather than 429/503 for reasons unrelated to the input
FUZZ_SETTINGS: dict[str, Any] = {
    "preload": [],
    "rate_sessions_per_minute": 1_000_000,
    "rate_uploads_per_minute": 1_000_000,
    "rate_tokens_per_minute": 1_000_000,
    "rate_logins_per_minute": 1_000_000,
    "admission_max_loop_lag_ms": 0.0,
    "admission_max_queue_delay_ms": 0.0,
    "state_url": "memory:",  # a fresh state store per server (no budgets or tokens carried between tests)
}


class BackgroundServer:
    """Start with ``with`` (or :meth:`start` / :meth:`stop`)."""

    def __init__(self, prepare: Callable[[], Awaitable[dict[str, Any]]] | None = None, *,
                 make_worker: Callable[[Settings], Worker] = shared_worker, **overrides: Any) -> None:
        """``prepare`` runs on the server's loop before the app is made (e.g. starting a stub engine server)
        and returns more setting overrides; ``make_worker(settings)`` gives the engines (the shared real ones by
        default; scripted ones from :mod:`tests.fakes`)."""
        self.port = free_port()
        self.prepare = prepare
        self.make_worker = make_worker
        self.overrides = {**FUZZ_SETTINGS, **overrides}
        self.settings = dataclasses.replace(Settings(), host="127.0.0.1", port=self.port, **self.overrides)
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="background-server", daemon=True)
        self.app: web.Application | None = None
        self.runner: web.AppRunner | None = None
        self.http: aiohttp.ClientSession | None = None

    def __enter__(self) -> BackgroundServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def registry(self) -> Any:
        assert self.app is not None
        return self.app[REGISTRY]

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 60.0) -> Any:
        """Run ``coro`` on the server's loop and return its result (raise its exception)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Call ``fn`` on the server's loop (for reading state the loop owns)."""
        async def wrapped() -> Any:
            return fn()
        return self.run(wrapped(), timeout)

    def start(self) -> None:
        self._thread.start()
        self.run(self._start())

    async def _start(self) -> None:
        if self.prepare is not None:
            extra = await self.prepare()
            self.settings = dataclasses.replace(self.settings, **extra)
        self.app = create_app(self.settings, worker=self.make_worker(self.settings))
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        self.http = aiohttp.ClientSession()

    def stop(self) -> None:
        if self.runner is not None:
            self.run(self._stop(), timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()

    async def _stop(self) -> None:
        if self.http is not None:
            await self.http.close()
        assert self.runner is not None
        await self.runner.cleanup()
        self.runner = None
        # aiortc's connect tasks of sessions closed just now wind down within moments; then nothing may be left
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if others:
            _, pending = await asyncio.wait(others, timeout=3.0)
            for task in pending:
                task.cancel()

    async def arequest(self, method: str, path: str, *, headers: Mapping[str, str] | None = None,
                       data: Any = None, timeout: float = 30.0) -> tuple[int, dict[str, str], bytes]:
        assert self.http is not None
        async with self.http.request(method, self.url + path, headers=dict(headers or {}), data=data,
                                     allow_redirects=False, skip_auto_headers=("Content-Type",),
                                     timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            return resp.status, dict(resp.headers), await resp.read()

    def request(self, method: str, path: str, **kw: Any) -> tuple[int, dict[str, str], bytes]:
        """One HTTP request from the server's loop: ``(status, headers, body)``."""
        return self.run(self.arequest(method, path, **kw))

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0, period: float = 0.05) -> bool:
        """Poll ``predicate`` on the server's loop until it holds; False at the deadline."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.call(predicate):
                return True
            time.sleep(period)
        return bool(self.call(predicate))

    def no_sessions(self, timeout: float = 10.0) -> bool:
        """Wait until no session is active (the server closes failed set-ups on its own)."""
        return self.wait_until(lambda: not self.registry.active, timeout)
