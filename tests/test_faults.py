"""Faults (issue 11, item 9): remote engines that are dead (a closed port) or hang (a server that accepts the TCP
connection and never answers), and a server that stops under a connected client.

For the LLM (agent app), ASR (captions app) and TTS (agent app): the client gets an ``error`` event with an engine
code and a message without the URL's credentials, within a time set by the engine's timeouts (shrunk here), and
the session and the server go on. A stopped server says ``session.ended {reason: "server_shutdown"}`` before the
channel closes and finishes within ``shutdown_timeout_s``, even while engine calls hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from rtc_agent.config import Settings
from rtc_agent.engines import engine_specs
from rtc_agent.engines import llm as llm_engines
from rtc_agent.engines.asr.openai import OpenAIASREngine
from rtc_agent.engines.tts.openai import OpenAITTSEngine
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PcmSourceTrack
from rtc_agent.worker import Worker
from tests.conftest import _SHARED, RunningServer, SharedEngine, free_port
from tests.openai_stub import OpenAIStub, text_reply
from tests.speech import speech_clip

TIMEOUT_S = 1.5  # every remote engine's connect and read timeout here (their defaults: 5-60 s)
SECRET = "hunter2secret"
USER_MESSAGE = {"type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]}}


class HangingServer:
    """Accepts TCP connections, reads what comes and never answers."""

    def __init__(self) -> None:
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass

    async def close(self) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()


def secret_url(port: int) -> str:
    """An engine URL with credentials in its user-info and its query: neither may reach a client."""
    return f"http://user:{SECRET}@127.0.0.1:{port}/v1?api_key={SECRET}"


def fault_worker(settings: Settings, timeout_s: float = TIMEOUT_S) -> Worker:
    """The settings' engines: remote ones with ``timeout_s`` as connect and read timeouts, embedded ones shared
    across tests."""
    worker = Worker()
    for spec in engine_specs(settings):
        if spec.name == "llm" and settings.llm_engine == "openai":
            spec = llm_engines.engine_spec(settings, connect_timeout=timeout_s, read_timeout=timeout_s)
        elif spec.name == "asr" and settings.asr_engine == "openai":
            spec = dataclasses.replace(spec, factory=lambda: OpenAIASREngine(
                settings.asr_url, "whisper-1", api_key=SECRET, timeout_s=timeout_s))
        elif spec.name == "tts" and settings.tts_engine == "openai":
            spec = dataclasses.replace(spec, factory=lambda: OpenAITTSEngine(
                settings.tts_url, api_key=SECRET, timeout_s=timeout_s, connect_timeout_s=timeout_s))
        else:
            choice = (getattr(settings, f"{spec.name}_{k}", "") for k in ("engine", "url", "model"))
            shared = _SHARED.setdefault("|".join([spec.name, *map(str, choice)]), SharedEngine(spec.factory))
            spec = dataclasses.replace(spec, factory=lambda shared=shared: shared)
        worker.add(spec)
    return worker


class Started:
    def __init__(self, server: RunningServer, runner: web.AppRunner) -> None:
        self.server, self.runner = server, runner


@pytest.fixture
def start(start_server: Callable[..., Any]) -> Callable[..., Any]:
    async def make(engine_timeout_s: float = TIMEOUT_S, **overrides: Any) -> Started:
        server = await start_server(make_worker=lambda s: fault_worker(s, engine_timeout_s), **overrides)
        return Started(server, server.runner)

    return make


@pytest.fixture
async def hanging() -> AsyncIterator[HangingServer]:
    server = HangingServer()
    yield server
    await server.close()


@pytest.fixture
async def stub() -> AsyncIterator[OpenAIStub]:
    async with OpenAIStub(default=text_reply("Hello there. How can I help you today?", piece_size=6)) as s:
        yield s


def assert_safe_engine_error(event: dict[str, Any], prefixes: tuple[str, ...]) -> None:
    error = event["error"]
    assert error["code"].startswith(prefixes), error
    assert error["type"] and error["message"], error
    assert SECRET not in str(event) and "user:" not in error["message"], error


async def assert_goes_on(peer: ClientPeer, server: RunningServer) -> None:
    """The session answers ping, is still connected, and the server is healthy."""
    tag = f"alive-{time.monotonic_ns()}"
    peer.send({"type": "ping", "event_id": tag})
    await peer.wait_for("pong", lambda e: e.get("ping_event_id") == tag, timeout=5)
    assert server.registry.get(peer.session_id).state == "connected"
    assert not [e for e in peer.events if e["type"] == "session.ended"]
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/health") as resp:
        assert resp.status == 200


async def ask_agent(peer: ClientPeer, timeout: float) -> tuple[dict[str, Any], float]:
    """A text turn and ``response.create``: the ``error`` event and how long it took."""
    after = len(peer.events)
    started = time.monotonic()
    peer.send(USER_MESSAGE)
    peer.send({"type": "response.create"})
    error = await peer.wait_for("error", timeout=timeout, after=after)
    took = time.monotonic() - started
    done = await peer.wait_for("response.done", timeout=timeout, after=after)
    assert done["response"]["status"] == "failed", done
    return error, took


# --- LLM (agent app) -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["dead", "hanging"])
async def test_llm_fault_gives_an_error_event_and_the_session_goes_on(start, hanging, fault):
    port = free_port() if fault == "dead" else await hanging.start()
    started = await start(llm_engine="openai", llm_url=secret_url(port), llm_model="stub-model")
    async with ClientPeer(started.server.url, "agent", config={"barge_in": False}) as peer:
        await peer.wait_for("session.created", timeout=10)
        assert SECRET not in str(peer.events)
        for _ in range(2):  # the second turn fails the same way: nothing is left stuck
            error, took = await ask_agent(peer, timeout=4 * TIMEOUT_S + 10)
            assert_safe_engine_error(error, ("llm_",))
            assert error["error"]["code"] == ("llm_unreachable" if fault == "dead" else "llm_timeout"), error
            assert took < 3 * TIMEOUT_S + 5, took
        await assert_goes_on(peer, started.server)
    if fault == "hanging":
        assert hanging.connections >= 2


# --- ASR (captions app) ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["dead", "hanging"])
async def test_asr_fault_gives_an_error_event_and_the_session_goes_on(start, hanging, fault):
    port = free_port() if fault == "dead" else await hanging.start()
    started = await start(asr_engine="openai", asr_url=secret_url(port))
    clip, spans = speech_clip(["Please remember to bring your umbrella tomorrow morning."], sample_rate=48000)
    track = PcmSourceTrack(clip, 48000, tail="silence")
    async with ClientPeer(started.server.url, "captions", config={"language": "en", "vision": False},
                          audio=track, receive_audio=False) as peer:
        created = await peer.wait_for("session.created", timeout=10)
        assert SECRET not in str(created)
        speech_starts = time.monotonic() + spans[0][0]
        error = await peer.wait_for("error", timeout=len(clip) / 48000 + 3 * TIMEOUT_S + 10)
        assert_safe_engine_error(error, ("engine_",))
        assert error["error"]["code"] == ("engine_unreachable" if fault == "dead" else "engine_timeout"), error
        assert time.monotonic() - speech_starts < spans[0][1] - spans[0][0] + 3 * TIMEOUT_S + 5
        await assert_goes_on(peer, started.server)
    if fault == "hanging":
        assert hanging.connections >= 1


# --- TTS (agent app, its LLM a working stub) -------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["dead", "hanging"])
async def test_tts_fault_gives_an_error_event_and_the_session_goes_on(start, hanging, stub, fault):
    port = free_port() if fault == "dead" else await hanging.start()
    started = await start(llm_engine="openai", llm_url=stub.url, llm_model="stub-model",
                          tts_engine="openai", tts_url=secret_url(port))
    async with ClientPeer(started.server.url, "agent", config={"barge_in": False}) as peer:
        await peer.wait_for("session.created", timeout=10)
        after = len(peer.events)
        began = time.monotonic()
        peer.send(USER_MESSAGE)
        peer.send({"type": "response.create"})
        error = await peer.wait_for("error", timeout=4 * TIMEOUT_S + 10, after=after)
        assert time.monotonic() - began < 3 * TIMEOUT_S + 5
        assert_safe_engine_error(error, ("engine_", "tts_"))
        assert error["error"]["code"] == ("tts_unreachable" if fault == "dead" else "engine_timeout"), error
        await peer.wait_for("response.done", timeout=4 * TIMEOUT_S + 10, after=after)
        assert SECRET not in str(peer.events)
        await assert_goes_on(peer, started.server)


# --- a stopped server ------------------------------------------------------------------------------------------

async def test_a_stopped_server_says_server_shutdown_before_the_channel_closes(start):
    started = await start(shutdown_timeout_s=3.0)
    async with ClientPeer(started.server.url, "echo") as peer:
        await peer.wait_for("session.created", timeout=10)
        seen_at_close: list[int] = []
        peer.channel.on("close", lambda: seen_at_close.append(len(peer.events)))
        began = time.monotonic()
        await started.runner.cleanup()
        took = time.monotonic() - began
        assert took < 3.0 + 1.0, took
        ended = await peer.wait_for("session.ended", timeout=5)
        assert ended["reason"] == "server_shutdown" and ended["message"], ended
        for _ in range(100):  # the channel's close follows
            if seen_at_close:
                break
            await asyncio.sleep(0.05)
        index = peer.events.index(ended)
        assert peer.events[-1] is ended
        assert seen_at_close and seen_at_close[0] > index, (seen_at_close, index)
        assert not started.server.registry.active
        await peer.close(delete=False)


async def test_shutdown_is_bounded_while_engine_calls_hang(start, hanging):
    """Engines that never answer (and long engine timeouts) do not hold the shutdown past its deadline."""
    port = await hanging.start()
    started = await start(engine_timeout_s=60.0, shutdown_timeout_s=2.0, llm_engine="openai",
                          llm_url=secret_url(port), llm_model="stub-model")
    async with ClientPeer(started.server.url, "agent", config={"barge_in": False}) as peer:
        await peer.wait_for("session.created", timeout=10)
        peer.send(USER_MESSAGE)
        peer.send({"type": "response.create"})
        await peer.wait_for("response.created", timeout=10)
        began = time.monotonic()
        await started.runner.cleanup()
        took = time.monotonic() - began
        ended = await peer.wait_for("session.ended", timeout=5)
        assert ended["reason"] == "server_shutdown"
        assert took < 2.0 + 1.5, took
        await peer.close(delete=False)
