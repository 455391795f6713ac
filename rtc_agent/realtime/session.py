"""``RealtimeSocketSession``: one ``/v1/realtime`` WebSocket, served by the agent or the captions app.

It is the app's :class:`~rtc_agent.apps.base.AppContext`, as :class:`~rtc_agent.server.session.Session` is for a
WebRTC peer: audio in comes from ``input_audio_buffer.append`` (decoded from the session's input format and
resampled to 16 kHz mono; the session clock counts that audio), audio out goes to a
:class:`~rtc_agent.realtime.speech.SocketSpeech`, and events both ways go through a
:class:`~rtc_agent.realtime.adapter.RealtimeAdapter`.

Ordering: audio chunks and native client events pass through one queue, so a ``commit`` covers exactly the audio
appended before it. Reading waits when the queue is full (TCP backpressure), never drops. Outgoing events are
written by one task; a client that does not read past ``MAX_BACKLOG_BYTES`` is disconnected.

Budget: every incoming message (text or binary) is first charged to a
:class:`~rtc_agent.protocol.message_budget.MessageBudget` (``channel_*`` settings; its bytes are the message's
characters), before any decoding. A message past it is held back: reading pauses until the budget would take
it (at most ``OVER_BUDGET_PAUSE_S``; an unread socket pushes back over TCP at no cost to the event loop), then
it is handled, or dropped with no other work when the budget still cannot take it. So a client faster than the
budget is slowed down to it (measured: a flood costs the server several times less CPU than reading and
dropping everything). The client hears one GA ``error`` ``rate_limited`` a second at most; a client over its
budget for ``channel_overload_close_s`` is told so (a last ``error`` ``rate_limited``) and disconnected with
close code 1008 (policy violation). Server-side ends (shutdown, maximum duration, ...) send a last GA ``error``
naming the reason (:meth:`RealtimeAdapter.ended`) before the close frame (1001 at shutdown, else 1000).

Lifecycle: the session ends when the socket closes, at ``max_session_seconds``, on ``DELETE``-like server ends
(``close(reason)``) and when one of its critical tasks crashes. :meth:`close` never raises, finishes in bounded
time, closes the socket and calls ``on_closed`` (the registry frees the slot). Registered in the session
registry like a WebRTC session, so ``GET /v1/sessions`` lists it and shutdown closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from aiohttp import WSCloseCode, WSMsgType, web

from rtc_agent.errors import AgentError, RateLimited
from rtc_agent.protocol import ClientEvent, ServerEvent
from rtc_agent.protocol.events import SessionCreated, SessionEnded
from rtc_agent.protocol.message_budget import BudgetLimits, MessageBudget, Verdict
from rtc_agent.realtime.adapter import MAX_EVENT_BYTES, RealtimeAdapter
from rtc_agent.realtime.audio import MODEL_RATE, InputDecoder
from rtc_agent.realtime.events import RealtimeError
from rtc_agent.realtime.session_config import SessionConfig
from rtc_agent.realtime.speech import SocketSpeech
from rtc_agent.server.session_context import SessionContext
from rtc_agent.server.session_end import ClosingSession, ended_message
from rtc_agent.tasks import wait_tasks

log = logging.getLogger(__name__)

QUEUE_LIMIT = 256  # audio chunks and client events waiting for the app
MAX_BACKLOG_BYTES = 32 * 1024 * 1024  # events written but not yet taken by the client
TASKS_TIMEOUT_S = 3.0  # cancelled tasks finishing
DRAIN_TIMEOUT_S = 1.0
CRITICAL_TASKS = frozenset({"events", "writer"})
OVER_BUDGET_PAUSE_S = 0.5  # longest pause in reading for a message over the budget
FLOOD_CLOSE_WAIT_S = 0.25  # for the close frame to reach a flooder; waiting longer means parsing more of its backlog
YIELD_EVERY = 32  # messages handled back to back (aiohttp hands over queued ones without yielding) before a yield


class RealtimeSocketSession(SessionContext, ClosingSession):
    """See the module docstring. Create, register, then ``await run()`` from the WebSocket handler."""

    critical_tasks = CRITICAL_TASKS

    close_wait_s = 10.0
    transport_name = " over WebSocket"

    def __init__(self, ws: web.WebSocketResponse, app_cls: type, app_config: dict[str, Any], config: SessionConfig,
                 *, settings: Any, worker: Any, metrics: Any, on_closed: Callable[[Any], None], session_id: str,
                 client: str = "") -> None:
        self.id = session_id
        self.ws = ws
        self.app_name = app_cls.name
        self.config = app_config
        self.settings = settings
        self.worker = worker
        self.rooms = None  # AppContext.rooms: a Realtime API session joins no call room
        self.metrics = metrics
        self.client = client
        self.token_hash = ""  # GET/DELETE /v1/sessions/{id} need an API key
        self.created_at = time.time()
        self._started = time.monotonic()
        self.connected_at: float | None = self._started
        self.state = "connected"
        self.close_reason: str | None = None
        self._on_closed = on_closed
        self.speech = SocketSpeech(config.output_format) if config.kind == "realtime" else None
        self.adapter = RealtimeAdapter(config, session_id=session_id, settings=settings, transport="websocket",
                                       take_audio=self.speech.take if self.speech is not None else None)
        self._decoder = InputDecoder(config.input_format)
        self._samples = 0  # 16 kHz samples received: the session clock
        self._tasks: set[asyncio.Task] = set()
        self._inbox: asyncio.Queue[tuple[np.ndarray | ClientEvent, str | None]] = asyncio.Queue(QUEUE_LIMIT)
        self._outbox: asyncio.Queue[str] = asyncio.Queue()
        self._backlog = 0
        self._closed = asyncio.Event()
        self._closing_task: asyncio.Task | None = None
        self.received = self.sent = self.errors = 0
        self.budget = MessageBudget(BudgetLimits.from_settings(settings, max_message_bytes=MAX_EVENT_BYTES),
                                    time.monotonic())
        self.app = app_cls(self, app_config)

    @property
    def started_at(self) -> float:
        return self._started

    # --- AppContext (session_id, observe and spawn: SessionContext) ---

    def now_ms(self) -> int:
        return self._samples * 1000 // MODEL_RATE

    def emit(self, event: ServerEvent) -> None:
        for data in self.adapter.server(event):
            self._send(data)

    def report_failure(self, exc: AgentError) -> None:
        self._send_error(exc)

    # --- sending ---

    def _send(self, data: dict[str, Any]) -> None:
        if self.state == "closed" or self.ws.closed:
            return
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        self._backlog += len(text)
        if self._backlog > MAX_BACKLOG_BYTES:
            log.warning("session %s: the client does not read its events; closing", self.id)
            self.close_soon("slow_client")
            return
        self._outbox.put_nowait(text)

    def _send_error(self, exc: Exception, event_id: str | None = None) -> None:
        self.errors += 1
        code = getattr(exc, "code", "internal_error")
        self.metrics.errors.labels(code=code).inc()
        self._send(self.adapter.error(exc, event_id))

    async def _writer(self) -> None:
        while True:
            text = await self._outbox.get()
            self._backlog -= len(text)
            await self.ws.send_str(text)
            self.sent += 1

    # --- receiving ---

    async def run(self) -> None:
        """Serve the socket until it closes; the session is closed when this returns."""
        try:
            await self.app.start()
            self.spawn(self._writer(), "writer")
            self.spawn(self._process(), "events")
            self.spawn(self._watchdog(), "watchdog")
            self.emit(SessionCreated(session={}))
            streak = 0
            async for message in self.ws:
                streak += 1
                if streak % YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # a burst of queued messages must not hold the loop
                if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    verdict = self.budget.admit(len(message.data), time.monotonic())
                    if verdict is not Verdict.ADMIT:
                        if verdict is Verdict.CLOSE:
                            log.warning("session %s: over its message budget for too long; closing", self.id)
                            self.close_reason = "rate_limited"
                            break
                        if not await self._held_back(verdict, len(message.data)):
                            continue
                if message.type == WSMsgType.TEXT:
                    await self._receive(message.data)
                elif message.type == WSMsgType.BINARY:
                    self._send_error(RealtimeError("binary messages are not events; send JSON text",
                                                   code="invalid_event"))
                elif message.type == WSMsgType.ERROR:
                    break
        finally:
            await self.close(self.close_reason or "peer_closed")

    async def _held_back(self, verdict: Verdict, size: int) -> bool:
        """A message over the budget: maybe a ``rate_limited`` error, a pause in reading, then whether the budget
        takes it now (else it is dropped)."""
        if verdict is Verdict.NOTIFY:
            self._send_error(RateLimited(self.budget.limits.over_budget(
                "reading is slowed and messages may be dropped"), retry_after=1.0))
        await asyncio.sleep(min(OVER_BUDGET_PAUSE_S, self.budget.retry_after(size) + 0.001))
        return self.budget.take(size, time.monotonic())

    async def _receive(self, raw: str) -> None:
        self.received += 1
        try:
            action = self.adapter.client(raw)
            for reply in action.replies:
                self._send(reply)
            if self.speech is not None:
                self.speech.format = self.adapter.config.output_format
            if action.audio is not None:
                if self._decoder.kind != self.adapter.config.input_format:
                    self._decoder = InputDecoder(self.adapter.config.input_format)
                try:
                    pcm = self._decoder.decode(action.audio)
                except ValueError as exc:
                    raise RealtimeError(f"Invalid 'audio': {exc}", param="audio", event_id=action.event_id) from None
                await self._inbox.put((pcm, None))
            for event in action.native:
                await self._inbox.put((event, event.event_id))
        except RealtimeError as exc:
            self._send_error(exc, exc.event_id)

    async def _process(self) -> None:
        while True:
            item, event_id = await self._inbox.get()
            if isinstance(item, np.ndarray):
                if item.size:
                    start = self.now_ms()
                    self._samples += item.size
                    self.app.on_audio(item, start)
                continue
            try:
                await self.app.on_event(item)
            except AgentError as exc:
                self._send_error(exc, event_id)
            except Exception as exc:
                log.exception("session %s: handling %s failed", self.id, item.type)
                self._send_error(AgentError(f"internal error handling {item.type}: {type(exc).__name__}"), event_id)

    async def _watchdog(self) -> None:
        limit = self.settings.max_session_seconds
        while True:
            await asyncio.sleep(1.0)
            if limit and time.monotonic() - self._started > limit:
                self.close_soon("max_duration")

    # --- lifecycle ---

    def close_soon(self, reason: str) -> None:
        if self._closing_task is None and self.state not in ("closing", "closed"):
            self.close_reason = reason
            self._closing_task = asyncio.get_running_loop().create_task(self.close(reason), name=f"{self.id}:close")

    async def _end_transport(self, reason: str, tasks: list[asyncio.Task]) -> None:
        """Queued events leave, tasks end, the socket closes (1000, or 1001 at shutdown)."""
        if self.speech is not None:
            self.speech.clear()
        self.emit(SessionEnded(reason=reason, message=ended_message(reason)))  # GA: a last error, if any
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while not self._outbox.empty() and not self.ws.closed and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for task in tasks:
            task.cancel()
        await wait_tasks(tasks, TASKS_TIMEOUT_S, name=f"session {self.id}")
        code = {"server_shutdown": WSCloseCode.GOING_AWAY,
                "rate_limited": WSCloseCode.POLICY_VIOLATION}.get(reason, WSCloseCode.OK)
        wait_s = FLOOD_CLOSE_WAIT_S if reason == "rate_limited" else 3.0  # past it aiohttp drops the connection
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(code=code, message=reason.encode()[:120]), wait_s)

    def describe(self) -> dict[str, Any]:
        """State and live numbers for ``GET /v1/sessions/{id}``."""
        return {"session_id": self.id, "app": self.app_name, "transport": "websocket", "state": self.state,
                "close_reason": self.close_reason, "created_at": self.created_at,
                "age_s": round(time.monotonic() - self._started, 3), "session_ms": self.now_ms(),
                "config": self.config, "engines": self.app.engines(),
                "events": {"sent": self.sent, "received": self.received, "errors": self.errors,
                           "budget": self.budget.stats()},
                "output": {"written_ms": self.speech.written_ms if self.speech is not None else 0},
                "tasks": self.task_count, "app_stats": self.app.stats()}
