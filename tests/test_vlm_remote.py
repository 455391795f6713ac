"""Remote vision backends against small in-process services that speak the MOSS reference protocol
(``/v1/realtime``) and the SGLang-Omni protocol (``/v1/video/realtime``).

The services run on their own event loop in a thread (the session API is blocking, as the reference's is). Their
"model" answers a frame at 2.0 s with a sentence, any other frame with ``<|silence|>``, and a prompt with a round.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from aiohttp import WSMsgType, web
from PIL import Image

from rtc_agent.config import Settings, SettingsError
from rtc_agent.engines.vlm import ENGINE_NAME, SessionBusy, SessionOptions, engine_spec
from rtc_agent.engines.vlm.chat_format import ROUND_END, ROUND_START, SILENCE
from rtc_agent.engines.vlm.remote import RemoteVLMEngine
from rtc_agent.engines.vlm.remote_session import RemoteVisionSession
from rtc_agent.engines.vlm.remote_wire import RemoteSessionError, realtime_url
from tests.polling import collect, wait_until


class FakeServices:
    """Both services on one aiohttp app; records what clients sent."""

    def __init__(self) -> None:
        self.received: list[Any] = []  # JSON messages, and ("image", (w, h)) for binary frames
        self.active = 0
        self.capacity = 1
        self.fail_on_prompt = False
        self.disconnects = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/realtime", self.moss)
        app.router.add_get("/v1/video/realtime", self.sglang)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "model_loaded": True, "session_active": self.active > 0})

    @staticmethod
    def image_size(data: bytes) -> tuple[int, int]:
        with Image.open(io.BytesIO(data)) as img:
            return img.size

    # the MOSS reference service ---------------------------------------------------------------------------------

    async def moss(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        if self.active >= self.capacity:
            await ws.send_json({"type": "error", "message": "A realtime session is already active"})
            await ws.close(code=1013)
            return ws
        self.active += 1
        try:
            start = json.loads((await ws.receive()).data)
            self.received.append(start)
            assert start["type"] == "start"
            await ws.send_json({"type": "ready"})
            await ws.send_json({"type": "output", "text": SILENCE})
            pending: dict[str, Any] | None = None
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    data = json.loads(msg.data)
                    self.received.append(data)
                    if data["type"] == "frame":
                        pending = data
                    elif data["type"] == "prompt":
                        await ws.send_json({"type": "prompt_ack"})
                        if self.fail_on_prompt:
                            await ws.send_json({"type": "error", "message": "CUDA out of memory"})
                            break
                        await self.moss_answer(ws, data["text"])
                    elif data["type"] == "stop":
                        self.received.append("stopped")
                        await ws.send_json({"type": "stopping"})
                        break
                elif msg.type == WSMsgType.BINARY:
                    assert pending is not None, "binary frame without metadata"
                    self.received.append(("image", self.image_size(msg.data)))
                    meta, pending = pending, None
                    await ws.send_json({"type": "frame_ack", "dropped_oldest": False, "pending_frames": 0})
                    if meta.get("prompt"):
                        await self.moss_answer(ws, meta["prompt"])
                    elif meta["timestamp"] == 2.0:
                        for chunk in ("A cat", " appeared.", SILENCE):
                            await ws.send_json({"type": "output", "text": chunk})
                    else:
                        await ws.send_json({"type": "output", "text": SILENCE})
        finally:
            self.active -= 1
            self.disconnects += 1
        return ws

    @staticmethod
    async def moss_answer(ws: web.WebSocketResponse, prompt: str) -> None:
        for chunk in (ROUND_START, "<|response|>Yes,", " I see", "<|sil", "ence|>"):  # a split control token too
            await ws.send_json({"type": "output", "text": chunk})

    # SGLang-Omni ------------------------------------------------------------------------------------------------

    async def sglang(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        if self.active >= self.capacity:
            await ws.send_json({"type": "error", "code": "session_capacity_exceeded", "message": "full"})
            await ws.close(code=1013)
            return ws
        self.active += 1
        turn = 0
        expected_seq = 0
        try:
            await ws.send_json({"type": "session.created", "session_id": "s1", "request_id": "r1",
                                "configure_timeout_s": 180})
            configure = json.loads((await ws.receive()).data)
            self.received.append(configure)
            await ws.send_json({"type": "session.configured", "max_frame_bytes": 1 << 20})
            await ws.send_json({"type": "session.ready", "session_id": "s1", "turn_id": 0})
            pending: dict[str, Any] | None = None
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    data = json.loads(msg.data)
                    self.received.append(data)
                    if data["type"] in ("input.frame", "input.prompt"):
                        if data["seq_no"] != expected_seq:
                            await ws.send_json({"type": "error", "code": "invalid_request",
                                                "message": "seq_no must be dense", "seq_no": data["seq_no"]})
                            continue
                        expected_seq += 1
                    if data["type"] == "input.frame":
                        pending = data
                        await ws.send_json({"type": "input.frame.ready", "seq_no": data["seq_no"]})
                    elif data["type"] == "input.prompt":
                        seq = data["seq_no"]
                        await ws.send_json({"type": "input.prompt.accepted", "seq_no": seq})
                        await ws.send_json({"type": "response.turn.interrupted", "turn_id": turn,
                                            "next_turn_id": turn + 1, "seq_no": seq})
                        turn += 1
                        await ws.send_json({"type": "input.prompt.processed", "seq_no": seq, "turn_id": turn})
                        for piece in ("Yes,", " I see"):
                            await ws.send_json({"type": "response.text.delta", "delta": piece, "turn_id": turn})
                        await ws.send_json({"type": "response.turn.silence", "turn_id": turn, "seq_no": seq,
                                            "timestamp": None, "silence_seq": 1})
                    elif data["type"] == "session.abort":
                        self.received.append("aborted")
                        await ws.send_json({"type": "session.done", "finish_reason": "abort"})
                        break
                elif msg.type == WSMsgType.BINARY:
                    assert pending is not None, "binary frame before input.frame.ready"
                    self.received.append(("image", self.image_size(msg.data)))
                    meta, pending = pending, None
                    seq, ts = meta["seq_no"], meta["timestamp"]
                    await ws.send_json({"type": "input.frame.accepted", "seq_no": seq})
                    await ws.send_json({"type": "input.frame.processed", "seq_no": seq, "timestamp": ts,
                                        "final": False, "turn_id": turn})
                    if ts == 2.0:
                        await ws.send_json({"type": "response.text.delta", "delta": "A cat appeared.",
                                            "turn_id": turn})
                    await ws.send_json({"type": "response.turn.silence", "turn_id": turn, "seq_no": seq,
                                        "timestamp": ts, "silence_seq": 1})
        finally:
            self.active -= 1
            self.disconnects += 1
        return ws


@pytest.fixture
def service() -> Iterator[tuple[FakeServices, str]]:
    fake = FakeServices()
    loop = asyncio.new_event_loop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runner = web.AppRunner(fake.app())
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield fake, f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def frame() -> np.ndarray:
    return np.full((48, 64, 3), 90, np.uint8)






OPTIONS = SessionOptions(initial_prompt="Describe changes.", system_prompt="Be brief.", frame_queue_size=4,
                         max_tokens_per_turn=12, max_new_tokens=64)


@pytest.mark.parametrize("protocol", ["moss", "sglang"])
def test_frames_prompts_and_outputs(service: tuple[FakeServices, str], protocol: str) -> None:
    fake, base = service
    session = RemoteVisionSession(base, OPTIONS, protocol=protocol)  # type: ignore[arg-type]
    with session:
        assert session.active
        for ts in (0.0, 1.0, 2.0, 3.0):
            assert session.push_frame(frame(), ts) is False
        events = collect(session.poll_event, lambda o: sum(e.kind == "silence" for e in o) >= (5 if protocol == "moss"
                                                                                            else 4))
        text = [e for e in events if e.kind == "text"]
        assert "".join(e.text for e in text) == "A cat appeared."
        assert all(e.frame_ts == 2.0 for e in text)
        assert [e.kind for e in events].count("round_start") == 1 and not events[0].prompted

        session.push_prompt("Is it still there?")
        events = collect(session.poll_event, lambda o: any(e.kind == "round_end" and e.prompted for e in o))
        start = next(e for e in events if e.kind == "round_start")
        assert start.prompted and start.prompt == "Is it still there?"
        assert "".join(e.text for e in events if e.kind == "text") == "Yes, I see"
        assert events[-2].kind == "silence"  # the answer ends with silence, which ends the round
        with pytest.raises(ValueError) as info:
            session.push_frame(frame(), 1.0)
        assert str(info.value) == "Frame timestamps must be non-decreasing: 1.0 < 3.0"
    wait_until(lambda: fake.disconnects == 1)

    images = [m for m in fake.received if isinstance(m, tuple)]
    assert images == [("image", (64, 48))] * 4
    if protocol == "moss":
        start_msg = fake.received[0]
        assert start_msg == {"type": "start", "prompt": "Describe changes.", "system_prompt": "Be brief.",
                             "frame_queue_size": 4, "max_tokens_per_second": 12, "max_new_tokens": 64,
                             "do_sample": False}
        frames = [m for m in fake.received if isinstance(m, dict) and m["type"] == "frame"]
        assert [m["timestamp"] for m in frames] == [0.0, 1.0, 2.0, 3.0]
        assert {"type": "prompt", "text": "Is it still there?"} in fake.received
        assert "stopped" in fake.received
    else:
        configure = fake.received[0]
        assert configure == {"type": "session.configure", "prompt": "Describe changes.", "max_new_tokens": 64,
                             "max_tokens_per_turn": 12, "input_queue_capacity": 4, "system_prompt": "Be brief."}
        inputs = [m for m in fake.received if isinstance(m, dict) and m["type"].startswith("input.")]
        assert [m["seq_no"] for m in inputs] == [0, 1, 2, 3, 4]  # dense across frames and prompts
        assert inputs[0]["mime_type"] == "image/jpeg" and inputs[0]["final"] is False
        assert inputs[4] == {"type": "input.prompt", "seq_no": 4, "prompt": "Is it still there?", "final": False}
        assert "aborted" in fake.received


@pytest.mark.parametrize("protocol", ["moss", "sglang"])
def test_a_busy_service_raises_session_busy(service: tuple[FakeServices, str], protocol: str) -> None:
    fake, base = service
    fake.capacity = 0
    session = RemoteVisionSession(base, OPTIONS, protocol=protocol, connect_timeout=5)  # type: ignore[arg-type]
    with pytest.raises(SessionBusy, match="at capacity"):
        session.start()
    session.close()


def test_a_prompt_frame_opens_a_round_on_the_moss_service(service: tuple[FakeServices, str]) -> None:
    fake, base = service
    with RemoteVisionSession(base, OPTIONS, protocol="moss") as session:
        session.push_prompt_frame("What is this?", frame(), 5.0)
        out: list[str] = []
        deadline = time.monotonic() + 5
        while ROUND_END not in out:
            assert time.monotonic() < deadline, out
            item = session.poll_output(timeout=0.05)
            if item is not None:
                out.append(item)
        assert out[-5:] == [ROUND_START, "Yes,", " I see", SILENCE, ROUND_END]
    meta = next(m for m in fake.received if isinstance(m, dict) and m["type"] == "frame")
    assert meta == {"type": "frame", "timestamp": 5.0, "prompt": "What is this?"}


def test_a_service_error_fails_the_session_with_round_end(service: tuple[FakeServices, str]) -> None:
    fake, base = service
    fake.fail_on_prompt = True
    session = RemoteVisionSession(base, OPTIONS, protocol="moss")
    session.start()
    session.push_prompt("boom")
    with pytest.raises(RuntimeError, match="realtime generation failed") as info:
        collect(session.poll_event, lambda o: False)
    assert isinstance(info.value.__cause__, RemoteSessionError)
    assert "CUDA out of memory" in str(info.value.__cause__)
    with pytest.raises(RuntimeError):
        session.close()


def test_remote_engine_checks_health_and_holds_one_session(service: tuple[FakeServices, str]) -> None:
    _, base = service
    engine = RemoteVLMEngine(base, protocol="sglang")
    engine.load(lambda msg: None)
    assert engine.describe()["url"].endswith("/v1/video/realtime")
    session = engine.open_session(OPTIONS)
    with pytest.raises(SessionBusy):
        engine.open_session(OPTIONS)
    session.start()
    session.close()
    engine.open_session(OPTIONS).close()  # the slot was returned

    down = RemoteVLMEngine("http://127.0.0.1:9", protocol="moss")
    with pytest.raises(RemoteSessionError, match="not reachable"):
        down.load(lambda msg: None)


def test_urls_and_engine_selection() -> None:
    assert realtime_url("http://gpu:8000", "moss") == "ws://gpu:8000/v1/realtime"
    assert realtime_url("https://gpu/", "sglang") == "wss://gpu/v1/video/realtime"
    assert realtime_url("gpu:18500", "sglang") == "ws://gpu:18500/v1/video/realtime"
    assert realtime_url("ws://gpu:1/custom", "moss") == "ws://gpu:1/custom"
    with pytest.raises(ValueError):
        realtime_url("ftp://gpu", "moss")

    for kind, protocol in (("moss", "moss"), ("sglang", "sglang"), ("openai", "sglang")):
        spec = engine_spec(Settings(vlm_engine=kind, vlm_url="http://gpu:8000"))
        assert spec.name == ENGINE_NAME and spec.capacity == 1
        engine = spec.factory()
        assert isinstance(engine, RemoteVLMEngine) and engine.protocol == protocol
    assert engine_spec(Settings()).factory().describe()["backend"] == "scene"
    with pytest.raises(SettingsError, match="vlm_url"):
        engine_spec(Settings(vlm_engine="sglang"))
    with pytest.raises(SettingsError, match="vlm_model"):
        engine_spec(Settings(vlm_engine="transformers"))
    with pytest.raises(SettingsError, match="unknown vlm_engine"):
        engine_spec(Settings(vlm_engine="magic"))
