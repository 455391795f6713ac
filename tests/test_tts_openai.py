"""The OpenAI-compatible TTS engine against an in-process ``/v1/audio/speech`` server that speaks with real Piper."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from rtc_agent.config import Settings, SettingsError
from rtc_agent.engines.tts import (
    OpenAITTSEngine,
    SpeechSynthesizer,
    Synthesis,
    SynthesisRequest,
    decode_wav,
    encode_wav,
    engine_spec,
)
from rtc_agent.engines.tts.openai import speech_url
from rtc_agent.errors import EngineError
from rtc_agent.worker import Worker
from tests.conftest import free_port
from tests.speech import resample, speech_extent, synthesize_native

API_KEY = "sk-test-123"


STATE = web.AppKey("state", "ServerState")


@dataclass
class ServerState:
    """What the fake server does and what it saw."""

    api_key: str | None = None
    status: int | None = None  # answer every request with this error status
    json_instead_of_audio: bool = False
    stream_wav: bool = False  # chunked WAV with unknown sizes, as streaming servers send
    hang: bool = False  # wait for ``release`` before answering
    close_after_next: bool = False  # close the connection after the next response, without saying so
    release: asyncio.Event = field(default_factory=asyncio.Event)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    peers: list[Any] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None}}


async def speech_handler(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    state.peers.append(request.transport.get_extra_info("peername") if request.transport else None)
    state.headers.append(dict(request.headers))
    if state.api_key is not None and request.headers.get("Authorization") != f"Bearer {state.api_key}":
        return web.json_response(error_body("Incorrect API key provided", "authentication_error"), status=401)
    body = await request.json()
    state.bodies.append(body)
    if state.hang:
        await asyncio.wait_for(state.release.wait(), 10)
    if state.status == 503:
        return web.json_response(error_body("Server is overloaded"), status=503, headers={"Retry-After": "2"})
    if state.status is not None:
        return web.json_response(error_body(f"failure {state.status}"), status=state.status)
    if body.get("model") not in ("tts-1", "piper"):
        return web.json_response(error_body(f"The model '{body.get('model')}' does not exist"), status=404)
    if body.get("voice") not in ("alloy", "joe"):
        return web.json_response({"detail": f"Voice '{body.get('voice')}' not found"}, status=400)
    if state.json_instead_of_audio:
        return web.json_response({"audio": "nope"})
    # real Piper speech (tests/speech.py: synthesized once, then cached on disk)
    pcm, rate = await asyncio.to_thread(synthesize_native, body["input"], speed=body.get("speed", 1.0))
    fmt = body.get("response_format", "mp3")
    if fmt == "pcm":
        payload = resample(pcm, rate, 24000).astype("<i2").tobytes()
        response = web.Response(body=payload, content_type="audio/pcm")
    elif fmt == "wav" and state.stream_wav:
        wav = encode_wav(pcm, rate)
        header = bytearray(wav[:44])
        header[4:8] = struct.pack("<I", 0xFFFFFFFF)
        header[40:44] = struct.pack("<I", 0xFFFFFFFF)
        response = web.StreamResponse(headers={"Content-Type": "audio/wav"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(bytes(header))
        for i in range(44, len(wav), 4001):  # odd-sized pieces: a sample split across chunks
            await response.write(wav[i:i + 4001])
        await response.write_eof()
    elif fmt == "wav":
        response = web.Response(body=encode_wav(pcm, rate), content_type="audio/wav")
    else:
        return web.json_response(error_body(f"format {fmt} not supported here"), status=400)
    if state.close_after_next:
        state.close_after_next = False
        if not response.prepared:
            await response.prepare(request)
            await response.write_eof()
        assert request.transport is not None
        request.transport.close()
    return response


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, ServerState]]:
    state = ServerState()
    app = web.Application()
    app[STATE] = state
    app.router.add_post("/v1/audio/speech", speech_handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}/v1", state
    state.release.set()
    await runner.cleanup()


@pytest.fixture
def thread() -> Iterator[ThreadPoolExecutor]:
    """One engine thread, as the worker gives an engine with concurrency 1 (keeps its keep-alive connection)."""
    pool = ThreadPoolExecutor(1)
    yield pool
    pool.shutdown(wait=True)


async def run(pool: ThreadPoolExecutor, engine: OpenAITTSEngine, request: SynthesisRequest) -> Synthesis:
    [result] = await asyncio.get_running_loop().run_in_executor(pool, engine.run_batch, [request])
    if isinstance(result, Exception):
        raise result
    return result


def audible(result: Synthesis) -> None:
    x = result.float32()
    assert np.sqrt(np.mean(x**2)) > 0.05
    start, end = speech_extent(result.pcm, result.sample_rate)
    assert (end - start) / result.pcm.size > 0.5


SENTENCE = "The quick brown fox jumps over the lazy dog."


async def test_wav_and_pcm_responses(server: tuple[str, ServerState], thread: ThreadPoolExecutor) -> None:
    url, state = server
    wav_engine = OpenAITTSEngine(url, model="tts-1", voice="joe", response_format="wav")
    result = await run(thread, wav_engine, SynthesisRequest(SENTENCE))
    assert result.sample_rate == 22050 and wav_engine.sample_rate == 22050
    assert 1.8 < result.duration_s < 4.5 and result.text == SENTENCE and result.voice == "joe"
    audible(result)
    assert state.bodies[-1] == {"model": "tts-1", "input": SENTENCE, "voice": "joe", "response_format": "wav"}
    assert state.headers[-1]["Content-Type"] == "application/json"
    assert "Authorization" not in state.headers[-1]

    pcm_engine = OpenAITTSEngine(url, model="tts-1", voice="joe", response_format="pcm", pcm_sample_rate=24000)
    raw = await run(thread, pcm_engine, SynthesisRequest(SENTENCE))
    assert raw.sample_rate == 24000 and 1.8 < raw.duration_s < 4.5
    audible(raw)
    assert state.bodies[-1]["response_format"] == "pcm"
    wav_engine.close()
    pcm_engine.close()


async def test_speed_and_voice_are_sent(server: tuple[str, ServerState], thread: ThreadPoolExecutor) -> None:
    url, state = server
    engine = OpenAITTSEngine(url, voice="alloy", speed=1.0)
    normal = await run(thread, engine, SynthesisRequest(SENTENCE))
    fast = await run(thread, engine, SynthesisRequest(SENTENCE, speed=2.0, voice="joe"))
    assert "speed" not in state.bodies[0] and state.bodies[0]["voice"] == "alloy"
    assert state.bodies[1]["speed"] == 2.0 and state.bodies[1]["voice"] == "joe"
    assert fast.speed == 2.0 and fast.duration_s < normal.duration_s * 0.75
    engine.close()


async def test_streamed_wav_with_unknown_sizes(server: tuple[str, ServerState], thread: ThreadPoolExecutor) -> None:
    url, state = server
    state.stream_wav = True
    engine = OpenAITTSEngine(url)
    result = await run(thread, engine, SynthesisRequest("Streaming servers send this."))
    assert result.sample_rate == 22050 and result.duration_s > 1.0
    audible(result)
    engine.close()


async def test_api_key(server: tuple[str, ServerState], thread: ThreadPoolExecutor) -> None:
    url, state = server
    state.api_key = API_KEY
    with pytest.raises(EngineError) as caught:
        await run(thread, OpenAITTSEngine(url), SynthesisRequest("Hello."))
    assert caught.value.code == "tts_unauthorized"
    assert "401" in caught.value.message and "Incorrect API key provided" in caught.value.message
    engine = OpenAITTSEngine(url, api_key=API_KEY)
    assert API_KEY not in repr(engine)
    assert (await run(thread, engine, SynthesisRequest("Hello."))).duration_s > 0.2
    assert state.headers[-1]["Authorization"] == f"Bearer {API_KEY}"
    engine.close()


@pytest.mark.parametrize(
    ("setup", "code", "words"),
    [
        ({"model": "no-such-model"}, "tts_not_found", "The model 'no-such-model' does not exist"),
        ({"voice": "nobody"}, "tts_bad_request", "Voice 'nobody' not found"),
        ({"status": 500}, "tts_server_error", "failure 500"),
        ({"status": 503}, "tts_busy", "Server is overloaded"),
        ({"json_instead_of_audio": True}, "tts_bad_audio", "application/json"),
    ],
)
async def test_http_errors_are_clear(server: tuple[str, ServerState], thread: ThreadPoolExecutor,
                                     setup: dict[str, Any], code: str, words: str) -> None:
    url, state = server
    options = {k: v for k, v in setup.items() if k in ("model", "voice")}
    for key in ("status", "json_instead_of_audio"):
        if key in setup:
            setattr(state, key, setup[key])
    engine = OpenAITTSEngine(url, **options)
    with pytest.raises(EngineError) as caught:
        await run(thread, engine, SynthesisRequest("Hello."))
    assert caught.value.code == code
    assert words in caught.value.message
    if code == "tts_busy":
        assert caught.value.status == 503 and caught.value.retry_after == 2.0
    # the connection stays usable after an error answer
    state.status = None
    state.json_instead_of_audio = False
    ok = OpenAITTSEngine(url)
    assert (await run(thread, ok, SynthesisRequest("Fine."))).duration_s > 0.2
    engine.close()
    ok.close()


async def test_timeout(server: tuple[str, ServerState], thread: ThreadPoolExecutor) -> None:
    url, state = server
    state.hang = True
    engine = OpenAITTSEngine(url, timeout_s=0.3)
    with pytest.raises(EngineError) as caught:
        await run(thread, engine, SynthesisRequest("Hello."))
    assert caught.value.code == "engine_timeout" and "0.3 s" in caught.value.message
    state.release.set()
    engine.close()


async def test_unreachable_server(thread: ThreadPoolExecutor) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    engine = OpenAITTSEngine(url)
    with pytest.raises(EngineError) as caught:
        await asyncio.get_running_loop().run_in_executor(thread, engine.load, lambda _m: None)
    assert caught.value.code == "tts_unreachable" and "--tts-url" in caught.value.message
    with pytest.raises(EngineError) as caught:
        await run(thread, engine, SynthesisRequest("Hello."))
    assert caught.value.code == "tts_unreachable"


async def test_load_checks_the_server(server: tuple[str, ServerState], thread: ThreadPoolExecutor) -> None:
    url, _ = server
    messages: list[str] = []
    engine = OpenAITTSEngine(url)
    await asyncio.get_running_loop().run_in_executor(thread, engine.load, messages.append)
    assert any("server reachable" in m for m in messages)  # GET answered 405: reachable


async def test_empty_text_never_reaches_the_server(server: tuple[str, ServerState],
                                                   thread: ThreadPoolExecutor) -> None:
    url, state = server
    engine = OpenAITTSEngine(url)
    results = await asyncio.get_running_loop().run_in_executor(
        thread, engine.run_batch, [SynthesisRequest(" "), SynthesisRequest("Hi there.")])
    assert isinstance(results[0], EngineError) and results[0].code == "empty_text"
    assert isinstance(results[1], Synthesis)
    assert [b["input"] for b in state.bodies] == ["Hi there."]
    engine.close()


async def test_keep_alive_and_stale_connection_retry(server: tuple[str, ServerState],
                                                     thread: ThreadPoolExecutor) -> None:
    url, state = server
    engine = OpenAITTSEngine(url)
    await run(thread, engine, SynthesisRequest("One."))
    await run(thread, engine, SynthesisRequest("Two."))
    assert state.peers[0] == state.peers[1]  # one keep-alive connection
    state.close_after_next = True
    await run(thread, engine, SynthesisRequest("Three."))  # the server drops the connection silently
    await run(thread, engine, SynthesisRequest("Four."))  # fails on the dead connection, retried on a new one
    assert state.peers[3] != state.peers[2]
    assert [b["input"] for b in state.bodies][-2:] == ["Three.", "Four."]
    engine.close()


async def test_through_the_worker_with_settings(server: tuple[str, ServerState]) -> None:
    url, state = server
    state.api_key = API_KEY
    settings = dataclasses.replace(Settings(), tts_engine="openai", tts_url=url, tts_model="piper", tts_voice="joe",
                                   tts_api_key=API_KEY, tts_response_format="pcm")
    spec = engine_spec(settings)
    assert spec.name == "tts" and spec.concurrency == 4 and spec.max_batch == 1
    worker = Worker()
    worker.add(spec)
    try:
        tts = SpeechSynthesizer(worker)
        clauses = [s async for s in tts.stream(["Hello there", ". How are", " you today?"])]
        assert [c.text for c in clauses] == ["Hello there.", "How are you today?"]
        assert all(c.sample_rate == 24000 and c.duration_s > 0.4 for c in clauses)
        # both clauses were in flight at once (concurrency 4), so the server may see them in either order
        assert sorted(state.bodies, key=lambda b: b["input"])[0] == {
            "model": "piper", "input": "Hello there.", "voice": "joe", "response_format": "pcm"}
        state.status = 500
        with pytest.raises(EngineError) as caught:
            await tts.synthesize("Hello.")
        assert caught.value.code == "tts_server_error"  # the engine's code survives the worker
    finally:
        await worker.close()


def test_engine_spec_and_url_errors() -> None:
    base = dataclasses.replace(Settings(), tts_engine="openai")
    with pytest.raises(SettingsError, match="needs tts_url"):
        engine_spec(base)
    with pytest.raises(SettingsError, match="http"):
        engine_spec(dataclasses.replace(base, tts_url="ftp://x"))
    with pytest.raises(SettingsError, match="response_format"):
        engine_spec(dataclasses.replace(base, tts_url="http://x", tts_response_format="mp3"))
    spec = engine_spec(dataclasses.replace(base, tts_url="http://x:1/v1", tts_concurrency=2))
    assert spec.concurrency == 2
    engine = spec.factory()
    assert isinstance(engine, OpenAITTSEngine) and engine.model == "tts-1" and engine.voice == "alloy"
    assert speech_url("http://h:8000") == "http://h:8000/v1/audio/speech"
    assert speech_url("http://h:8000/v1/") == "http://h:8000/v1/audio/speech"
    assert speech_url("https://h/api/v1/audio/speech") == "https://h/api/v1/audio/speech"


def test_decode_wav_formats() -> None:
    t = np.arange(2400) / 24000
    mono = np.sin(2 * np.pi * 440 * t) * 0.5
    pcm16, rate = decode_wav(encode_wav(mono, 24000))
    assert rate == 24000 and pcm16.dtype == np.int16 and pcm16.size == 2400

    def wav(tag: int, bits: int, channels: int, data: bytes, extensible: bool = False) -> bytes:
        block = channels * bits // 8
        if extensible:
            fmt = struct.pack("<HHIIHHHHI", 0xFFFE, channels, 24000, 24000 * block, block, bits, 22, bits, 0)
            fmt += struct.pack("<H", tag) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        else:
            fmt = struct.pack("<HHIIHH", tag, channels, 24000, 24000 * block, block, bits)
        chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"LIST\x04\x00\x00\x00abcd"
        chunks += b"data" + struct.pack("<I", len(data)) + data
        return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks

    f32 = wav(3, 32, 1, mono.astype("<f4").tobytes())
    stereo = wav(1, 16, 2, np.repeat(pcm16, 2).astype("<i2").tobytes())
    ints24 = np.round(mono * (1 << 23)).astype(np.int32)
    b24 = wav(1, 24, 1, np.stack([ints24 & 255, (ints24 >> 8) & 255, (ints24 >> 16) & 255], 1)
              .astype(np.uint8).tobytes(), extensible=True)
    for data in (f32, stereo, b24):
        decoded, rate = decode_wav(data)
        assert rate == 24000 and decoded.size == 2400
        assert np.max(np.abs(decoded.astype(int) - pcm16.astype(int))) <= 2
    for bad, words in ((b"nope", "not a WAV"), (wav(1, 16, 1, b"")[:36], "no data chunk"),
                       (wav(7, 8, 1, b"\x00" * 10), "not supported")):
        with pytest.raises(ValueError, match=words):
            decode_wav(bad)
