"""``POST /v1/translate/stream``: translate an uploaded recording with the interpretation policy, streaming NDJSON.

The request is ``multipart/form-data`` with a ``file`` part (any audio format ffmpeg decodes: WAV, MP3, OGG/Opus,
FLAC, M4A, WebM...) and text fields ``source_language`` / ``target_language``, or ``direction=es-en`` as a
shorthand (also ``chunk_ms``, ``source_text`` and ``language_prior``; the same keys and rules as the WebRTC
session ``config``, see :mod:`rtc_agent.apps.interpret.config`). The fields may also be given as query
parameters. Here ``source_text`` comes in ``translation.chunk.source_text`` (the embedded engine's second,
transcribe decode), not as ``caption.*`` events.

The response is ``application/x-ndjson``: one JSON event per line, written as each chunk is processed (as fast as
the engines go, not in real time): a ``translation.chunk`` per chunk (EMIT/WAIT/SKIP), ``translation.flush`` and
``translation.reset`` where the policy makes them, ``error`` events for failed model calls, and a final
``metrics`` event with the run's numbers. Each event's ``session_ms`` is the position in the audio processed so
far. Example::

    curl -N -F file=@speech_es.wav -F direction=es-en http://localhost:8080/v1/translate/stream

Errors before the stream starts are JSON ``{"error": {...}}``: 400 (missing file, bad field, empty audio, a
malformed multipart body: ``invalid_multipart``, see :mod:`rtc_agent.server.multipart_form`),
408 ``upload_timeout`` (the body stalled for ``upload_read_timeout_s`` or took over ``upload_deadline_s``), 413
(upload over ``st_max_upload_bytes``, or ``audio_too_long``: the file's header says it is longer than
``st_max_upload_seconds``), 415 (not multipart, or a file that is not decodable audio), 503 with ``Retry-After``
when ``max_sessions`` translations are already running (checked on arrival and again once the body is read: a
translation counts as running only from then on, so slow or stalled uploads never block the route).

The upload is spooled to a temporary file (see :mod:`rtc_agent.server.audio_upload`) and decoded block by block
while it is translated, so memory does not grow with the file's length. A file whose header understates its
length is translated up to ``st_max_upload_seconds``; then an ``error`` event (``audio_too_long``) is sent, the
translation of what came before is flushed and the stream ends with its ``metrics`` as usual. A decoding failure
part way through is likewise an ``error`` event (``unsupported_audio``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from aiohttp import web

from rtc_agent.apps.interpret import build_pipeline, resolve_config
from rtc_agent.errors import AgentError, AtCapacity, InvalidRequest, UnsupportedMediaType
from rtc_agent.protocol import EventIds, ServerEvent, encode, error_event
from rtc_agent.protocol.events import MetricsEvent
from rtc_agent.server.audio_upload import SAMPLE_RATE, AudioDecoder, Upload, UploadLimits, read_upload
from rtc_agent.server.keys import SETTINGS, WORKER
from rtc_agent.server.multipart_form import answer_and_close

log = logging.getLogger(__name__)

__all__ = ["MAX_AUDIO_S", "add_routes", "decode_audio", "translate_stream"]

MAX_AUDIO_S = 1800.0  # the default of ``st_max_upload_seconds``
MIN_AUDIO_SAMPLES = SAMPLE_RATE // 10  # less than 0.1 s is "empty"
FIELDS = ("source_language", "target_language", "direction", "chunk_ms", "source_text", "language_prior")


class _Streams:
    """How many translations this server is running (bounded by ``max_sessions``)."""

    def __init__(self) -> None:
        self.active = 0


STREAMS = web.AppKey("translate_streams", _Streams)


def decode_audio(data: bytes, max_seconds: float = MAX_AUDIO_S) -> np.ndarray:
    """Decode a whole audio file (bytes, any format ffmpeg reads) into 16 kHz mono float32. Blocking.

    For short clips (tests, tools): the route itself decodes block by block with :class:`AudioDecoder`. Raises
    ``UnsupportedMediaType`` (``unsupported_audio``) and ``PayloadTooLarge`` (``audio_too_long``) past
    ``max_seconds``.
    """
    decoder = AudioDecoder(io.BytesIO(data), max_seconds)
    try:
        decoder.open()
        parts = []
        while (block := decoder.read_block()) is not None:
            parts.append(block)
    finally:
        decoder.close()
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def _coerce(name: str, value: str) -> Any:
    if name == "chunk_ms":
        try:
            return int(value)
        except ValueError:
            raise InvalidRequest(f"chunk_ms must be 800 or 1600, got {value!r}", code="invalid_config") from None
    if name == "source_text":
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise InvalidRequest(f"source_text must be true or false, got {value!r}", code="invalid_config")
        return value.lower() in ("true", "1", "yes")
    return value.strip()


def _fields(request: web.Request, upload: Upload) -> dict[str, Any]:
    """The form's text fields (coerced), with query parameters for the ones the form lacks."""
    fields = {name: _coerce(name, value) for name, value in upload.fields.items()}
    for name in FIELDS:
        if name not in fields and name in request.query:
            fields[name] = _coerce(name, request.query[name])
    return fields


