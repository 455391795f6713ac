"""Helpers for the OpenAI Realtime tests: the official SDK against a real server, event collection, speech."""

from __future__ import annotations

import asyncio
import base64
import json
import typing
from collections.abc import Callable
from typing import Any

import numpy as np
from openai import AsyncOpenAI
from openai.types.realtime import RealtimeServerEvent
from websockets.exceptions import ConnectionClosed

from rtc_agent.engines.asr.base import TranscribeRequest
from rtc_agent.server.keys import WORKER
from tests.speech import synthesize

RATE = 24000


def client(server: Any, api_key: str = "sk-test-anything") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=server.url + "/v1", api_key=api_key, max_retries=0)


def _server_models() -> dict[str, Any]:
    union = typing.get_args(RealtimeServerEvent)[0]
    return {typing.get_args(cls.model_fields["type"].annotation)[0]: cls for cls in typing.get_args(union)}


SERVER_MODELS = _server_models()


def check_shape(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` validated against the official SDK's model of its type (required fields, types, literals);
    raises ``AssertionError`` for a type the GA API does not have and pydantic's error for a bad shape."""
    model = SERVER_MODELS.get(event.get("type"))
    assert model is not None, f"not a GA server event type: {event.get('type')!r}"
    model.model_validate(event)
    return event


class Events:
    """Every event of one connection, read in the background and checked against the SDK's models (see
    :func:`check_shape`); ``wait_for`` finds one (now or later)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.items: list[dict[str, Any]] = []
        self._new = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                self.items.append(check_shape(json.loads(await self.connection.recv_bytes())))
                self._new.set()
        except ConnectionClosed:
            self._new.set()

    async def wait_for(self, kind: str, where: Callable[[dict[str, Any]], bool] = lambda e: True, *,
                       timeout: float = 30.0, after: int = 0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            index = after
            while True:
                for event in self.items[index:]:
                    if event["type"] == kind and where(event):
                        return event
                index = len(self.items)
                self._new.clear()
                if self._task.done():
                    raise AssertionError(f"connection ended before {kind}: {self.types()}")
                await self._new.wait()

    def types(self) -> list[str]:
        return [e["type"] for e in self.items]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.items if e["type"] == kind]

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def pcm16(pcm: np.ndarray) -> str:
    return base64.b64encode(np.asarray(pcm, dtype="<i2").tobytes()).decode()


def spoken(*parts: str | float, rate: int = RATE) -> np.ndarray:
    """Speech (the packaged Piper voice) and silences (seconds) back to back, int16 at ``rate``."""
    chunks = [synthesize(p, rate) if isinstance(p, str) else np.zeros(int(p * rate), dtype=np.int16)
              for p in parts]
    return np.concatenate(chunks)


async def stream_audio(connection: Any, pcm: np.ndarray, *, chunk_ms: int = 40, rate: int = RATE,
                       realtime: bool = True) -> None:
    """Append ``pcm`` in ``chunk_ms`` pieces, paced at real time (one clock, no drift)."""
    step = rate * chunk_ms // 1000
    loop = asyncio.get_running_loop()
    start = loop.time()
    for n, i in enumerate(range(0, len(pcm), step)):
        await connection.input_audio_buffer.append(audio=pcm16(pcm[i:i + step]))
        if realtime:
            await asyncio.sleep(max(0.0, start + (n + 1) * chunk_ms / 1000 - loop.time()))


def audio_of(events: list[dict[str, Any]], response_id: str) -> np.ndarray:
    data = b"".join(base64.b64decode(e["delta"]) for e in events
                    if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id)
    return np.frombuffer(data, dtype="<i2")


async def transcribe(server: Any, pcm24k: np.ndarray) -> str:
    """What the server's own Whisper hears in 24 kHz PCM16 audio."""
    from tests.speech import resample

    audio = resample(pcm24k, RATE, 16000).astype(np.float32) / 32768.0
    result = await server.app[WORKER].call("asr", TranscribeRequest(audio, language="en"))
    return result.text


def words(text: str) -> set[str]:
    return {w.strip(".,!?;:'\"").lower() for w in text.split() if w.strip(".,!?;:'\"")}


def overlap(expected: str, heard: str) -> float:
    """Share of the expected words that were heard."""
    want = words(expected)
    return len(want & words(heard)) / max(1, len(want))
