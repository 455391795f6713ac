"""The two roots of the event catalogue, :class:`ClientEvent` and :class:`ServerEvent`.

Every event is a JSON object with ``type`` and ``event_id``; server events also carry ``session_ms``. The channel
that sends an event fills those two (see :func:`rtc_agent.protocol.codec.encode`), so the event classes carry only
the payload. Names and fields are a contract shared with the browser client, tests and benchmarks.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ClientEvent(BaseModel):
    """An event a client sends. Unknown extra fields are ignored; declared fields are validated."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    type: str
    event_id: str | None = Field(default=None, max_length=128)


class ServerEvent(BaseModel):
    """An event the server sends. ``type`` is fixed per class."""

    model_config = ConfigDict(extra="forbid")
    type: str
