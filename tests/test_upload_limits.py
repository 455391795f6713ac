"""``POST /v1/translate/stream`` under abuse (issue 11): stalled and slow uploads, long and lying audio files.

Findings reproduced here: four stalled uploads (headers and part of a body, then nothing) blocked the route for
good, and a small Opus file that decodes to hours was decoded whole into memory (+926 MB for 2 h). The server
here has a silent fake VAD (every chunk is a SKIP, no model call), so hours of audio translate in seconds.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from rtc_agent.config import Settings
from rtc_agent.engines.tts.base import encode_wav
from rtc_agent.errors import PayloadTooLarge
from rtc_agent.server.audio_upload import SAMPLE_RATE, SPOOL_MEMORY_BYTES, AudioDecoder, UploadLimits, read_upload
from rtc_agent.server.translate_stream import STREAMS
from rtc_agent.worker import EngineSpec, Worker
from tests.conftest import RunningServer, free_port
from tests.fakes import ScriptedTranslator, ScriptedVAD

URL = "/v1/translate/stream"


def silent_vad_worker(_settings: Settings) -> Worker:
    """A worker with only a VAD, and every window silence: the pipeline makes SKIP chunks only (no
    speech-translation call)."""
    worker = Worker()
    worker.add(EngineSpec(name="vad", factory=ScriptedVAD, max_queue=64))
    return worker


@pytest.fixture
def start(start_server: Callable[..., Any]) -> Callable[..., Any]:
    """``await start(**settings)``: a server whose worker has only the silent VAD."""

    async def run(**overrides: Any) -> RunningServer:
        return await start_server(make_worker=silent_vad_worker, **overrides)

    return run


def encode(codec: str, seconds: float, *, rate: int, bitrate: int, fmt: str,
           options: dict[str, str] | None = None) -> bytes:
    """``seconds`` of quiet noise encoded with ``codec`` in container ``fmt`` (PyAV)."""
    import av

    buf = io.BytesIO()
    noise = (np.random.default_rng(0).standard_normal(rate) * 300).astype(np.int16).reshape(1, -1)
    with av.open(buf, "w", format=fmt, options=options or {}) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        stream.bit_rate = bitrate
        if codec == "libopus":
            stream.codec_context.options = {"compression_level": "0"}
        for n in range(0, int(seconds * rate), rate):
            frame = av.AudioFrame.from_ndarray(noise, format="s16", layout="mono")
            frame.sample_rate, frame.pts = rate, n
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


def long_opus(seconds: float) -> bytes:
    """Low-bitrate Ogg/Opus: 30 minutes are under 1 MB."""
    return encode("libopus", seconds, rate=48000, bitrate=6000, fmt="ogg")


def lying_mp3(head_s: float, tail_s: float) -> bytes:
    """An MP3 whose first frames are 160 kbit/s and the rest 8 kbit/s, without a Xing header: the duration
    estimated from the first frames' bitrate (the header's say) is a fraction of the real one."""
    opts = {"write_xing": "0", "id3v2_version": "0"}
    return (encode("libmp3lame", head_s, rate=16000, bitrate=160000, fmt="mp3", options=opts)
            + encode("libmp3lame", tail_s, rate=16000, bitrate=8000, fmt="mp3", options=opts))


def form(data: bytes, filename: str = "speech.wav", **fields: str) -> aiohttp.FormData:
    out = aiohttp.FormData()
    out.add_field("file", data, filename=filename, content_type="application/octet-stream")
    for key, value in fields.items():
        out.add_field(key, value)
    return out


async def post_lines(url: str, data: aiohttp.FormData) -> tuple[int, list[dict[str, Any]]]:
    async with aiohttp.ClientSession() as http, http.post(url, data=data) as resp:
        if resp.content_type != "application/x-ndjson":
            return resp.status, [await resp.json()]
        return resp.status, [json.loads(line) async for line in resp.content if line.strip()]


async def stalled_upload(port: int, sent: bytes = b"RIFF" + bytes(2000)) -> asyncio.StreamReader:
    """A client that sends the headers and the start of a 100 kB multipart body, then nothing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    part = (b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
            b"Content-Type: audio/wav\r\n\r\n" + sent)
    writer.write(f"POST {URL} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: multipart/form-data; "
                 f"boundary=XyZ\r\nContent-Length: 100000\r\n\r\n".encode() + part)
    await writer.drain()
    reader.writer = writer  # type: ignore[attr-defined]  # keep it open
    return reader


async def read_status(reader: asyncio.StreamReader, timeout: float) -> tuple[int, dict[str, Any]]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    status = int(head.split()[1])
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(
        b"content-length")))
    body = await asyncio.wait_for(reader.readexactly(length), timeout)
    return status, json.loads(body)