def _check_capacity(request: web.Request) -> None:
    streams = request.app[STREAMS]
    if streams.active >= request.app[SETTINGS].max_sessions:
        raise AtCapacity(f"{streams.active} translations are running (max_sessions); retry shortly",
                         code="at_capacity", retry_after=5)


async def translate_stream(request: web.Request) -> web.StreamResponse:
    """``POST /v1/translate/stream`` (see the module docstring)."""
    settings = request.app[SETTINGS]
    if request.content_type != "multipart/form-data":
        raise UnsupportedMediaType(
            f"POST /v1/translate/stream takes multipart/form-data (a 'file' part and language fields), not "
            f"{request.content_type or 'no content type'}")
    _check_capacity(request)  # early: a busy server says so before the client uploads
    try:
        upload = await read_upload(request, UploadLimits.from_settings(settings), FIELDS)
    except AgentError as exc:
        if exc.status != 408:
            raise
        return await answer_and_close(request, exc)
    try:
        config = resolve_config(_fields(request, upload), settings)
        config["speak"] = False
        _check_capacity(request)  # counted from here on: the body is read
        streams = request.app[STREAMS]
        streams.active += 1
        try:
            return await _run(request, upload, config)
        finally:
            streams.active -= 1
    finally:
        upload.close()


async def _run(request: web.Request, upload: Upload, config: dict[str, Any]) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    max_seconds = float(getattr(settings, "st_max_upload_seconds", MAX_AUDIO_S))
    decoder = AudioDecoder(upload.file, max_seconds)
    try:
        return await _translate(request, decoder, config)
    finally:
        await asyncio.to_thread(decoder.close)


async def _first_blocks(decoder: AudioDecoder) -> list[np.ndarray]:
    """Open the file and decode its first 0.1 s (errors here are HTTP errors, before the stream starts)."""
    await asyncio.to_thread(decoder.open)
    blocks: list[np.ndarray] = []
    while sum(len(b) for b in blocks) < MIN_AUDIO_SAMPLES:
        block = await asyncio.to_thread(decoder.read_block)
        if block is None:
            raise InvalidRequest("the uploaded audio is empty (less than 0.1 s)", code="empty_audio")
        blocks.append(block)
    return blocks


async def _translate(request: web.Request, decoder: AudioDecoder,
                     config: dict[str, Any]) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    first = await _first_blocks(decoder)

    ids = EventIds()
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    position = {"ms": 0}

    def emit(event: ServerEvent) -> None:
        audio_end = getattr(event, "audio_end_ms", None)
        if isinstance(audio_end, int):
            position["ms"] = max(position["ms"], audio_end)
        wire = encode(event, event_id=ids.next(), session_ms=position["ms"])
        lines.put_nowait(json.dumps(wire, separators=(",", ":"), ensure_ascii=False) + "\n")

    async def blocks() -> AsyncIterator[np.ndarray]:
        """The decoded audio; a decoding error part way is reported and ends the audio (then the end flush)."""
        for block in first:
            yield block
        first.clear()
        while True:
            try:
                block = await asyncio.to_thread(decoder.read_block)
            except AgentError as exc:
                emit(error_event(exc))
                return
            if block is None:
                return
            yield block

    pipeline = build_pipeline(settings, request.app[WORKER], config, emit)
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson; charset=utf-8",
                                           "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    await response.prepare(request)
    started = time.monotonic()

    async def produce() -> None:
        try:
            await pipeline.translate_blocks(blocks())
        except AgentError as exc:
            emit(error_event(exc))
        except Exception as exc:  # report, then end the stream cleanly
            log.exception("translate stream failed")
            emit(error_event(AgentError(f"internal error: {exc}")))
        finally:
            stats = pipeline.policy.stats()
            emit(MetricsEvent(translation={**stats, "audio_ms": decoder.samples * 1000 // SAMPLE_RATE,
                                           "wall_ms": round((time.monotonic() - started) * 1000),
                                           "config": config}))
            lines.put_nowait(None)
    task = asyncio.get_running_loop().create_task(produce(), name="translate-stream")
    try:
        while (line := await lines.get()) is not None:
            await response.write(line.encode())
    except BaseException as exc:  # the client went away (or the server is stopping): stop translating
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        if isinstance(exc, ConnectionResetError):
            log.info("translate stream: the client disconnected")
            return response
        raise
    await task
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


def add_routes(app: web.Application) -> None:
    app[STREAMS] = _Streams()
    app.router.add_post("/v1/translate/stream", translate_stream)
