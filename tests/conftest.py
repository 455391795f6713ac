"""Shared fixtures: a real rtc-agent server on a free loopback port, and media helpers."""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from rtc_agent.app import create_app
from rtc_agent.config import Settings
from rtc_agent.engines import engine_specs
from rtc_agent.worker import Worker

# the hooks: a hung test fails with its name and what it waited for
from tests.hang_watchdog import pytest_runtest_call, pytest_runtest_setup, pytest_runtest_teardown  # noqa: F401


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tone(seconds: float, freq: float = 440.0, sample_rate: int = 48000, amplitude: float = 0.3) -> np.ndarray:
    """A sine tone as int16 mono samples."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    return (np.sin(2 * np.pi * freq * t) * amplitude * 32767).astype(np.int16)


def rms(pcm: np.ndarray) -> float:
    """Root-mean-square level of int16 samples, 0..1."""
    if pcm.size == 0:
        return 0.0
    x = pcm.astype(np.float64) / 32768.0
    return float(np.sqrt(np.mean(x * x)))


class RunningServer:
    def __init__(self, app: web.Application, url: str, runner: web.AppRunner | None = None) -> None:
        self.app = app
        self.url = url
        self.runner = runner  # runner.cleanup() stops the server (as SIGTERM does)

    @property
    def registry(self) -> Any:
        from rtc_agent.server.keys import REGISTRY

        return self.app[REGISTRY]


class SharedEngine:
    """A real engine loaded once per test run and shared by every test server (closing it is a no-op)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self.engine: Any = None

    def load(self, progress: Callable[[str], None]) -> None:
        with self._lock:
            if self.engine is None:
                engine = self._make()
                engine.load(progress)
                self.engine = engine

    def run_batch(self, requests: list[Any]) -> list[Any]:
        return self.engine.run_batch(requests)

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:  # anything else (open_session, describe, ...) is the engine's
        if self.engine is None:
            raise AttributeError(name)
        return getattr(self.engine, name)


_SHARED: dict[str, SharedEngine] = {}


def shared_worker(settings: Settings) -> Worker:
    """A worker with the settings' engines, each backed by an instance shared across tests."""
    worker = Worker()
    for spec in engine_specs(settings):
        choice = (getattr(settings, f"{spec.name}_{k}", "") for k in ("engine", "url", "model"))
        key = "|".join([spec.name, *map(str, choice)])
        shared = _SHARED.setdefault(key, SharedEngine(spec.factory))
        worker.add(dataclasses.replace(spec, factory=lambda shared=shared: shared))
    return worker


async def run_server(settings: Settings, worker: Worker) -> RunningServer:
    """A real server for ``settings`` (on their loopback port) with ``worker``, started; the caller stops it with
    ``server.runner.cleanup()``."""
    app = create_app(settings, worker=worker)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", settings.port).start()
    return RunningServer(app, f"http://127.0.0.1:{settings.port}", runner)


@pytest.fixture
async def start_server() -> AsyncIterator[Callable[..., Any]]:
    """Start a real server: ``await start_server(max_sessions=1)``; stopped after the test. Engines are real and
    shared between tests (loaded on first use); ``make_worker(settings)`` replaces them."""
    runners: list[web.AppRunner] = []

    async def start(*, make_worker: Callable[[Settings], Worker] = shared_worker, **overrides: Any) -> RunningServer:
        # Admission by event-loop lag is off by default here: the tests' peers share the server's loop (and the
        # engines load in it), so its lag says little about the server; tests of admission turn it on.
        defaults = {"preload": [], "admission_max_loop_lag_ms": 0.0, "state_url": "memory:"}  # fresh per server
        settings = dataclasses.replace(Settings(), host="127.0.0.1", port=free_port(), **{**defaults, **overrides})
        server = await run_server(settings, make_worker(settings))
        runners.append(server.runner)
        return server

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def server(start_server: Callable[..., Any]) -> RunningServer:
    return await start_server()
