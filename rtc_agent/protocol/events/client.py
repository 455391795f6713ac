"""The events a client sends (DESIGN.md section 4), in the order of the client catalogue."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rtc_agent.protocol.events.base import ClientEvent


class ClientPing(ClientEvent):
    type: Literal["ping"] = "ping"
    client_ts: float | None = None


class ClientPong(ClientEvent):
    type: Literal["pong"] = "pong"
    ping_event_id: str | None = None


class SessionUpdate(ClientEvent):
    """Change session configuration; also how a page announces its browser tools."""

    type: Literal["session.update"] = "session.update"
    session: dict[str, Any]


class VisionPrompt(ClientEvent):
    type: Literal["vision.prompt"] = "vision.prompt"
    text: str = Field(min_length=1, max_length=4000)


class ConversationItemCreate(ClientEvent):
    """A user text message, or ``{"type": "function_call_output", "call_id", "output"}`` for a browser tool."""

    type: Literal["conversation.item.create"] = "conversation.item.create"
    item: dict[str, Any]
    previous_item_id: str | None = Field(default=None, max_length=128)


class ResponseCreate(ClientEvent):
    type: Literal["response.create"] = "response.create"
    response: dict[str, Any] | None = None


class ResponseCancel(ClientEvent):
    type: Literal["response.cancel"] = "response.cancel"
    response_id: str | None = None


class InputAudioBufferAppend(ClientEvent):
    """Base64 PCM16 audio (WebSocket API only; WebRTC sessions send audio on the track)."""

    type: Literal["input_audio_buffer.append"] = "input_audio_buffer.append"
    audio: str


class InputAudioBufferCommit(ClientEvent):
    type: Literal["input_audio_buffer.commit"] = "input_audio_buffer.commit"


class InputAudioBufferClear(ClientEvent):
    type: Literal["input_audio_buffer.clear"] = "input_audio_buffer.clear"


class ConversationItemDelete(ClientEvent):
    """Remove an item from the agent's conversation (it no longer reaches the model)."""

    type: Literal["conversation.item.delete"] = "conversation.item.delete"
    item_id: str = Field(min_length=1, max_length=128)


class ConversationItemTruncate(ClientEvent):
    """Cut an assistant item to what the client actually played (``audio_end_ms`` into its audio)."""

    type: Literal["conversation.item.truncate"] = "conversation.item.truncate"
    item_id: str = Field(min_length=1, max_length=128)
    content_index: int = Field(default=0, ge=0)
    audio_end_ms: int = Field(ge=0)


class RoomSignalClient(ClientEvent):
    """Browser-to-browser media signaling (app ``call``): relayed by the server to participant ``to``."""

    type: Literal["room.signal"] = "room.signal"
    to: str = Field(min_length=1, max_length=64)
    kind: Literal["offer", "answer", "candidate"]
    payload: Any = None


class RoomHand(ClientEvent):
    """A participant of an SFU room raises or lowers its hand (``room.participant.updated`` with ``hand_raised``)."""

    type: Literal["room.hand"] = "room.hand"
    raised: bool


class InputAudioMuted(ClientEvent):
    """The page muted (or unmuted) its microphone: while muted no speech can come, so the app ends an utterance
    in progress now instead of waiting for a silence that a muted (possibly silent, DTX) track may never send."""

    type: Literal["input_audio.muted"] = "input_audio.muted"
    muted: bool
