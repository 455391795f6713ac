"""The server events every app sends: the session's lifecycle, errors, heartbeats and live metrics."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from rtc_agent.protocol.events.base import ServerEvent


class ErrorBody(BaseModel):
    type: str
    code: str
    message: str
    event_id: str | None = None  # the client event that caused it, when there is one


class SessionCreated(ServerEvent):
    type: Literal["session.created"] = "session.created"
    session: dict[str, Any]


class SessionUpdated(ServerEvent):
    type: Literal["session.updated"] = "session.updated"
    session: dict[str, Any]


SESSION_END_REASONS = ("heartbeat_lost", "max_duration", "server_shutdown", "connect_timeout", "deleted",
                       "internal_error", "peer_closed", "ice_failed", "setup_failed", "rate_limited", "room_moved")


class SessionEnded(ServerEvent):
    """The last event before the server closes a session.

    ``reason`` is one of :data:`SESSION_END_REASONS` (``heartbeat_lost``, ``max_duration``, ``server_shutdown``,
    ``connect_timeout``, ``deleted``, ``internal_error``, ``rate_limited``: the client kept sending past its
    per-connection budget; ``room_moved``: another node hosts the call room now, offer again; ``peer_closed``,
    ``ice_failed`` and ``setup_failed`` only reach a client whose channel is still open); ``message`` says it in
    words for the page.
    """

    type: Literal["session.ended"] = "session.ended"
    reason: str
    message: str


class Error(ServerEvent):
    type: Literal["error"] = "error"
    error: ErrorBody


class ServerPing(ServerEvent):
    type: Literal["ping"] = "ping"


class ServerPong(ServerEvent):
    type: Literal["pong"] = "pong"
    ping_event_id: str | None = None
    client_ts: float | None = None


class MetricsEvent(ServerEvent):
    """Live session numbers for the page's readouts; fields vary by app."""

    model_config = ConfigDict(extra="allow")
    type: Literal["metrics"] = "metrics"
