"""Bounded audio uploads: a multipart body read with timeouts into a temporary file, and a streaming decoder.

Reading (:func:`read_upload`), on the event loop, with :class:`~rtc_agent.server.multipart_form.FormReader`
(malformed bodies are 400 ``invalid_multipart``; the body must keep arriving and arrive whole in time, else 408
``upload_timeout``; see that module):

- the file part is capped at ``max_bytes`` (:class:`PayloadTooLarge`, 413) and spooled to a temporary file once it
  passes :data:`SPOOL_MEMORY_BYTES` (memory is not the upload's size); the text fields at ``max_field_bytes``.

Decoding (:class:`AudioDecoder`), blocking (run each call in a thread): any format ffmpeg reads, to 16 kHz mono
float32, one block of at most ``block_seconds`` at a time, so memory is one block whatever the file's length.
A file whose container header gives a duration over ``max_seconds`` is refused before any decoding; a file whose
header says less (or nothing) stops as soon as the decoded audio passes ``max_seconds``: the audio up to the cap
is returned, then the next read raises :class:`PayloadTooLarge` (code ``audio_too_long``).
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
from aiohttp import web

from rtc_agent.errors import AgentError, InvalidRequest, PayloadTooLarge, UnsupportedMediaType
from rtc_agent.rtc.resampler import audio_resampler
from rtc_agent.server.multipart_form import READ_CHUNK_BYTES, FormLimits, FormReader

__all__ = ["SAMPLE_RATE", "SPOOL_MEMORY_BYTES", "AudioDecoder", "Upload", "UploadLimits", "read_upload"]

SAMPLE_RATE = 16000
SPOOL_MEMORY_BYTES = 1024 * 1024  # an upload larger than this is kept in a temporary file, not in memory
HEADER_SLACK_S = 1.0  # encoder padding: a header may say a little more than the audio really holds


class UploadLimits(FormLimits):
    """:class:`FormLimits` for an audio upload: ``max_bytes`` is the file part; ``max_field_bytes`` each text
    field; ``read_timeout_s`` the longest wait for more body; ``deadline_s`` the whole body."""

    @classmethod
    def from_settings(cls, settings: Any) -> UploadLimits:
        """The limits from the server settings (``st_max_upload_bytes``, ``upload_read_timeout_s``,
        ``upload_deadline_s``); missing settings keep the defaults."""
        default = cls()
        return cls(max_bytes=int(getattr(settings, "st_max_upload_bytes", default.max_bytes)),
                   read_timeout_s=float(getattr(settings, "upload_read_timeout_s", default.read_timeout_s)),
                   deadline_s=float(getattr(settings, "upload_deadline_s", default.deadline_s)))


@dataclass
class Upload:
    """A read upload: the file part in ``file`` (positioned at 0; a temporary file past
    :data:`SPOOL_MEMORY_BYTES`), its ``size`` in bytes and the text ``fields`` (raw strings). ``close`` deletes it."""

    file: IO[bytes]
    size: int
    fields: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        self.file.close()


async def read_upload(request: web.Request, limits: FormLimits, text_fields: tuple[str, ...],
                      file_field: str = "file") -> Upload:
    """Read a ``multipart/form-data`` body: exactly one ``file_field`` part and any of ``text_fields`` (each once).

    Raises :class:`InvalidRequest` (400: ``invalid_multipart``, ``missing_file``, ``invalid_config`` for an
    unknown, over-long or non-UTF-8 field; 408: ``upload_timeout``) or :class:`PayloadTooLarge` (413). The caller
    owns the returned :class:`Upload` and must ``close`` it.
    """
    if request.content_length is not None and request.content_length > limits.max_bytes + 64 * 1024:
        raise PayloadTooLarge(f"the upload of {request.content_length} bytes exceeds the limit of "
                              f"{limits.max_bytes} bytes")
    # the form may hold the file and every text field at their limits (plus nothing else)
    form = await FormReader.open(request, FormLimits(
        max_bytes=limits.max_bytes + len(text_fields) * limits.max_field_bytes,
        read_timeout_s=limits.read_timeout_s, deadline_s=limits.deadline_s,
        max_field_bytes=limits.max_field_bytes, max_parts=len(text_fields) + 1))
    spool: IO[bytes] | None = None
    size = 0
    fields: dict[str, str] = {}
    try:
        async for part in form.parts():
            name = part.name or ""
            if name == file_field:
                spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115 (the Upload owns it)
                async for chunk in form.chunks(part, READ_CHUNK_BYTES):
                    size += len(chunk)
                    if size > limits.max_bytes:
                        raise PayloadTooLarge(f"the uploaded file exceeds the limit of {limits.max_bytes} bytes")
                    spool.write(chunk)
            elif name in text_fields:
                fields[name] = await form.text(part, limits.max_field_bytes, code="invalid_config")
            else:
                raise InvalidRequest(f"unknown form field {name!r}; send {file_field!r} and any of "
                                     f"{', '.join(text_fields)}", code="invalid_config")
        if spool is None:
            raise InvalidRequest(f"the form has no {file_field!r} part with the audio", code="missing_file")
    except BaseException:
        if spool is not None:
            spool.close()
        raise
    spool.seek(0)
    return Upload(spool, size, fields)


class AudioDecoder:
    """Decode an uploaded audio file (any format ffmpeg reads) to 16 kHz mono float32, block by block.

    Every method blocks: call them from a thread, one at a time. ``open`` reads the container header (refusing a
    file with no audio stream: 415 ``unsupported_audio``; or whose header says it is longer than ``max_seconds``:
    413 ``audio_too_long``); ``read_block`` gives the next block (at most ``block_seconds``) or ``None`` at the end;
    ``close`` releases the container. ``samples`` counts what was returned so far.
    """

    def __init__(self, source: IO[bytes], max_seconds: float, *, block_seconds: float = 10.0) -> None:
        if max_seconds <= 0 or block_seconds <= 0:
            raise ValueError("max_seconds and block_seconds must be > 0")
        self.source = source
        self.max_seconds = max_seconds
        self.limit = int(max_seconds * SAMPLE_RATE)
        self.block_samples = max(1, int(block_seconds * SAMPLE_RATE))
        self.samples = 0
        self.header_seconds: float | None = None
        self._container: Any = None
        self._pcm: Iterator[np.ndarray] | None = None
        self._carry: np.ndarray | None = None
        self._over = False
        self._lock = threading.Lock()  # close() from another thread waits for a read in flight

    def _too_long(self) -> PayloadTooLarge:
        return PayloadTooLarge(f"the audio is longer than {self.max_seconds:g} s", code="audio_too_long")

    def open(self) -> None:
        import av

        try:
            self._container = av.open(self.source, mode="r")
        except Exception as exc:  # av.error.* (InvalidDataError, ...)
            raise UnsupportedMediaType(f"the uploaded file could not be decoded as audio: {exc}",
                                       code="unsupported_audio") from None
        if not self._container.streams.audio:
            raise UnsupportedMediaType("the uploaded file has no audio stream", code="unsupported_audio")
        self.header_seconds = self._header_duration()
        if self.header_seconds is not None and self.header_seconds > self.max_seconds + HEADER_SLACK_S:
            raise PayloadTooLarge(f"the audio is {self.header_seconds:.0f} s long (its header says); the limit is "
                                  f"{self.max_seconds:g} s", code="audio_too_long")
        self._pcm = self._decode()

    def _header_duration(self) -> float | None:
        stream = self._container.streams.audio[0]
        if stream.duration is not None and stream.time_base is not None:
            return float(stream.duration * stream.time_base)
        if self._container.duration is not None:
            return self._container.duration / 1_000_000  # AV_TIME_BASE
        return None

    def _decode(self) -> Iterator[np.ndarray]:

        resampler = audio_resampler(SAMPLE_RATE)
        for frame in self._container.decode(audio=0):
            for out in resampler.resample(frame):
                yield out.to_ndarray().reshape(-1)
        for out in resampler.resample(None):
            yield out.to_ndarray().reshape(-1)

    def _next_pcm(self) -> np.ndarray | None:
        assert self._pcm is not None
        try:
            return next(self._pcm, None)
        except AgentError:
            raise
        except Exception as exc:  # a decoder failure part way
            raise UnsupportedMediaType(f"the uploaded file could not be decoded as audio: {exc}",
                                       code="unsupported_audio") from None

    def read_block(self) -> np.ndarray | None:
        """The next block of audio (float32, at most ``block_seconds``), ``None`` at the end. Past the cap: the
        audio up to ``max_seconds`` first, then :class:`PayloadTooLarge` (``audio_too_long``)."""
        with self._lock:
            return self._read_block()

    def _read_block(self) -> np.ndarray | None:
        if self._pcm is None:
            raise RuntimeError("the decoder is not open (or closed)")
        if self._over:
            raise self._too_long()
        parts: list[np.ndarray] = []
        count = 0
        if self._carry is not None:
            parts.append(self._carry)
            count = len(self._carry)
            self._carry = None
        while count < self.block_samples:
            pcm = self._next_pcm()
            if pcm is None:
                break
            if pcm.size:
                parts.append(pcm)
                count += pcm.size
        if not parts:
            return None
        block = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(block) > self.block_samples:
            self._carry = block[self.block_samples:]
            block = block[:self.block_samples]
        room = self.limit - self.samples
        if len(block) > room:
            self._over = True
            if room <= 0:
                raise self._too_long()
            block = block[:room]
        self.samples += len(block)
        return block.astype(np.float32) / 32768.0

    def close(self) -> None:
        with self._lock:
            if self._pcm is not None:
                self._pcm.close()  # type: ignore[attr-defined]
                self._pcm = None
            if self._container is not None:
                self._container.close()
                self._container = None
            self._carry = None
