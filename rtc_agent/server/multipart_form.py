"""Reading ``multipart/form-data`` request bodies: a malformed body is a clear 4xx, never a crash.

aiohttp's multipart reader fails in many ways on a hostile body: ``ValueError`` (no boundary, a boundary over 70
characters, no starting boundary, a wrong boundary line, reading past the end), ``AssertionError``,
``RuntimeError`` (a ``_charset_`` part too long), ``BadHttpMessage`` / ``InvalidHeader`` / ``LineTooLong`` (part
headers), ``ContentLengthError`` (the connection closed early) and, for a body cut short, empty reads that look
like the end of a part. :class:`FormReader` is the one place that reads such bodies (``POST /v1/translate/stream``
through :mod:`rtc_agent.server.audio_upload`, ``POST /v1/realtime/calls``); it refuses, with
:class:`~rtc_agent.errors.InvalidRequest` 400 ``invalid_multipart`` and a message saying what is wrong:

- a content type without a boundary, an empty one, one over 70 characters or with characters RFC 2046 does not
  allow in a boundary (checked before any byte of the body is read);
- a body without its starting boundary (garbage), a malformed boundary line or part header, a body cut short
  (inside a part's headers or data, or before the closing boundary);
- a nested multipart part, a part without a ``name``, two parts with the same name, more than ``max_parts`` parts.

Limits (:class:`FormLimits`): the parts' data together is at most ``max_bytes``, the body at most that plus room
for boundaries and part headers (``PayloadTooLarge``, 413); the body must keep arriving (no pause of
``read_timeout_s`` without a new byte) and arrive whole within ``deadline_s`` of the start of the read, otherwise
408 ``upload_timeout`` (``request_timeout`` for forms the size of a JSON body, as
:func:`~rtc_agent.server.http_errors.read_body` answers): a client that sends headers and part of a body, then
nothing, holds nothing for long (answer it with :func:`answer_and_close`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import BodyPartReader, web
from aiohttp.helpers import parse_mimetype
from aiohttp.http_exceptions import HttpProcessingError

from rtc_agent.errors import AgentError, InvalidRequest, PayloadTooLarge
from rtc_agent.server.http_errors import error_response
from rtc_agent.server.keys import METRICS

__all__ = ["FORM_TYPE", "READ_CHUNK_BYTES", "FormLimits", "FormReader", "answer_and_close", "malformed"]

FORM_TYPE = "multipart/form-data"
MAX_BOUNDARY_CHARS = 70  # RFC 2046, section 5.1.1
BOUNDARY_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'()+_,-./:=? ")
READ_CHUNK_BYTES = 256 * 1024
BODY_SLACK_BYTES = 64 * 1024  # boundaries, part headers, preamble: what a body may hold beyond its parts' data
PART_SLACK_BYTES = 16 * 1024
SIZE_CHECK_S = 0.25
#: what aiohttp's reader raises on a malformed or cut-short body (the connection's own errors included)
READER_ERRORS = (ValueError, AssertionError, RuntimeError, HttpProcessingError, ConnectionError)

T = TypeVar("T")


def malformed(message: str) -> InvalidRequest:
    """The 400 for a body that is not well-formed ``multipart/form-data``."""
    return InvalidRequest(f"malformed multipart body: {message}", code="invalid_multipart")


def _timeout_error(limits: FormLimits, message: str) -> InvalidRequest:
    noun = "upload" if limits.timeout_code == "upload_timeout" else "request body"
    return InvalidRequest(f"the {noun} {message}", code=limits.timeout_code, status=408)


@dataclass(frozen=True)
class FormLimits:
    """How much and how slowly a client may send a form. ``max_bytes``: the parts' data together;
    ``max_field_bytes``: each text field (enforced by the caller, which names the field); ``read_timeout_s``:
    longest wait for more body; ``deadline_s``: the whole body, from the start of the read; ``max_parts``;
    ``timeout_code``: the 408's code (``upload_timeout`` for uploads, ``request_timeout`` for bodies)."""

    max_bytes: int = 32 * 1024 * 1024
    read_timeout_s: float = 20.0
    deadline_s: float = 120.0
    max_field_bytes: int = 1024
    max_parts: int = 16
    timeout_code: str = "upload_timeout"

    @classmethod
    def for_bodies(cls, settings: Any) -> FormLimits:
        """A form the size of a JSON or SDP body: ``max_body_bytes`` in all, each field too; read within
        ``request_read_timeout_s`` (no pause longer than ``upload_read_timeout_s`` either)."""
        default = cls()
        deadline = float(getattr(settings, "request_read_timeout_s", default.deadline_s))
        pause = float(getattr(settings, "upload_read_timeout_s", default.read_timeout_s))
        size = int(settings.max_body_bytes)
        return cls(max_bytes=size, read_timeout_s=min(pause, deadline), deadline_s=deadline, max_field_bytes=size,
                   timeout_code="request_timeout")

    @property
    def max_body_bytes(self) -> int:
        """The most the whole body may hold: the parts' data and room for boundaries, part headers, preamble."""
        return self.max_bytes + BODY_SLACK_BYTES + self.max_parts * PART_SLACK_BYTES


