"""``POST /v1/translate/stream``: translate an uploaded recording with the interpretation policy, streaming NDJSON.

The request is ``multipart/form-data`` with a ``file`` part (any audio format ffmpeg decodes: WAV, MP3, OGG/Opus,
FLAC, M4A, WebM...) and text fields ``source_language`` / ``target_language``, or ``direction=es-en`` as a
shorthand (also ``chunk_ms`` and ``source_text``; the same keys and rules as the WebRTC session ``config``, see
:mod:`rtc_agent.apps.interpret.config`). The fields may also be given as query parameters.

The response is ``application/x-ndjson``: one JSON event per line, written as each chunk is processed (as fast as
the engines go, not in real time): a ``translation.chunk`` per chunk (EMIT/WAIT/SKIP), ``translation.flush`` and
``translation.reset`` where the policy makes them, ``error`` events for failed model calls, and a final
``metrics`` event with the run's numbers. Each event's ``session_ms`` is the position in the audio processed so
far. Example::

    curl -N -F file=@speech_es.wav -F direction=es-en http://localhost:8080/v1/translate/stream

Errors before the stream starts are JSON ``{"error": {...}}``: 400 (missing file, bad field, empty audio),
413 (upload over ``st_max_upload_bytes`` or audio over :data:`MAX_AUDIO_S`), 415 (not multipart, or a file that is
not decodable audio), 503 with ``Retry-After`` when ``max_sessions`` translations are already running.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import time
from typing import Any

import numpy as np
from aiohttp import BodyPartReader, web

from rtc_agent.apps.interpret import build_pipeline, resolve_config
from rtc_agent.errors import AgentError, AtCapacity, InvalidRequest, PayloadTooLarge, UnsupportedMediaType
from rtc_agent.protocol import EventIds, ServerEvent, encode, error_event
from rtc_agent.protocol.events import MetricsEvent
from rtc_agent.server.keys import SETTINGS, WORKER

log = logging.getLogger(__name__)

__all__ = ["MAX_AUDIO_S", "add_routes", "decode_audio", "translate_stream"]

SAMPLE_RATE = 16000
MAX_AUDIO_S = 3 * 3600  # decoded audio longer than this is refused (413)
MAX_FIELD_BYTES = 1024
FIELDS = ("source_language", "target_language", "direction", "chunk_ms", "source_text")


class _Streams:
    """How many translations this server is running (bounded by ``max_sessions``)."""

    def __init__(self) -> None:
        self.active = 0


STREAMS = web.AppKey("translate_streams", _Streams)


def decode_audio(data: bytes, max_seconds: float = MAX_AUDIO_S) -> np.ndarray:
    """Decode any audio file ffmpeg reads into 16 kHz mono float32. Blocking (run it in a thread).

    Raises ``UnsupportedMediaType`` (code ``unsupported_audio``) when it is not decodable audio and
    ``PayloadTooLarge`` (code ``audio_too_long``) past ``max_seconds``.
    """
    import av

    limit = int(max_seconds * SAMPLE_RATE)
    parts: list[np.ndarray] = []
    total = 0
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise UnsupportedMediaType("the uploaded file has no audio stream", code="unsupported_audio")
            resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
            for frame in container.decode(audio=0):
                for out in resampler.resample(frame):
                    pcm = out.to_ndarray().reshape(-1)
                    parts.append(pcm)
                    total += pcm.size
                if total > limit:
                    raise PayloadTooLarge(f"the audio is longer than {max_seconds:.0f} s", code="audio_too_long")
            parts.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(None))
    except AgentError:
        raise
    except Exception as exc:  # av.error.* (InvalidDataError, ...) and decoder failures
        raise UnsupportedMediaType(f"the uploaded file could not be decoded as audio: {exc}",
                                   code="unsupported_audio") from None
    if not parts:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate(parts).astype(np.float32) / 32768.0


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


async def _read_form(request: web.Request, limit: int) -> tuple[bytes, dict[str, Any]]:
    """The ``file`` bytes and the text fields of the multipart body (bounded)."""
    if request.content_length is not None and request.content_length > limit + 64 * 1024:
        raise PayloadTooLarge(f"the upload of {request.content_length} bytes exceeds the limit of {limit} bytes")
    try:
        reader = await request.multipart()
    except (ValueError, AssertionError) as exc:
        raise InvalidRequest(f"malformed multipart body: {exc}", code="invalid_multipart") from None
    data: bytes | None = None
    fields: dict[str, Any] = {}
    while True:
        try:
            part = await reader.next()
        except ValueError as exc:
            raise InvalidRequest(f"malformed multipart body: {exc}", code="invalid_multipart") from None
        if part is None:
            break
        if not isinstance(part, BodyPartReader):
            raise InvalidRequest("nested multipart bodies are not supported", code="invalid_multipart")
        name = part.name or ""
        if name == "file":
            if data is not None:
                raise InvalidRequest("send exactly one 'file' part", code="invalid_multipart")
            buf = bytearray()
            while chunk := await part.read_chunk(256 * 1024):
                buf += chunk
                if len(buf) > limit:
                    raise PayloadTooLarge(f"the uploaded file exceeds the limit of {limit} bytes")
            data = bytes(buf)
        elif name in FIELDS:
            raw = bytearray()
            while chunk := await part.read_chunk(MAX_FIELD_BYTES):
                raw += chunk
                if len(raw) > MAX_FIELD_BYTES:
                    raise InvalidRequest(f"field {name!r} is too long", code="invalid_config")
            try:
                fields[name] = _coerce(name, raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise InvalidRequest(f"field {name!r} is not UTF-8 text", code="invalid_config") from None
        else:
            raise InvalidRequest(f"unknown form field {name!r}; send 'file' and any of {', '.join(FIELDS)}",
                                 code="invalid_config")
    for name in FIELDS:
        if name not in fields and name in request.query:
            fields[name] = _coerce(name, request.query[name])
    if data is None:
        raise InvalidRequest("the form has no 'file' part with the audio", code="missing_file")
    return data, fields


async def translate_stream(request: web.Request) -> web.StreamResponse:
    """``POST /v1/translate/stream`` (see the module docstring)."""
    settings = request.app[SETTINGS]
    if request.content_type != "multipart/form-data":
        raise UnsupportedMediaType(
            f"POST /v1/translate/stream takes multipart/form-data (a 'file' part and language fields), not "
            f"{request.content_type or 'no content type'}")
    streams = request.app[STREAMS]
    if streams.active >= settings.max_sessions:
        raise AtCapacity(f"{streams.active} translations are running (max_sessions); retry shortly",
                         code="at_capacity", retry_after=5)
    streams.active += 1
    try:
        return await _run(request)
    finally:
        streams.active -= 1


async def _run(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    limit = int(getattr(settings, "st_max_upload_bytes", 64 * 1024 * 1024))
    data, fields = await _read_form(request, limit)
    config = resolve_config(fields, settings)
    config["speak"] = False
    audio = await asyncio.get_running_loop().run_in_executor(None, decode_audio, data)
    del data
    if len(audio) < SAMPLE_RATE // 10:
        raise InvalidRequest("the uploaded audio is empty (less than 0.1 s)", code="empty_audio")

    ids = EventIds()
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    position = {"ms": 0}

    def emit(event: ServerEvent) -> None:
        audio_end = getattr(event, "audio_end_ms", None)
        if isinstance(audio_end, int):
            position["ms"] = max(position["ms"], audio_end)
        wire = encode(event, event_id=ids.next(), session_ms=position["ms"])
        lines.put_nowait(json.dumps(wire, separators=(",", ":"), ensure_ascii=False) + "\n")

    pipeline = build_pipeline(settings, request.app[WORKER], config, emit)
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson; charset=utf-8",
                                           "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    await response.prepare(request)
    started = time.monotonic()

    async def produce() -> None:
        try:
            await pipeline.translate_audio(audio)
        except AgentError as exc:
            emit(error_event(exc))
        except Exception as exc:  # report, then end the stream cleanly
            log.exception("translate stream failed")
            emit(error_event(AgentError(f"internal error: {exc}")))
        finally:
            stats = pipeline.policy.stats()
            emit(MetricsEvent(translation={**stats, "audio_ms": len(audio) * 1000 // SAMPLE_RATE,
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
