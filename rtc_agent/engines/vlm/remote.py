"""Remote realtime vision services as session backends: the MOSS reference service and SGLang-Omni.

Both run the realtime loop on the server; the client side here is a
:class:`~rtc_agent.apps.vision_session.VisionSessionBase` with the reference API, so apps cannot tell it from a
local session. Each session owns a private asyncio loop in one thread (the API is blocking, as the reference's
is) with one aiohttp WebSocket.

MOSS reference service (``run_online_inference.py --serve``, ``ws://HOST:8000/v1/realtime``), one session per
connection and per model process:

- client ``{"type": "start", "prompt", "system_prompt", "frame_queue_size", "max_tokens_per_second",
  "max_new_tokens", "do_sample"}`` → server ``{"type": "ready"}``;
- per frame ``{"type": "frame", "timestamp"[, "prompt"]}`` then the JPEG bytes → ``{"type": "frame_ack",
  "dropped_oldest", "pending_frames"}``; ``{"type": "prompt", "text"}`` → ``{"type": "prompt_ack"}``;
- ``{"type": "output", "text"}`` carries raw model chunks (text, ``<|silence|>``, ``<|round_start|>``, ...);
- ``{"type": "stop"}`` → ``{"type": "stopping"}``; ``session_end``; ``{"type": "error", "message"}`` (a busy
  service answers a second connection with an error and close code 1013).

SGLang-Omni (``/v1/video/realtime``): ``session.created`` → ``session.configure {prompt, system_prompt,
max_new_tokens, max_tokens_per_turn, input_queue_capacity}`` → ``session.configured``, ``session.ready``; frames
``input.frame {seq_no, timestamp, prompt, final, mime_type}``, then wait for ``input.frame.ready`` before the
binary image; prompts ``input.prompt {seq_no, prompt, final}`` (``seq_no`` dense from 0 across both); outputs
``response.text.delta {delta}``, ``response.turn.silence {timestamp}``; ``input.*.processed`` confirm that the
model has the input in context; ``response.done`` / ``session.done`` end; ``session.abort`` stops;
``error {code, message}`` (``session_capacity_exceeded`` when full; ``invalid_request`` rejects one event and the
session goes on).

Frames wait in a bounded local queue (oldest dropped, as the reference session does) while the service applies
backpressure (acknowledgements, ``input.frame.ready``); prompts are never dropped (at most 16 wait).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import numpy as np

from rtc_agent.apps.vision_session import (
    ChunkParser,
    SessionBusy,
    SessionOptions,
    VisionSession,
    VisionSessionBase,
)
from rtc_agent.engines.vlm import VLMEngine
from rtc_agent.redact import redact_text, redact_url, register_url_secrets

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_PATHS", "RemoteSessionError", "RemoteVLMEngine", "RemoteVisionSession", "realtime_url"]

Protocol = Literal["moss", "sglang"]
DEFAULT_PATHS: dict[str, str] = {"moss": "/v1/realtime", "sglang": "/v1/video/realtime"}
MAX_PROMPTS = 16


class RemoteSessionError(RuntimeError):
    """The remote service reported an error or the connection failed."""


def realtime_url(url: str, protocol: Protocol) -> str:
    """The WebSocket URL of a service given as ``host:port``, ``http(s)://...`` or ``ws(s)://...``; a URL without
    a path gets the protocol's default path."""
    if "://" not in url:
        url = "ws://" + url
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss"):
        raise ValueError(f"unsupported URL scheme in {redact_url(url)!r}: use ws, wss, http or https")
    path = parts.path if parts.path not in ("", "/") else DEFAULT_PATHS[protocol]
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def _safe(value: object) -> str:
    """``str(value)`` with URLs redacted and registered secrets masked (for messages that carry a server's words)."""
    return redact_text(str(value))


def health_url(url: str) -> str:
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, "/health", "", ""))


def encode_jpeg(image: Any, quality: int = 85) -> bytes:
    """JPEG bytes of an RGB array (``h, w, 3`` uint8) or a PIL image; bytes pass through unchanged."""
    if isinstance(image, bytes | bytearray):
        return bytes(image)
    from PIL import Image

    if not isinstance(image, Image.Image):
        arr = np.asarray(image)
        if arr.dtype != np.uint8:
            arr = np.clip(arr, 0, 255).astype(np.uint8)
        image = Image.fromarray(arr)
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