def rss_bytes() -> int:
    """This process's resident memory (Linux ``/proc``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def silence_wav(seconds: float) -> bytes:
    return encode_wav(np.zeros(int(seconds * SAMPLE_RATE), dtype=np.int16), SAMPLE_RATE)


# --- reading the body -------------------------------------------------------------------------------------------


async def test_stalled_uploads_time_out_and_never_block_the_route(start):
    server = await start(max_sessions=2, upload_read_timeout_s=1.0, upload_deadline_s=30.0)
    port = int(server.url.rsplit(":", 1)[1])
    stalled = [await stalled_upload(port) for _ in range(4)]
    await asyncio.sleep(0.2)
    status, events = await post_lines(server.url + URL, form(silence_wav(2.0), direction="es-en"))
    assert status == 200, events  # the stalled uploads are not counted as running translations
    assert events[-1]["type"] == "metrics" and events[-1]["translation"]["audio_ms"] == 2000
    started = time.monotonic()
    for reader in stalled:
        status, body = await read_status(reader, timeout=5.0)
        assert status == 408 and body["error"]["code"] == "upload_timeout", body
        assert "no data for 1 s" in body["error"]["message"]
        assert await asyncio.wait_for(reader.read(), 2.0) == b""  # and the connection is closed, not kept
    assert time.monotonic() - started < 3.0
    assert server.app[STREAMS].active == 0


async def test_a_trickling_upload_hits_the_overall_deadline(start):
    server = await start(upload_read_timeout_s=1.0, upload_deadline_s=1.5)
    port = int(server.url.rsplit(":", 1)[1])
    reader = await stalled_upload(port, b"R")
    writer = reader.writer  # type: ignore[attr-defined]

    async def trickle() -> None:
        for _ in range(50):
            await asyncio.sleep(0.2)
            writer.write(b"I")
            await writer.drain()

    task = asyncio.create_task(trickle())
    started = time.monotonic()
    try:
        status, body = await read_status(reader, timeout=5.0)
    finally:
        task.cancel()
    assert status == 408 and body["error"]["code"] == "upload_timeout"
    assert "within 1.5 s" in body["error"]["message"]
    assert 1.2 < time.monotonic() - started < 3.0


async def test_size_cap_and_busy_server_answer_before_the_body(start):
    server = await start(st_max_upload_bytes=4096, max_sessions=1)
    status, (body,) = await post_lines(server.url + URL, form(b"x" * 10_000))
    assert status == 413 and body["error"]["code"] == "payload_too_large"
    server.app[STREAMS].active = 1  # one translation running: a new upload is refused at once
    port = int(server.url.rsplit(":", 1)[1])
    reader = await stalled_upload(port)
    status, body = await read_status(reader, timeout=2.0)
    assert status == 503 and body["error"]["code"] == "at_capacity"
    reader.writer.close()  # type: ignore[attr-defined]
    server.app[STREAMS].active = 0


async def test_large_uploads_are_spooled_to_a_temporary_file():
    async def handler(request: web.Request) -> web.Response:
        upload = await read_upload(request, UploadLimits(max_bytes=8 * 1024 * 1024), ("direction",))
        try:
            rolled = bool(getattr(upload.file, "_rolled", False))
            return web.json_response({"size": upload.size, "rolled": rolled, "fields": upload.fields,
                                      "head": upload.file.read(4).decode()})
        finally:
            upload.close()

    app = web.Application()
    app.router.add_post("/up", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        answers = []
        for size in (1000, SPOOL_MEMORY_BYTES + 1):
            async with aiohttp.ClientSession() as http, http.post(
                    f"http://127.0.0.1:{port}/up", data=form(b"RIFF" + bytes(size - 4), direction="es-en")) as resp:
                answers.append(await resp.json())
    finally:
        await runner.cleanup()
    assert [(a["size"], a["rolled"], a["head"]) for a in answers] == [
        (1000, False, "RIFF"), (SPOOL_MEMORY_BYTES + 1, True, "RIFF")]
    assert answers[0]["fields"] == {"direction": "es-en"}


# --- decoding ---------------------------------------------------------------------------------------------------


async def test_header_longer_than_the_cap_is_refused_before_decoding(start, monkeypatch):
    data = long_opus(1800)
    assert len(data) < 1024 * 1024
    reads: list[int] = []
    read_block = AudioDecoder.read_block
    monkeypatch.setattr(AudioDecoder, "read_block", lambda self: reads.append(1) or read_block(self))
    server = await start(st_max_upload_seconds=600.0)
    status, (body,) = await post_lines(server.url + URL, form(data, "long.ogg", direction="es-en"))
    assert status == 413 and body["error"]["code"] == "audio_too_long", body
    assert "1800 s" in body["error"]["message"] and "600 s" in body["error"]["message"]
    assert reads == []  # refused from the header: nothing was decoded
    assert server.app[STREAMS].active == 0


async def test_audio_past_the_cap_stops_decoding_with_an_error_event(start):
    data = lying_mp3(2.0, 120.0)
    decoder = AudioDecoder(io.BytesIO(data), 20.0)
    await asyncio.to_thread(decoder.open)
    assert decoder.header_seconds is not None and decoder.header_seconds < 20  # the header understates it
    decoder.close()
    server = await start(st_max_upload_seconds=20.0)
    status, events = await post_lines(server.url + URL, form(data, "lying.mp3", direction="es-en"))
    assert status == 200
    errors = [e for e in events if e["type"] == "error"]
    assert [e["error"]["code"] for e in errors] == ["audio_too_long"]
    chunks = [e for e in events if e["type"] == "translation.chunk"]
    assert chunks and chunks[-1]["audio_end_ms"] <= 20_000 + 800
    assert [c["index"] for c in chunks] == list(range(len(chunks)))
    metrics = events[-1]
    assert metrics["type"] == "metrics" and metrics["translation"]["audio_ms"] == 20_000


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
async def test_memory_stays_bounded_for_a_long_file(start):
    """30 minutes of Opus (0.9 MB) translated whole: before, decoding held all of it as PCM (~230 MB at the
    peak for 30 min); now the server's RSS grows by no more than a few blocks."""
    data = long_opus(1800)
    server = await start(st_max_upload_seconds=1800.0)
    base = rss_bytes()
    peak = base
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_bytes())
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    try:
        status, events = await post_lines(server.url + URL, form(data, "long.ogg", direction="es-en"))
    finally:
        done.set()
        await sampler
    assert status == 200
    metrics = events[-1]
    assert metrics["type"] == "metrics" and abs(metrics["translation"]["audio_ms"] - 1_800_000) < 1000
    assert not [e for e in events if e["type"] == "error"]
    print(f"RSS growth for 30 min of audio: {(peak - base) / 2**20:.1f} MB")
    assert peak - base < 60 * 1024 * 1024, f"RSS grew by {(peak - base) / 2**20:.0f} MB"


