"""``OaiEventChannel``: the ``oai-events`` data channel of an OpenAI Realtime WebRTC call.

An :class:`~rtc_agent.rtc.event_channel.EventChannel` (same buffering before open, flow control, drain and seal)
whose wire vocabulary is OpenAI's GA events instead of ours: native server events the session and its app emit
are translated by a :class:`~rtc_agent.realtime.adapter.RealtimeAdapter` (``metrics`` and ``pong`` have no GA
form and are not sent; a server-side ``session.ended`` becomes a last GA ``error``), client messages are GA
events checked by the adapter and handed on as native events. A refused message is answered with a GA
``error`` carrying its ``event_id``.

The message budget is the base class's, with the limits of the adapter's settings (``channel_*``): past it, a
GA ``error`` ``rate_limited`` once a second at most; sustained excess calls ``on_overload("rate_limited")``
(without that callback the channel is closed, which ends the session as ``peer_closed``).

Liveness: OpenAI clients send no pings, so the session's heartbeat counts the incoming audio track too:
:meth:`OaiEventChannel.idle_seconds` is the time since the last client message or the last received audio
(the browser's microphone track sends frames, silence included, while the peer is alive).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rtc_agent.protocol import ClientEvent, ServerEvent
from rtc_agent.protocol.message_budget import BudgetLimits
from rtc_agent.realtime.adapter import RealtimeAdapter
from rtc_agent.realtime.events import RealtimeError
from rtc_agent.rtc.event_channel import EventChannel

__all__ = ["LABEL", "OaiEventChannel"]

LABEL = "oai-events"


class OaiEventChannel(EventChannel):
    def __init__(self, clock: Callable[[], int], adapter: RealtimeAdapter, *, max_event_bytes: int,
                 on_event: Callable[[ClientEvent], None], on_error: Callable[[str], None] | None = None,
                 on_close: Callable[[], None] | None = None,
                 on_clear_output: Callable[[], None] | None = None,
                 on_overload: Callable[[str], None] | None = None) -> None:
        settings = adapter.settings
        budget = (BudgetLimits.from_settings(settings, max_message_bytes=max_event_bytes)
                  if hasattr(settings, "channel_messages_per_s") else None)
        super().__init__(clock, max_event_bytes=max_event_bytes, on_event=on_event, on_error=on_error,
                         on_close=on_close, budget=budget, on_overload=on_overload)
        self.adapter = adapter
        self.on_clear_output = on_clear_output
        self._clock_seen = clock()
        self._audio_at = time.monotonic()

    def send(self, event: ServerEvent) -> dict[str, Any]:
        """Translate and send (or buffer until open) one native event; returns the last GA event sent."""
        last: dict[str, Any] = {}
        for data in self.adapter.server(event):
            self._send_data(data)
            last = data
        return last

    def send_error(self, exc: Exception, *, event_id: str | None = None) -> None:
        self.errors += 1
        if self.on_error is not None:
            self.on_error(getattr(exc, "code", "internal_error"))
        self._send_data(self.adapter.error(exc, event_id))

    def _receive(self, raw: str | bytes) -> None:
        try:
            action = self.adapter.client(raw)
        except RealtimeError as exc:
            self.send_error(exc, event_id=exc.event_id)
            return
        for reply in action.replies:
            self._send_data(reply)
        if action.clear_output and self.on_clear_output is not None:
            self.on_clear_output()
        for event in action.native:
            self.on_event(event)

    def idle_seconds(self) -> float:
        now = time.monotonic()
        clock = self.clock()
        if clock != self._clock_seen:
            self._clock_seen, self._audio_at = clock, now
        return min(now - self.last_seen, now - self._audio_at)
