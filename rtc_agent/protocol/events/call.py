"""The server events of app ``call``: who is in the room, and the browser-to-browser signaling it relays."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from rtc_agent.protocol.events.base import ServerEvent


class RoomJoined(ServerEvent):
    """The first event of a call session: who is in the room (``participants`` includes this participant)."""

    type: Literal["room.joined"] = "room.joined"
    room: str
    participant_id: str
    participants: list[dict[str, Any]]


class RoomParticipantJoined(ServerEvent):
    type: Literal["room.participant.joined"] = "room.participant.joined"
    room: str
    participant: dict[str, Any]


class RoomParticipantLeft(ServerEvent):
    type: Literal["room.participant.left"] = "room.participant.left"
    room: str
    participant_id: str
    name: str
    reason: str | None = None


class RoomParticipantUpdated(ServerEvent):
    """A participant changed its languages or muted/unmuted its microphone or camera."""

    type: Literal["room.participant.updated"] = "room.participant.updated"
    room: str
    participant: dict[str, Any]


class RoomSignal(ServerEvent):
    """Browser-to-browser signaling relayed by the server; ``from`` is set by the server (never the sender)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)
    type: Literal["room.signal"] = "room.signal"
    to: str
    from_: str = Field(alias="from")
    kind: Literal["offer", "answer", "candidate"]
    payload: Any = None
