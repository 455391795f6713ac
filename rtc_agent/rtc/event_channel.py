"""``EventChannel``: JSON events over the ``events`` data channel, with a heartbeat.

Server events get an ``event_id`` and the ``session_ms`` at the moment they are sent. Client messages are decoded
and validated; a bad one is answered with an ``error`` event and the session goes on. Every client message counts
as a heartbeat; ``ping`` is answered with ``pong`` (the page measures its RTT with it). Events sent before the
channel opens wait in a bounded buffer.

Budget: with ``budget`` limits, every client message is first charged to a
:class:`~rtc_agent.protocol.message_budget.MessageBudget` (messages and bytes per second, before any decoding).
A message past it is dropped with no further work; the client hears one ``error {code: "rate_limited"}`` a
second at most, and a channel over its budget for ``overload_close_s`` ends its session: ``on_overload
("rate_limited")`` (without that callback the data channel is closed). Size: the SCTP transport refuses a
message past the advertised ``max-message-size`` while reassembling it (:mod:`rtc_agent.rtc.sctp_limit`); the
client hears ``error {code: "message_too_large"}`` and the channel goes on.

Contract: :meth:`EventChannel.receive` never raises. An exception escaping aiortc's ``message`` handler would
tear down SCTP and so the session; hostile JSON (deep nesting, huge numbers) is refused by the decoder's limits
and any other failure is answered with an ``error`` event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiortc import RTCDataChannel

from rtc_agent.errors import AgentError, PayloadTooLarge, RateLimited
from rtc_agent.protocol import ClientEvent, EventIds, ProtocolError, ServerEvent, decode, encode, error_event
from rtc_agent.protocol.events import ClientPing, ClientPong, ServerPong
from rtc_agent.protocol.json_limits import DEFAULT_MAX_DEPTH, DEFAULT_MAX_NUMBER_CHARS
from rtc_agent.protocol.message_budget import BudgetLimits, MessageBudget, Verdict
from rtc_agent.rtc.sctp_limit import LOCAL_MAX_MESSAGE_SIZE, MESSAGE_TOO_LARGE, limit_inbound_messages

log = logging.getLogger(__name__)

LABEL = "events"
PENDING_LIMIT = 256  # events kept while the channel is not open yet
MAX_BUFFERED_BYTES = 4 * 1024 * 1024  # above this the peer is not reading; drop instead of queueing forever


class EventChannel:
    """Sends server events and receives client events for one session."""

    def __init__(self, clock: Callable[[], int], *, max_event_bytes: int,
                 on_event: Callable[[ClientEvent], None],
                 on_error: Callable[[str], None] | None = None,
                 on_close: Callable[[], None] | None = None, max_json_depth: int = DEFAULT_MAX_DEPTH,
                 max_number_chars: int = DEFAULT_MAX_NUMBER_CHARS, budget: BudgetLimits | None = None,
                 on_overload: Callable[[str], None] | None = None) -> None:
        self.clock = clock
        self.max_event_bytes = max_event_bytes
        self.max_json_depth = max_json_depth
        self.max_number_chars = max_number_chars
        self.on_event = on_event
        self.on_error = on_error
        self.on_close = on_close
        self.ids = EventIds()
        self.channel: RTCDataChannel | None = None
        self.opened_at: float | None = None
        self.last_seen = time.monotonic()
        self.sent = 0
        self.received = 0
        self.dropped = 0
        self.errors = 0
        self._pending: deque[str] = deque(maxlen=PENDING_LIMIT)
        self.sealed = False  # after seal(): nothing more is sent (session.ended was the last event)
        self.budget = MessageBudget(budget, time.monotonic()) if budget is not None else None
        self.on_overload = on_overload
        self._overloaded = False  # on_overload was called (once)

    @property
    def is_open(self) -> bool:
        return self.channel is not None and self.channel.readyState == "open"

    def attach(self, channel: RTCDataChannel) -> None:
        """Use this data channel (label ``events``) from now on."""
        self.channel = channel
        if channel.transport is not None:
            limit_inbound_messages(channel.transport, LOCAL_MAX_MESSAGE_SIZE)
        channel.on(MESSAGE_TOO_LARGE, self._too_large)
        channel.on("message", self.receive)
        channel.on("open", self._flush)
        channel.on("close", self._closed)
        if channel.readyState == "open":
            self._flush()

    def _flush(self) -> None:
        self.opened_at = self.opened_at or time.monotonic()
        self.last_seen = time.monotonic()
        while self._pending and self.is_open:
            self._transmit(self._pending.popleft())

    def _closed(self) -> None:
        if self.on_close is not None:
            self.on_close()

    def send(self, event: ServerEvent) -> dict[str, Any]:
        """Send (or buffer until open) one server event; returns its wire form. After :meth:`seal` the event
        is not sent."""
        data = encode(event, event_id=self.ids.next(), session_ms=self.clock())
        self._send_data(data)
        return data

    def _send_data(self, data: dict[str, Any]) -> None:
        """Send one wire-form event now, or keep it until the channel opens; nothing once sealed."""
        if self.sealed:
            return
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        if self.is_open:
            self._transmit(text)
        else:
            if len(self._pending) == self._pending.maxlen:
                self.dropped += 1
            self._pending.append(text)

    def _transmit(self, text: str) -> None:
        assert self.channel is not None
        if self.channel.bufferedAmount > MAX_BUFFERED_BYTES:
            self.dropped += 1
            return
        self.channel.send(text)
        self.sent += 1

    def send_error(self, exc: Exception, *, event_id: str | None = None) -> None:
        """Tell the client about an error (any exception becomes an ``internal_error``)."""
        if not isinstance(exc, AgentError):
            exc = AgentError(str(exc) or type(exc).__name__)
        self.errors += 1
        if self.on_error is not None:
            self.on_error(exc.code)
        self.send(error_event(exc, event_id=event_id))

    def receive(self, raw: str | bytes) -> None:
        """Handle one client message: heartbeat, ping/pong, validation, then the session's handler.
        Never raises (see the module docstring)."""
        now = self.last_seen = time.monotonic()
        self.received += 1
        if self.budget is not None:
            verdict = self.budget.admit(len(raw), now)
            if verdict is not Verdict.ADMIT:
                if verdict is not Verdict.DROP:
                    self._over_budget(verdict)
                return
        try:
            self._receive(raw)
        except Exception as exc:
            log.exception("handling a client message failed")
            try:
                self.send_error(AgentError(f"internal error handling the message: {type(exc).__name__}"))
            except Exception:
                log.exception("reporting the failure failed")

    def _over_budget(self, verdict: Verdict) -> None:
        """A dropped message that asks for more than silence: a ``rate_limited`` error, or (once) the end."""
        assert self.budget is not None
        try:
            if verdict is Verdict.NOTIFY:
                self.send_error(RateLimited(self.budget.limits.over_budget("messages are dropped"),
                                            retry_after=1.0))
            elif not self._overloaded:
                self._overloaded = True
                log.warning("event channel over its message budget for too long; ending the session")
                if self.on_overload is not None:
                    self.on_overload("rate_limited")
                else:
                    self.close()
        except Exception:
            log.exception("handling an over-budget message failed")

    def _too_large(self, size: int) -> None:
        try:
            self.send_error(PayloadTooLarge(f"a message of more than {size} bytes was refused; the limit is "
                                            f"{LOCAL_MAX_MESSAGE_SIZE} (the SDP's max-message-size)",
                                            code="message_too_large"))
        except Exception:
            log.exception("reporting a refused message failed")

    def _receive(self, raw: str | bytes) -> None:
        try:
            event = decode(raw, max_bytes=self.max_event_bytes, max_depth=self.max_json_depth,
                           max_number_chars=self.max_number_chars)
        except ProtocolError as exc:
            self.send_error(exc)
            return
        if isinstance(event, ClientPing):
            self.send(ServerPong(ping_event_id=event.event_id, client_ts=event.client_ts))
            return
        if isinstance(event, ClientPong):
            return
        self.on_event(event)

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until what was sent has left: the channel's buffer is empty and the
        SCTP transport has no unacknowledged data. Returns whether it did (False when closed meanwhile)."""
        deadline = time.monotonic() + timeout
        while self.is_open and time.monotonic() < deadline:
            assert self.channel is not None
            sctp = self.channel.transport
            if self.channel.bufferedAmount == 0 and not getattr(sctp, "_outbound_queue", None) \
                    and not getattr(sctp, "_sent_queue", None):
                return True
            await asyncio.sleep(0.01)
        return False

    def seal(self) -> None:
        """Send nothing more (the session has said its last word)."""
        self.sealed = True

    def idle_seconds(self) -> float:
        return time.monotonic() - self.last_seen

    def close(self) -> None:
        if self.channel is not None and self.channel.readyState in ("connecting", "open"):
            self.channel.close()