def test_decoder_blocks_and_cap_are_exact():
    data = silence_wav(25.0)
    decoder = AudioDecoder(io.BytesIO(data), 12.0, block_seconds=5.0)
    with pytest.raises(PayloadTooLarge) as info:
        decoder.open()  # the WAV header says 25 s
    assert info.value.code == "audio_too_long"
    decoder.close()
    decoder = AudioDecoder(io.BytesIO(data), 30.0, block_seconds=5.0)
    decoder.open()
    sizes = []
    while (block := decoder.read_block()) is not None:
        assert block.dtype == np.float32
        sizes.append(len(block))
    decoder.close()
    assert sizes == [5 * SAMPLE_RATE] * 5 and decoder.samples == 25 * SAMPLE_RATE
    decoder = AudioDecoder(io.BytesIO(lying_mp3(1.0, 30.0)), 12.0, block_seconds=5.0)
    decoder.open()  # the header says about 4 s
    sizes = []
    with pytest.raises(PayloadTooLarge) as info:
        while (block := decoder.read_block()) is not None:
            sizes.append(len(block))
    decoder.close()
    assert info.value.code == "audio_too_long"
    assert sizes == [5 * SAMPLE_RATE, 5 * SAMPLE_RATE, 2 * SAMPLE_RATE] and decoder.samples == 12 * SAMPLE_RATE


@pytest.mark.parametrize("sizes", [[7], [1, 25600, 3], [25599, 2, 40000, 511]])
async def test_block_by_block_translation_equals_the_whole_audio(sizes: list[int]):
    """``translate_blocks`` gives the same events as ``translate_audio`` whatever the block sizes."""
    from rtc_agent.apps.interpret import ChunkCutter, InterpretPipeline, PolicyConfig, SimulPolicy
    from tests.test_interpret_policy import counting_vad

    rng = np.random.default_rng(1)
    audio = np.where(np.sin(np.arange(SAMPLE_RATE * 7) / 4000) > 0, 0.1, 0.0).astype(np.float32)
    audio += rng.standard_normal(len(audio)).astype(np.float32) * 0.001
    cuts = np.cumsum(sizes * (len(audio) // sum(sizes) + 1))
    blocks = np.split(audio, cuts[cuts < len(audio)])

    async def run(whole: bool) -> list[Any]:
        worker = Worker()
        worker.add(EngineSpec(name="vad", factory=counting_vad, max_queue=8))
        events: list[Any] = []
        policy = SimulPolicy(PolicyConfig(), ScriptedTranslator([f"w{i}" for i in range(40)]), events.append)
        pipeline = InterpretPipeline(policy, worker, ChunkCutter())

        async def each() -> AsyncIterator[np.ndarray]:
            for block in blocks:
                yield block

        try:
            await (pipeline.translate_audio(audio) if whole else pipeline.translate_blocks(each()))
        finally:
            await worker.close()
        return [{k: v for k, v in e.model_dump().items() if k != "latency_ms"} for e in events]

    whole, blockwise = await run(True), await run(False)
    assert len(blocks) > 1 or sizes == [7]
    assert blockwise == whole and any(e["type"] == "translation.chunk" for e in whole)
