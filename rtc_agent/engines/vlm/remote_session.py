"""The client side of a remote realtime vision service (the MOSS reference service or SGLang-Omni).

The realtime loop runs on the server; :class:`RemoteVisionSession` is a
:class:`~rtc_agent.engines.vlm.session.VisionSessionBase` with the reference API, so apps cannot tell it from a
local session. Each session owns a private asyncio loop in one thread (the API is blocking, as the reference's
is) with one aiohttp WebSocket; the messages are in :mod:`~rtc_agent.engines.vlm.remote_wire`. Inputs wait in
:class:`~rtc_agent.engines.vlm.remote_inputs.PendingInputs` while the service applies backpressure
(acknowledgements, ``input.frame.ready``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

import aiohttp

from rtc_agent.engines.vlm.base import SessionBusy, SessionOptions
from rtc_agent.engines.vlm.images import encode_jpeg
from rtc_agent.engines.vlm.outputs import ChunkParser
from rtc_agent.engines.vlm.remote_inputs import PendingInput, PendingInputs
from rtc_agent.engines.vlm.remote_wire import (
    DEFAULT_PATHS,
    RemoteSessionError,
    ServiceProtocol,
    error_of,
    goodbye,
    handshake,
    realtime_url,
    recv_json,
    safe_text,
)
from rtc_agent.engines.vlm.session import VisionSessionBase
from rtc_agent.redact import redact_url, register_url_secrets

log = logging.getLogger(__name__)

__all__ = ["RemoteVisionSession"]


class RemoteVisionSession(VisionSessionBase):
    """A realtime session on a remote service (both protocols: :mod:`~rtc_agent.engines.vlm.remote_wire`).

    ``start()`` connects and performs the handshake (blocking, up to ``connect_timeout`` seconds); it raises
    :class:`~rtc_agent.engines.vlm.base.SessionBusy` when the service is at capacity and
    :class:`RemoteSessionError` for other failures. Outputs arrive through ``poll_output`` / ``poll_event`` as
    for a local session; ``frame_ts`` is the newest frame the service confirmed.
    """

    def __init__(self, url: str, options: SessionOptions | None = None, *, protocol: ServiceProtocol = "moss",
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
        self.protocol: ServiceProtocol = protocol
        self.model = model
        self.connect_timeout = connect_timeout
        self.ack_timeout = ack_timeout
        self.jpeg_quality = jpeg_quality
        self.headers = headers or {}
        self._on_close = on_close
        self._lock = threading.Lock()
        self._pending = PendingInputs(self.options.frame_queue_size)
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
            return self._pending.frames

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
        prompt = self._admit_prompt(prompt, self._thread is not None)
        with self._lock:
            self._pending.add_prompt(prompt)
        self._wake()

    def push_prompt_frame(self, prompt: str, image: Any, timestamp: float | None = None, *,
                          drop_oldest: bool = True) -> bool:
        prompt = self._admit_prompt_frame(prompt, image, self._thread is not None)
        with self._lock:
            self._pending.check_prompt_room()
            return self._queue_frame(image, timestamp, drop_oldest, prompt)

    def _queue_frame(self, image: Any, timestamp: float | None, drop_oldest: bool, prompt: str | None) -> bool:
        """With the lock held. Frames with a prompt are never dropped."""
        if self._pending.frames_full and not drop_oldest:
            raise queue.Full("the frame queue is full")
        ts = self._frame_timestamp(timestamp)
        dropped = self._pending.add_frame(image, prompt, ts)
        if dropped:
            self.counters["frames_dropped"] += 1
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
                        f"cannot connect to {self.shown_url}: {type(exc).__name__}: {safe_text(exc)}") from exc
                self._ws = ws
                try:
                    async with asyncio.timeout(self.connect_timeout):
                        await handshake(ws, self.protocol, self.options, self.shown_url)
                    self._ready.set()
                    await self._serve(ws)
                finally:
                    await goodbye(ws, self.protocol)
        except BaseException as exc:
            if not self._ready.is_set():
                self._start_error = exc if isinstance(exc, SessionBusy | RemoteSessionError) else \
                    RemoteSessionError(f"{self.shown_url}: {type(exc).__name__}: {safe_text(exc)}")
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
            log.warning("remote vision session %s failed: %s", self.shown_url, safe_text(repr(exc)))
            self._put(self._rounds.end(self._frame_ts, error=f"{type(exc).__name__}: {safe_text(exc)}"), self._stop)

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

    # sending ----------------------------------------------------------------------------------------------------

    def _next_input(self) -> PendingInput | None:
        with self._lock:
            return self._pending.pop()

    async def _sender(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        assert self._wakeup is not None
        while True:
            item = self._next_input()
            if item is None:
                self._wakeup.clear()
                if self._pending:
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
            data = await recv_json(ws, self.shown_url)
            kind = data.get("type")
            if kind == "error":
                err = error_of(data, self.shown_url)
                if self.protocol == "sglang" and data.get("code") == "invalid_request":
                    log.warning("%s rejected an input: %s", self.shown_url, safe_text(err))
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
