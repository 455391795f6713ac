"""``EventChannel``: JSON events over the ``events`` data channel, with a heartbeat.

Server events get an ``event_id`` and the ``session_ms`` at the moment they are sent. Client messages are decoded
and validated; a bad one is answered with an ``error`` event and the session goes on. Every client message counts
as a heartbeat; ``ping`` is answered with ``pong`` (the page measures its RTT with it). Events sent before the
channel opens wait in a bounded buffer.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiortc import RTCDataChannel

from rtc_agent.errors import AgentError
from rtc_agent.protocol import ClientEvent, EventIds, ProtocolError, ServerEvent, decode, encode, error_event
from rtc_agent.protocol.events import ClientPing, ClientPong, ServerPong

log = logging.getLogger(__name__)

LABEL = "events"
PENDING_LIMIT = 256  # events kept while the channel is not open yet
MAX_BUFFERED_BYTES = 4 * 1024 * 1024  # above this the peer is not reading; drop instead of queueing forever


class EventChannel:
    """Sends server events and receives client events for one session."""

    def __init__(self, clock: Callable[[], int], *, max_event_bytes: int,
                 on_event: Callable[[ClientEvent], None],
                 on_error: Callable[[str], None] | None = None,
                 on_close: Callable[[], None] | None = None) -> None:
        self.clock = clock
        self.max_event_bytes = max_event_bytes
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

    @property
    def is_open(self) -> bool:
        return self.channel is not None and self.channel.readyState == "open"

    def attach(self, channel: RTCDataChannel) -> None:
        """Use this data channel (label ``events``) from now on."""
        self.channel = channel
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
        """Send (or buffer until open) one server event; returns its wire form."""
        data = encode(event, event_id=self.ids.next(), session_ms=self.clock())
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        if self.is_open:
            self._transmit(text)
        else:
            if len(self._pending) == self._pending.maxlen:
                self.dropped += 1
            self._pending.append(text)
        return data

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
        """Handle one client message: heartbeat, ping/pong, validation, then the session's handler."""
        self.last_seen = time.monotonic()
        self.received += 1
        try:
            event = decode(raw, max_bytes=self.max_event_bytes)
        except ProtocolError as exc:
            self.send_error(exc)
            return
        if isinstance(event, ClientPing):
            self.send(ServerPong(ping_event_id=event.event_id, client_ts=event.client_ts))
            return
        if isinstance(event, ClientPong):
            return
        self.on_event(event)

    def idle_seconds(self) -> float:
        return time.monotonic() - self.last_seen

    def close(self) -> None:
        if self.channel is not None and self.channel.readyState in ("connecting", "open"):
            self.channel.close()
