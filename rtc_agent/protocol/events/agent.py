"""The server events of the voice agent, under their OpenAI Realtime names."""

from __future__ import annotations

from typing import Any, Literal

from rtc_agent.protocol.events.base import ServerEvent


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
