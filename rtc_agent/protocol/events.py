"""The event catalog of DESIGN.md section 4 as typed classes.

Every event is a JSON object with ``type`` and ``event_id``; server events also carry ``session_ms``. The channel
that sends an event fills those two (see :func:`rtc_agent.protocol.codec.encode`), so the classes here carry only
the payload. Names and fields are a contract shared with the browser client, tests and benchmarks.
"""

from __future__ import annotations

from typing import Any, Literal

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


# --- client events -------------------------------------------------------------------------------------------

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


class InputAudioMuted(ClientEvent):
    """The page muted (or unmuted) its microphone: while muted no speech can come, so the app ends an utterance
    in progress now instead of waiting for a silence that a muted (possibly silent, DTX) track may never send."""

    type: Literal["input_audio.muted"] = "input_audio.muted"
    muted: bool


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


CLIENT_EVENTS: dict[str, type[ClientEvent]] = {
    cls.model_fields["type"].default: cls
    for cls in (ClientPing, ClientPong, SessionUpdate, VisionPrompt, ConversationItemCreate, ResponseCreate,
                ResponseCancel, InputAudioBufferAppend, InputAudioBufferCommit, InputAudioBufferClear,
                ConversationItemDelete, ConversationItemTruncate, RoomSignalClient, InputAudioMuted)
}


# --- common server events ------------------------------------------------------------------------------------

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
                       "internal_error", "peer_closed", "ice_failed", "setup_failed", "rate_limited")