class _Clock:
    """Runs the awaits of one body under the read timeout (no new byte on the connection for that long: progress
    is checked four times per timeout), the overall deadline and the body's size (checked every
    :data:`SIZE_CHECK_S` too: aiohttp reads a preamble without end in one await)."""

    def __init__(self, limits: FormLimits, content: Any) -> None:
        self.loop = asyncio.get_running_loop()
        self.limits = limits
        self.content = content  # the request's StreamReader: ``total_bytes`` counts what arrived
        self.deadline = self.loop.time() + limits.deadline_s
        self.seen = self.received()
        self.progress_at = self.loop.time()

    def received(self) -> int:
        """Bytes of the body that arrived so far."""
        return int(getattr(self.content, "total_bytes", 0))

    async def within(self, awaitable: Awaitable[T]) -> T:
        task = asyncio.ensure_future(awaitable)
        try:
            while True:
                now = self.loop.time()
                if now >= self.deadline:
                    raise _timeout_error(self.limits, f"did not arrive within {self.limits.deadline_s:g} s")
                if now - self.progress_at >= self.limits.read_timeout_s:
                    raise _timeout_error(self.limits, f"stalled: no data for {self.limits.read_timeout_s:g} s")
                step = min(self.limits.read_timeout_s / 4, SIZE_CHECK_S, self.deadline - now,
                           self.progress_at + self.limits.read_timeout_s - now)
                done, _ = await asyncio.wait({task}, timeout=max(step, 0.001))
                result = task.result() if done else None  # a failed read raises here
                received = self.received()
                if received > self.limits.max_body_bytes:
                    raise PayloadTooLarge(f"the form exceeds the limit of {self.limits.max_body_bytes} bytes")
                if done:
                    return result  # type: ignore[return-value]
                if received != self.seen:
                    self.seen, self.progress_at = received, self.loop.time()
        finally:
            if not task.done():
                task.cancel()
                task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # consumed: a read that failed after it was abandoned is not worth a log line


def _check_content_type(request: web.Request) -> None:
    """The content type is ``multipart/form-data`` with a usable boundary (a 400 otherwise; the caller answers
    415 for other content types before calling)."""
    mime = parse_mimetype(request.headers.get("Content-Type", ""))
    if (mime.type, mime.subtype) != ("multipart", "form-data"):
        raise malformed(f"the content type is not {FORM_TYPE}")
    if "boundary" not in mime.parameters:
        raise malformed(f"the {FORM_TYPE} content type has no boundary parameter")
    boundary = mime.parameters["boundary"]
    if not boundary:
        raise malformed("the boundary is empty")
    if len(boundary) > MAX_BOUNDARY_CHARS:
        raise malformed(f"the boundary is {len(boundary)} characters long (at most {MAX_BOUNDARY_CHARS})")
    if not set(boundary) <= BOUNDARY_CHARS or boundary.endswith(" "):
        raise malformed("the boundary has characters a multipart boundary may not have (RFC 2046)")


