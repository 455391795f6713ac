"""The server events of app ``call``: who is in the room, and the browser-to-browser signaling it relays."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from rtc_agent.protocol.events.base import ServerEvent


class RoomJoined(ServerEvent):
    """The first event of a call session: who is in the room (``participants`` includes this participant).

    ``mode`` is ``mesh`` (browser to browser) or ``sfu`` (media through the SFU). SFU rooms only (null in a mesh):
    ``listener_count`` and ``sfu {url, room, token, display, interpreter_feeds: {lang: feed_id}}``: where the page
    reaches the SFU, the SFU room id, this participant's join token, the display name it must publish under (its
    participant id) and the interpreter feeds published now. In an SFU room ``participants`` lists the speakers
    and this participant, and the listeners only while there are at most 20 of them."""

    type: Literal["room.joined"] = "room.joined"
    room: str
    participant_id: str
    participants: list[dict[str, Any]]
    mode: Literal["mesh", "sfu"] = "mesh"
    listener_count: int | None = None
    sfu: dict[str, Any] | None = None


class RoomSfuUpdated(ServerEvent):
    """An SFU room's interpreter feeds (listen language -> Janus feed id), its listener count or rtc-agent's
    connection to the SFU changed. ``sfu_state``: ``connected``; ``reconnecting`` (the connection dropped: no
    captions of SFU audio and no interpreter feeds until it is back); ``lost`` (every reconnect failed).
    ``reconnects`` counts the reconnects that succeeded (new feed ids come with each)."""

    type: Literal["room.sfu.updated"] = "room.sfu.updated"
    room: str
    interpreter_feeds: dict[str, int]
    listener_count: int
    sfu_state: Literal["connected", "reconnecting", "lost"] = "connected"
    reconnects: int = 0


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