class SessionEnded(ServerEvent):
    """The last event before the server closes a session.

    ``reason`` is one of :data:`SESSION_END_REASONS` (``heartbeat_lost``, ``max_duration``, ``server_shutdown``,
    ``connect_timeout``, ``deleted``, ``internal_error``, ``rate_limited``: the client kept sending past its
    per-connection budget; ``peer_closed``, ``ice_failed`` and ``setup_failed`` only reach a client whose channel
    is still open); ``message`` says it in words for the page.
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


# --- audio activity and output ---------------------------------------------------------------------------------

class SpeechStarted(ServerEvent):
    type: Literal["input_audio_buffer.speech_started"] = "input_audio_buffer.speech_started"
    audio_start_ms: int
    item_id: str | None = None


class SpeechStopped(ServerEvent):
    type: Literal["input_audio_buffer.speech_stopped"] = "input_audio_buffer.speech_stopped"
    audio_end_ms: int
    item_id: str | None = None


class OutputAudioStarted(ServerEvent):
    """An utterance started playing on the outgoing track."""

    type: Literal["output_audio_buffer.started"] = "output_audio_buffer.started"
    utterance_id: str
    response_id: str | None = None


class OutputAudioStopped(ServerEvent):
    """An utterance finished or was cleared; ``sent_ms`` is how much of it the peer actually got."""

    type: Literal["output_audio_buffer.stopped"] = "output_audio_buffer.stopped"
    utterance_id: str
    sent_ms: int
    cleared: bool = False
    response_id: str | None = None


# --- captions --------------------------------------------------------------------------------------------------

class CaptionPartial(ServerEvent):
    """``committed`` never changes once sent; ``tentative`` may. ``behind_ms``: audio received after
    ``audio_end_ms`` by the time this was sent (decodes falling behind show here)."""

    type: Literal["caption.partial"] = "caption.partial"
    segment_id: str
    committed: str
    tentative: str
    audio_start_ms: int
    audio_end_ms: int
    language: str | None = None
    behind_ms: int | None = None
    speaker: dict[str, str] | None = None  # app ``call``: {participant_id, name} of who spoke


class CaptionFinal(ServerEvent):
    type: Literal["caption.final"] = "caption.final"
    segment_id: str
    text: str
    audio_start_ms: int
    audio_end_ms: int
    language: str | None = None
    behind_ms: int | None = None
    speaker: dict[str, str] | None = None


class CaptionTranslation(ServerEvent):
    """App ``call``: a speaker's caption translated into a listener's ``listen_language`` (computed once per
    (speaker, language) and sent to every listener of that language). ``segment_id`` is the speaker's caption
    segment the text belongs to; pieces of one segment arrive in order."""

    type: Literal["caption.translation"] = "caption.translation"
    segment_id: str
    speaker: dict[str, str]
    language: str
    text: str
    audio_start_ms: int | None = None
    audio_end_ms: int | None = None


# --- visual commentary -----------------------------------------------------------------------------------------

class VisionRoundStarted(ServerEvent):
    type: Literal["vision.round.started"] = "vision.round.started"
    round_id: str
    prompt: str | None = None


class VisionTextDelta(ServerEvent):
    type: Literal["vision.text.delta"] = "vision.text.delta"
    round_id: str
    delta: str
    frame_ts: float | None = None


class VisionSilence(ServerEvent):
    type: Literal["vision.silence"] = "vision.silence"
    frame_ts: float | None = None


class VisionRoundEnded(ServerEvent):
    type: Literal["vision.round.ended"] = "vision.round.ended"
    round_id: str


class VisionFrameDropped(ServerEvent):
    type: Literal["vision.frame.dropped"] = "vision.frame.dropped"
    frame_ts: float | None = None
    dropped: int = 1


# --- interpretation --------------------------------------------------------------------------------------------

class TranslationChunk(ServerEvent):
    type: Literal["translation.chunk"] = "translation.chunk"
    index: int
    action: Literal["EMIT", "WAIT", "SKIP"]
    text: str
    source_text: str | None = None
    audio_start_ms: int
    audio_end_ms: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stop_reason: str | None = None
    st_attempted: bool = False
    latency_ms: float | None = None
    speaker: dict[str, str] | None = None  # app ``call``: whose speech this interprets
    source_language: str | None = None  # the spoken language (chosen, or detected by Whisper once it is sure)


class TranslationFlush(ServerEvent):
    type: Literal["translation.flush"] = "translation.flush"
    trigger: Literal["empty_chunks", "silence", "end", "cut"]
    text: str
    audio_start_ms: int | None = None
    audio_end_ms: int | None = None
    speaker: dict[str, str] | None = None


class TranslationReset(ServerEvent):
    type: Literal["translation.reset"] = "translation.reset"
    reason: Literal["length", "budget", "window"]


class TranslationSpeechCatchup(ServerEvent):
    """The spoken translation fell behind and is catching up (or is back to normal).

    ``lag_ms``: how far behind the source the next speech would be heard; ``speed``: the TTS speed now (1.0 =
    normal); ``skipped_text``: text not spoken (``skip``); ``audio_end_ms``: the source position of that text.
    """

    type: Literal["translation.speech.catchup"] = "translation.speech.catchup"
    action: Literal["speed", "skip", "normal"]
    lag_ms: int
    speed: float = 1.0
    skipped_text: str = ""
    audio_end_ms: int | None = None


# --- voice agent (OpenAI Realtime names) -------------------------------------------------------------------------

class InputTranscriptionCompleted(ServerEvent):
    type: Literal["conversation.item.input_audio_transcription.completed"] = (
        "conversation.item.input_audio_transcription.completed"
    )
    item_id: str
    transcript: str


class ResponseCreated(ServerEvent):
    type: Literal["response.created"] = "response.created"
    response: dict[str, Any]


class ResponseAudioTranscriptDelta(ServerEvent):
    type: Literal["response.output_audio_transcript.delta"] = "response.output_audio_transcript.delta"
    response_id: str
    delta: str
    item_id: str | None = None


class FunctionCallArgumentsDone(ServerEvent):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    call_id: str
    name: str
    arguments: str
    response_id: str | None = None


class ResponseDone(ServerEvent):
    type: Literal["response.done"] = "response.done"
    response: dict[str, Any]


class ConversationItemCreated(ServerEvent):
    """An item entered the conversation (a user text message, a tool result)."""

    type: Literal["conversation.item.created"] = "conversation.item.created"
    item: dict[str, Any]


class ResponseTextDelta(ServerEvent):
    """Reply text of a response without speech (agent config ``output: "text"``)."""

    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    response_id: str
    delta: str
    item_id: str | None = None


class InputAudioBufferCommitted(ServerEvent):
    """The client committed its input audio (``input_audio_buffer.commit``): it becomes user item ``item_id``."""

    type: Literal["input_audio_buffer.committed"] = "input_audio_buffer.committed"
    item_id: str
    previous_item_id: str | None = None
    audio_start_ms: int | None = None
    audio_end_ms: int | None = None


class InputAudioBufferCleared(ServerEvent):
    type: Literal["input_audio_buffer.cleared"] = "input_audio_buffer.cleared"


class ConversationItemDeleted(ServerEvent):
    type: Literal["conversation.item.deleted"] = "conversation.item.deleted"
    item_id: str


class ConversationItemTruncated(ServerEvent):
    type: Literal["conversation.item.truncated"] = "conversation.item.truncated"
    item_id: str
    audio_end_ms: int
    content_index: int = 0


# --- calls (app ``call``) ------------------------------------------------------------------------------------------

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


SERVER_EVENTS: dict[str, type[ServerEvent]] = {
    cls.model_fields["type"].default: cls for cls in ServerEvent.__subclasses__()
}
