"""The event protocol shared by the data channel, the WebSocket API and HTTP streaming (DESIGN.md section 4)."""

from rtc_agent.protocol import events
from rtc_agent.protocol.codec import EventIds, ProtocolError, decode, encode, error_event
from rtc_agent.protocol.events.base import ClientEvent, ServerEvent
from rtc_agent.protocol.events.catalogue import CLIENT_EVENTS, SERVER_EVENTS

__all__ = [
    "CLIENT_EVENTS", "SERVER_EVENTS", "ClientEvent", "EventIds", "ProtocolError", "ServerEvent", "decode",
    "encode", "error_event", "events",
]