class RemoteVisionSession(VisionSessionBase):
    """A realtime session on a remote service (see the module docstring for both protocols).

    ``start()`` connects and performs the handshake (blocking, up to ``connect_timeout`` seconds); it raises
    :class:`~rtc_agent.apps.vision_session.SessionBusy` when the service is at capacity and
    :class:`RemoteSessionError` for other failures. Outputs arrive through ``poll_output`` / ``poll_event`` as
    for a local session; ``frame_ts`` is the newest frame the service confirmed.
    """

    def __init__(self, url: str, options: SessionOptions | None = None, *, protocol: Protocol = "moss",
                 model: str | None = None, connect_timeout: float = 30.0, ack_timeout: float = 30.0,
                 jpeg_quality: int = 85, on_close: Callable[[], None] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__()
        if protocol not in DEFAULT_PATHS:
            raise ValueError(f"unknown realtime protocol {protocol!r}: use moss or sglang")
        self.url = realtime_url(url, protocol)
        self.shown_url = redact_url(self.url)  # what messages, logs and stats show: no user-info, no query values
        register_url_secrets(self.url)
        self.options = options or SessionOptions()
        self.protocol: Protocol = protocol
        self.model = model
        self.connect_timeout = connect_timeout
        self.ack_timeout = ack_timeout
        self.jpeg_quality = jpeg_quality
        self.headers = headers or {}
        self._on_close = on_close
        self._lock = threading.Lock()
        self._inputs: collections.deque[tuple[str, Any, Any, float | None]] = collections.deque()
        self._frames_waiting = 0
        self._prompts_waiting = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._stop = threading.Event()
        self._parser = ChunkParser()
        self._prompt_fifo: collections.deque[str] = collections.deque()
        self._seq_prompts: dict[int, str] = {}
        self._unacked: collections.deque[float | None] = collections.deque()  # MOSS frames awaiting frame_ack
        self._seq = 0
        self._acks: dict[str, asyncio.Event] = {}
        self._frame_ready: asyncio.Event | None = None
        self._frame_ts: float | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None

    # state ------------------------------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self._ready.is_set() and not self._done.is_set()

    @property
    def pending_frames(self) -> int:
        with self._lock:
            return self._frames_waiting

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out.update(protocol=self.protocol, url=self.shown_url, pending_frames=self.pending_frames,
                   frame_ts=self._frame_ts)
        return out

    # API --------------------------------------------------------------------------------------------------------

    def start(self) -> RemoteVisionSession:
        """Connect and hand-shake; idempotent. Blocking."""
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError("Cannot start a closed realtime session")
            starting = self._thread is None
            if starting:
                self._started_at = self._clock()
                self._thread = threading.Thread(target=self._thread_main, name=f"vision-{self.protocol}",
                                                daemon=True)
                self._thread.start()
        if not self._ready.wait(2 * self.connect_timeout + 5.0) and self._start_error is None:
            self._start_error = RemoteSessionError(f"no answer from {self.shown_url} within {self.connect_timeout} s")
            self._request_stop()
        if self._start_error is not None:
            raise self._start_error
        return self

    def push_frame(self, image: Any, timestamp: float | None = None, *, drop_oldest: bool = True) -> bool:
        self._admit_frame(image, self._thread is not None)
        with self._lock:
            return self._queue_frame(image, timestamp, drop_oldest, None)

    def push_prompt(self, prompt: str) -> None:
        self._check_open()
        prompt = self._check_prompt(prompt)
        if self._thread is None:
            self.start()
        with self._lock:
            if self._prompts_waiting >= MAX_PROMPTS:
                raise queue.Full("too many prompts waiting")
            self._inputs.append(("prompt", None, prompt, None))
            self._prompts_waiting += 1
        self._wake()

    def push_prompt_frame(self, prompt: str, image: Any, timestamp: float | None = None, *,
                          drop_oldest: bool = True) -> bool:
        self._check_open()
        prompt = self._check_prompt(prompt)
        self._admit_frame(image, self._thread is not None)
        with self._lock:
            if self._prompts_waiting >= MAX_PROMPTS:
                raise queue.Full("too many prompts waiting")
            return self._queue_frame(image, timestamp, drop_oldest, prompt)

    def _queue_frame(self, image: Any, timestamp: float | None, drop_oldest: bool, prompt: str | None) -> bool:
        """With the lock held. Frames with a prompt are never dropped."""
        limit = self.options.frame_queue_size
        if self._frames_waiting >= limit and not drop_oldest:
            raise queue.Full("the frame queue is full")
        ts = self._frame_timestamp(timestamp)
        dropped = False
        if self._frames_waiting >= limit:
            for i, item in enumerate(self._inputs):
                if item[0] == "frame" and item[2] is None:
                    del self._inputs[i]
                    self._frames_waiting -= 1
                    self.counters["frames_dropped"] += 1
                    dropped = True
                    break
        self._inputs.append(("frame", image, prompt, ts))
        self._frames_waiting += 1
        if prompt is not None:
            self._prompts_waiting += 1
        self.counters["frames_pushed"] += 1
        self._wake()
        return dropped

    def _wake(self) -> None:
        loop, event = self._loop, self._wakeup
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    def _request_stop(self) -> None:
        self._stop.set()
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopping.set)

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop the remote session (``stop`` / ``session.abort``), close the connection and the thread."""
        self._closed.set()
        self._request_stop()
        self._join_producer(timeout, "the remote realtime session")

    # the private loop -------------------------------------------------------------------------------------------

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._release()
            self._done.set()
            self._ready.set()
            self._notify()

    async def _main(self) -> None:
        self._wakeup = asyncio.Event()
        self._stopping = asyncio.Event()
        self._frame_ready = asyncio.Event()
        self._acks = {"frame_ack": asyncio.Event(), "prompt_ack": asyncio.Event()}
        if self._stop.is_set():
            self._stopping.set()
        timeout = aiohttp.ClientTimeout(total=None, connect=self.connect_timeout)
        try:
            async with aiohttp.ClientSession(timeout=timeout, headers=self.headers) as http:
                try:
                    async with asyncio.timeout(self.connect_timeout):
                        ws = await http.ws_connect(self.url, heartbeat=20.0, max_msg_size=64 * 1024 * 1024)
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    raise RemoteSessionError(
                        f"cannot connect to {self.shown_url}: {type(exc).__name__}: {_safe(exc)}") from exc
                self._ws = ws
                try:
                    async with asyncio.timeout(self.connect_timeout):
                        await self._handshake(ws)
                    self._ready.set()
                    await self._serve(ws)
                finally:
                    await self._goodbye(ws)
        except BaseException as exc:
            if not self._ready.is_set():
                self._start_error = exc if isinstance(exc, SessionBusy | RemoteSessionError) else \
                    RemoteSessionError(f"{self.shown_url}: {type(exc).__name__}: {_safe(exc)}")
                self._error = None
                return
            if not isinstance(exc, Exception):
                raise
            self._fail(exc)
            return
        self._put(self._rounds.end(self._frame_ts), self._stop)

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
            log.warning("remote vision session %s failed: %s", self.shown_url, _safe(repr(exc)))
            self._put(self._rounds.end(self._frame_ts, error=f"{type(exc).__name__}: {_safe(exc)}"), self._stop)

    async def _recv_json(self, ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
        msg = await ws.receive()
        if msg.type == aiohttp.WSMsgType.TEXT:
            data = json.loads(msg.data)
            if not isinstance(data, dict):
                raise RemoteSessionError(f"unexpected message from {self.shown_url}: {_safe(msg.data[:200])!r}")
            return data
        if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
            code = ws.close_code
            if code == 1013:
                raise SessionBusy(f"the realtime service at {self.shown_url} is at capacity")
            raise RemoteSessionError(f"{self.shown_url} closed the connection (code {code})")
        if msg.type == aiohttp.WSMsgType.ERROR:
            raise RemoteSessionError(f"{self.shown_url}: connection error: {_safe(ws.exception())}")
        return {"type": "_binary"}

    def _error_of(self, data: dict[str, Any]) -> BaseException:
        message = str(data.get("message") or data.get("error") or "unknown error")
        code = str(data.get("code") or "")
        if code == "session_capacity_exceeded" or "already active" in message:
            return SessionBusy(f"the realtime service at {self.shown_url} is at capacity: {_safe(message)}")
        return RemoteSessionError(f"{self.shown_url}: {code + ': ' if code else ''}{_safe(message)}")

    async def _handshake(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        opts = self.options
        if self.protocol == "moss":
            start: dict[str, Any] = {
                "type": "start", "prompt": opts.initial_prompt, "frame_queue_size": opts.frame_queue_size,
                "max_tokens_per_second": opts.max_tokens_per_turn, "max_new_tokens": opts.max_new_tokens,
                "do_sample": False,
            }
            if opts.system_prompt is not None:
                start["system_prompt"] = opts.system_prompt
            await ws.send_str(json.dumps(start))
            want = "ready"
        else:
            while (data := await self._recv_json(ws)).get("type") != "session.created":
                if data.get("type") == "error":
                    raise self._error_of(data)
            configure: dict[str, Any] = {
                "type": "session.configure", "prompt": opts.initial_prompt, "max_new_tokens": opts.max_new_tokens,
                "max_tokens_per_turn": opts.max_tokens_per_turn,
                "input_queue_capacity": max(1, min(256, opts.frame_queue_size)),
            }
            if opts.system_prompt is not None:
                configure["system_prompt"] = opts.system_prompt
            await ws.send_str(json.dumps(configure))
            want = "session.ready"
        while True:
            data = await self._recv_json(ws)
            kind = data.get("type")
            if kind == "error":
                raise self._error_of(data)
            if kind == want:
                return

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        assert self._stopping is not None
        tasks = [asyncio.ensure_future(self._receiver(ws)), asyncio.ensure_future(self._sender(ws)),
                 asyncio.ensure_future(self._stopping.wait())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                raise result

    async def _goodbye(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        if not ws.closed:
            goodbye = {"type": "stop"} if self.protocol == "moss" else {"type": "session.abort"}
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await ws.send_str(json.dumps(goodbye))
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await ws.close()

    # sending ----------------------------------------------------------------------------------------------------

    def _next_input(self) -> tuple[str, Any, Any, float | None] | None:
        with self._lock:
            if not self._inputs:
                return None
            item = self._inputs.popleft()
            if item[0] == "frame":
                self._frames_waiting -= 1
            if item[2] is not None:
                self._prompts_waiting -= 1
            return item

    async def _sender(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        assert self._wakeup is not None
        while True:
            item = self._next_input()
            if item is None:
                self._wakeup.clear()
                if self._inputs:
                    continue
                await self._wakeup.wait()
                continue
            kind, image, prompt, ts = item
            if kind == "prompt":
                await self._send_prompt(ws, prompt)
            else:
                await self._send_frame(ws, image, ts, prompt)

    async def _wait_ack(self, name: str) -> None:
        event = self._acks[name]
        try:
            async with asyncio.timeout(self.ack_timeout):
                await event.wait()
        except TimeoutError:
            raise RemoteSessionError(
                f"{self.shown_url} did not acknowledge ({name}) within {self.ack_timeout} s") from None
        event.clear()

    async def _send_prompt(self, ws: aiohttp.ClientWebSocketResponse, prompt: str) -> None:
        if self.protocol == "moss":
            self._prompt_fifo.append(prompt)
            await ws.send_str(json.dumps({"type": "prompt", "text": prompt}))
            await self._wait_ack("prompt_ack")
        else:
            seq = self._seq
            self._seq += 1
            self._seq_prompts[seq] = prompt
            await ws.send_str(json.dumps({"type": "input.prompt", "seq_no": seq, "prompt": prompt, "final": False}))
        self.counters["prompts_sent"] += 1

    async def _send_frame(self, ws: aiohttp.ClientWebSocketResponse, image: Any, ts: float | None,
                          prompt: str | None) -> None:
        payload = encode_jpeg(image, self.jpeg_quality)
        if self.protocol == "moss":
            meta: dict[str, Any] = {"type": "frame", "timestamp": ts}
            if prompt is not None:
                meta["prompt"] = prompt
                self._prompt_fifo.append(prompt)
            self._unacked.append(ts)
            await ws.send_str(json.dumps(meta))
            await ws.send_bytes(payload)
            await self._wait_ack("frame_ack")
        else:
            assert self._frame_ready is not None
            seq = self._seq
            self._seq += 1
            if prompt is not None:
                self._seq_prompts[seq] = prompt
            self._frame_ready.clear()
            await ws.send_str(json.dumps({"type": "input.frame", "seq_no": seq, "timestamp": ts, "prompt": prompt,
                                          "final": False, "mime_type": "image/jpeg"}))
            try:  # the service says when its bounded input queue has room
                async with asyncio.timeout(self.ack_timeout):
                    await self._frame_ready.wait()
            except TimeoutError:
                raise RemoteSessionError(f"{self.shown_url} did not get ready for frame {seq}") from None
            await ws.send_bytes(payload)
        self.counters["frames_sent"] += 1

    # receiving --------------------------------------------------------------------------------------------------

    async def _receiver(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while True:
            data = await self._recv_json(ws)
            kind = data.get("type")
            if kind == "error":
                err = self._error_of(data)
                if self.protocol == "sglang" and data.get("code") == "invalid_request":
                    log.warning("%s rejected an input: %s", self.shown_url, _safe(err))
                    self.counters["inputs_rejected"] += 1
                    continue
                raise err
            if self.protocol == "moss":
                if self._on_moss(kind, data):
                    return
            elif self._on_sglang(kind, data):
                return

    def _on_moss(self, kind: Any, data: dict[str, Any]) -> bool:
        """Handle one MOSS service message; True when the session ended."""
        if kind == "output":
            for piece, text in self._parser.feed(str(data.get("text") or "")):
                self._piece(piece, text)
        elif kind in self._acks:
            if kind == "frame_ack" and self._unacked:  # the model has the frame from here on
                self._frame_ts = self._unacked.popleft()
            self._acks[kind].set()
        elif kind in ("session_end", "stopping"):
            for piece, text in self._parser.flush():
                self._piece(piece, text)
            return True
        return False

    def _piece(self, piece: str, text: str) -> None:
        self._put_piece(piece, text, self._frame_ts, self._prompt_fifo, self._stop)

    def _on_sglang(self, kind: Any, data: dict[str, Any]) -> bool:
        """Handle one SGLang-Omni message; True when the session ended."""
        if kind == "input.frame.ready":
            assert self._frame_ready is not None
            self._frame_ready.set()
        elif kind in ("input.frame.processed", "input.prompt.processed"):
            if kind == "input.frame.processed" and data.get("timestamp") is not None:
                self._frame_ts = float(data["timestamp"])
            seq = data.get("seq_no")
            prompt = self._seq_prompts.pop(seq, None) if isinstance(seq, int) else None
            if prompt is not None:
                self._put(self._rounds.prompt(prompt, self._frame_ts), self._stop)
        elif kind == "response.text.delta":
            self._put(self._rounds.text(str(data.get("delta") or ""), self._frame_ts), self._stop)
        elif kind == "response.turn.silence":
            ts = data.get("timestamp")
            self._put(self._rounds.silence(float(ts) if ts is not None else self._frame_ts), self._stop)
        elif kind in ("response.done", "session.done"):
            return kind == "session.done" or data.get("finish_reason") is not None
        return False


class RemoteVLMEngine(VLMEngine):
    """A remote realtime vision service (``--vlm-engine moss`` with ``--vlm-url``, or ``sglang`` / ``openai``).

    ``load`` checks the service's ``/health``; each session is one WebSocket connection.
    """

    def __init__(self, url: str, *, protocol: Protocol = "moss", model: str | None = None,
                 connect_timeout: float = 30.0) -> None:
        super().__init__()
        self.url = realtime_url(url, protocol)
        self.shown_url = redact_url(self.url)
        register_url_secrets(self.url)
        self.protocol: Protocol = protocol
        self.model = model
        self.connect_timeout = connect_timeout

    def load(self, progress: Callable[[str], None]) -> None:
        target = health_url(self.url)
        progress(f"checking {redact_url(target)}")

        async def check() -> int:
            timeout = aiohttp.ClientTimeout(total=min(10.0, self.connect_timeout))
            async with aiohttp.ClientSession(timeout=timeout) as http, http.get(target) as resp:
                return resp.status

        try:
            status = asyncio.run(check())
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise RemoteSessionError(f"the {self.protocol} realtime service at {redact_url(target)} is not reachable: "
                                     f"{type(exc).__name__}: {_safe(exc)}") from exc
        if status >= 400:
            raise RemoteSessionError(f"the {self.protocol} realtime service at {redact_url(target)} answered {status}")
        progress(f"{self.protocol} realtime service at {self.shown_url} is up")
        self.loaded = True

    def _open(self, options: SessionOptions, release: Callable[[], None]) -> VisionSession:
        return RemoteVisionSession(self.url, options, protocol=self.protocol, model=self.model,
                                   connect_timeout=self.connect_timeout, on_close=release)

    def describe(self) -> dict[str, Any]:
        return {"backend": f"remote-{self.protocol}", "url": self.shown_url, "model": self.model}