class FormReader:
    """One ``multipart/form-data`` request body, read part by part under :class:`FormLimits` (see the module
    docstring). ``await FormReader.open(request, limits)``, then ``async for part in reader.parts()`` and, for
    each part, ``reader.chunks(part)`` (or :meth:`text`); every error is an :class:`AgentError` (400, 408, 413)."""

    def __init__(self, reader: Any, clock: _Clock, limits: FormLimits) -> None:
        self._reader = reader
        self._clock = clock
        self.limits = limits
        self.size = 0  # bytes of part data read so far
        self.names: list[str] = []  # the parts seen so far, in order
        self._current: BodyPartReader | None = None

    @classmethod
    async def open(cls, request: web.Request, limits: FormLimits) -> FormReader:
        """Check the content type (and a declared length) and start reading (nothing of the body is read yet)."""
        _check_content_type(request)
        clock = _Clock(limits, request.content)
        try:
            reader = await request.multipart()
        except READER_ERRORS as exc:
            raise malformed(str(exc)) from None
        if request.content_length is not None and request.content_length > limits.max_body_bytes:
            raise PayloadTooLarge(f"the form of {request.content_length} bytes exceeds the limit of "
                                  f"{limits.max_body_bytes} bytes")
        return cls(reader, clock, limits)

    async def _guarded(self, awaitable: Awaitable[T], where: str) -> T:
        try:
            return await self._clock.within(awaitable)
        except AgentError:
            raise
        except web.HTTPException:
            raise
        except READER_ERRORS as exc:
            raise malformed(f"{where}: {exc}" if str(exc) else where) from None

    async def parts(self) -> AsyncIterator[BodyPartReader]:
        """Each part in turn (named, never nested, names unique, at most ``max_parts``), to the closing
        boundary. A part left unread is read to its end (counted against ``max_bytes``) before the next."""
        while True:
            if self._current is not None and not self._current.at_eof():
                async for _ in self.chunks(self._current):
                    pass
            part = await self._guarded(self._reader.next(), "a boundary or part header is malformed")
            if part is None:
                return
            if not isinstance(part, BodyPartReader):
                raise InvalidRequest("nested multipart bodies are not supported", code="invalid_multipart")
            if len(self.names) >= self.limits.max_parts:
                raise malformed(f"the form has more than {self.limits.max_parts} parts")
            name = part.name
            if not name:
                raise malformed("a part has no name (Content-Disposition: form-data; name=...), or the body "
                                "ends inside its headers")
            if name in self.names:
                raise malformed(f"the form has two {name!r} parts")
            self.names.append(name)
            self._current = part
            yield part

    async def chunks(self, part: BodyPartReader, size: int = READ_CHUNK_BYTES) -> AsyncIterator[bytes]:
        """The part's data as it arrives (raw: no transfer decoding), counted against ``max_bytes``; a part the
        body ends inside of is ``invalid_multipart``."""
        while True:
            chunk = await self._guarded(part.read_chunk(size), f"the {part.name!r} part is malformed")
            if not chunk:
                if not part.at_eof():
                    raise malformed(f"the body ends inside the {part.name!r} part")
                return
            self.size += len(chunk)
            if self.size > self.limits.max_bytes:
                raise PayloadTooLarge(f"the form exceeds the limit of {self.limits.max_bytes} bytes")
            yield chunk

    async def text(self, part: BodyPartReader, limit: int, *, code: str = "invalid_multipart") -> str:
        """A text part of at most ``limit`` bytes, as UTF-8 (400 ``code`` when it is longer or not UTF-8)."""
        raw = bytearray()
        async for chunk in self.chunks(part, min(max(limit + 1, 256), READ_CHUNK_BYTES)):
            raw += chunk
            if len(raw) > limit:
                raise InvalidRequest(f"field {part.name!r} is too long (at most {limit} bytes)", code=code)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest(f"field {part.name!r} is not UTF-8 text", code=code) from None


async def answer_and_close(request: web.Request, exc: AgentError) -> web.StreamResponse:
    """Send the error for a stalled body and close the connection: waiting for the rest of it (aiohttp would for
    up to 10 s) is pointless."""
    request.app[METRICS].errors.labels(code=exc.code).inc()
    response = error_response(exc)
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()  # the reply is flushed before the socket closes
    return response
