"""The agent's client events, but ``session.update`` (the app applies its own configuration): conversation items,
the input audio buffer, responses and vision prompts.

:class:`ClientEventHandler` sees the app through :class:`AgentSession`, exactly what these events need of it.
Contracts, per event:

- ``conversation.item.create``: a user, system or assistant text message (optionally after ``previous_item_id``,
  ``"root"`` for first), or a ``function_call_output`` for a browser tool. With ``browser_tool_calls:
  "end_response"`` an output nobody waits for becomes a tool item for the next response.
- ``conversation.item.delete`` / ``.truncate``: remove an item; cut an assistant item to what the client played.
- ``input_audio_buffer.commit`` / ``.clear``: the audio since the last commit (or turn) becomes a user item, which
  is transcribed; or it is dropped. ``commit`` needs at least ``MIN_COMMIT_MS`` of audio.
- ``response.create``: a response now, with per-response ``instructions``, ``max_output_tokens``,
  ``output_modalities``, ``tool_choice``, ``metadata`` and ``conversation: "none"`` (out of band: its items are
  not kept). It waits for committed audio still being transcribed (:meth:`ClientEventHandler.wait_for_commits`).
  ``response.cancel`` stops the current one.
- ``vision.prompt``: a question about the camera, when visual commentary is on.

Every refusal is an :class:`~rtc_agent.errors.InvalidRequest` (an ``error`` event; the session goes on).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import numpy as np

from rtc_agent.apps.agent.browser_calls import PendingBrowserCalls
from rtc_agent.apps.agent.config import validate_agent_config
from rtc_agent.apps.agent.conversation import Conversation, Item, new_item_id
from rtc_agent.apps.agent.spoken_items import SpokenItems
from rtc_agent.apps.audio_ring import AudioRing
from rtc_agent.apps.base import AppContext
from rtc_agent.apps.limits import TextLimits, show
from rtc_agent.apps.vision_commentary import VisionCommentary
from rtc_agent.engines.asr.base import Transcript
from rtc_agent.engines.tts.stream import spoken_text
from rtc_agent.errors import AgentError, InvalidRequest
from rtc_agent.protocol import ClientEvent, error_event
from rtc_agent.protocol.events import (
    ConversationItemCreate,
    ConversationItemCreated,
    ConversationItemDelete,
    ConversationItemDeleted,
    ConversationItemTruncate,
    ConversationItemTruncated,
    InputAudioBufferClear,
    InputAudioBufferCleared,
    InputAudioBufferCommit,
    InputAudioBufferCommitted,
    InputTranscriptionCompleted,
    ResponseCancel,
    ResponseCreate,
    VisionPrompt,
)

__all__ = ["MIN_COMMIT_MS", "AgentSession", "ClientEventHandler"]

MIN_COMMIT_MS = 100
MESSAGE_ROLES = {"user": "input_text", "system": "input_text", "assistant": "output_text"}
RESPONSE_KEYS = frozenset({"instructions", "max_output_tokens", "output_modalities", "tool_choice", "metadata",
                           "conversation", "input"})


class AgentSession(Protocol):
    """What the client events need of the agent app (:class:`~rtc_agent.apps.agent.app.AgentApp` fits)."""

    ctx: AppContext
    config: dict[str, Any]  # the validated agent config
    limits: TextLimits
    conversation: Conversation
    pending: PendingBrowserCalls
    ring: AudioRing  # the recent input audio
    buffer_start_ms: int  # the input audio not yet part of a turn or a commit starts here
    spoken: SpokenItems
    vision: VisionCommentary | None

    @property
    def name(self) -> str: ...

    def responding(self) -> bool:
        """A response is being generated or its audio is playing."""
        ...

    def cancel_response(self) -> None: ...

    def respond_now(self, overrides: dict[str, Any]) -> None:
        """Start a response to the conversation as it is; ``overrides`` as :meth:`ClientEventHandler.handle`
        checks them."""
        ...

    async def transcribe(self, audio: np.ndarray) -> Transcript: ...


class ClientEventHandler:
    """Handles the agent's client events (all but ``session.update``) against ``app``; one per session."""

    def __init__(self, app: AgentSession) -> None:
        self.app = app
        self._commits: set[asyncio.Task] = set()  # committed audio being transcribed

    async def handle(self, event: ClientEvent) -> None:
        app = self.app
        if isinstance(event, ConversationItemCreate):
            self._create_item(event.item, getattr(event, "previous_item_id", None))
        elif isinstance(event, ResponseCreate):
            overrides = self._response_overrides(event.response or {})
            app.cancel_response()
            app.respond_now(overrides)
        elif isinstance(event, ResponseCancel):
            if not app.responding():
                raise InvalidRequest("there is no response to cancel", code="no_active_response")
            app.cancel_response()
        elif isinstance(event, InputAudioBufferCommit):
            self._commit_buffer()
        elif isinstance(event, InputAudioBufferClear):
            app.buffer_start_ms = app.ring.end_ms
            app.ctx.emit(InputAudioBufferCleared())
        elif isinstance(event, ConversationItemDelete):
            if not app.conversation.delete(event.item_id):
                raise InvalidRequest(f"no item {show(event.item_id)} in the conversation", code="unknown_item")
            app.ctx.emit(ConversationItemDeleted(item_id=event.item_id))
        elif isinstance(event, ConversationItemTruncate):
            self._truncate(event.item_id, event.audio_end_ms)
        elif isinstance(event, VisionPrompt):
            if app.vision is None:
                raise InvalidRequest("visual commentary is off for this session", code="vision_unavailable")
            await app.vision.prompt(event.text)
        else:
            raise InvalidRequest(f"app {app.name!r} does not handle {event.type!r}", code="unsupported_event")

    # --- items ---

    def _create_item(self, item: dict[str, Any], previous_item_id: str | None = None) -> None:
        app = self.app
        kind = item.get("type")
        if kind == "function_call_output":
            self._tool_output(item)
            return
        role = item.get("role", "user")
        if kind != "message" or role not in MESSAGE_ROLES:
            raise InvalidRequest("items may be user, system or assistant messages, or function_call_output",
                                 code="invalid_item")
        parts = item.get("content") or []
        if not isinstance(parts, list):
            raise InvalidRequest("a message's content must be a list of parts", code="invalid_item")
        app.limits.text("conversation.item.create item.id", item.get("id"))
        kinds = (MESSAGE_ROLES[role], "text")
        text = " ".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
                        and p.get("type") in kinds).strip()
        if not text:
            raise InvalidRequest(f"a {role} message needs {MESSAGE_ROLES[role]} content", code="invalid_item")
        app.limits.text("conversation.item.create text", text)
        item_id = item.get("id") if isinstance(item.get("id"), str) and item.get("id") else new_item_id()
        if app.conversation.get(item_id) is not None:
            raise InvalidRequest(f"an item {show(item_id)} exists already", code="duplicate_item")
        try:
            created = app.conversation.add(Item(item_id, role, text), after=previous_item_id)
        except KeyError:
            raise InvalidRequest(f"no item {show(previous_item_id)} to insert after",
                                 code="unknown_previous_item") from None
        app.ctx.emit(ConversationItemCreated(item=created.realtime()))

    def _tool_output(self, item: dict[str, Any]) -> None:
        app = self.app
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or output is None:
            raise InvalidRequest("function_call_output needs call_id and output", code="invalid_item")
        text = output if isinstance(output, str) else app.limits.json_text(output)
        app.limits.instructions("function_call_output output", text)
        if app.pending.resolve(call_id, output):
            return
        called = any(c.get("id") == call_id for i in app.conversation.items for c in i.tool_calls)
        answered = any(i.role == "tool" and i.call_id == call_id for i in app.conversation.items)
        if app.config["browser_tool_calls"] != "end_response" or not called or answered:
            raise InvalidRequest(f"no tool call {show(call_id)} is waiting for output", code="unknown_call")
        created = app.conversation.add(Item(new_item_id(), "tool", text, call_id=call_id))
        app.ctx.emit(ConversationItemCreated(item=created.realtime()))

    def _truncate(self, item_id: str, audio_end_ms: int) -> None:
        app = self.app
        item = app.conversation.get(item_id)
        clauses = app.spoken.clauses(item_id)
        if item is None or item.role != "assistant":
            raise InvalidRequest(f"no assistant item {show(item_id)} in the conversation", code="unknown_item")
        if clauses is None:
            raise InvalidRequest(f"the audio of item {show(item_id)} is no longer known", code="item_not_audio")
        total_ms = int(sum(c.duration_s for c in clauses) * 1000)
        if audio_end_ms > total_ms:
            raise InvalidRequest(f"audio_end_ms {audio_end_ms} is past the item's audio ({total_ms} ms)",
                                 code="invalid_audio_end_ms")
        item.text = spoken_text(clauses, audio_end_ms / 1000)
        item.truncated = True
        app.ctx.emit(ConversationItemTruncated(item_id=item_id, audio_end_ms=audio_end_ms))

    # --- input audio buffer ---

    def _commit_buffer(self) -> None:
        app = self.app
        start, end = max(app.buffer_start_ms, app.ring.start_ms), app.ring.end_ms
        if end - start < MIN_COMMIT_MS:
            raise InvalidRequest(f"the input audio buffer holds {max(0, end - start)} ms; committing needs at "
                                 f"least {MIN_COMMIT_MS} ms", code="input_audio_buffer_commit_empty")
        audio = app.ring.slice(start, end)
        app.buffer_start_ms = end
        item_id = new_item_id()
        app.ctx.emit(InputAudioBufferCommitted(item_id=item_id, previous_item_id=app.conversation.last_id,
                                               audio_start_ms=start, audio_end_ms=end))
        item = app.conversation.add(Item(item_id, "user", ""))  # in place now; its text follows
        task = app.ctx.spawn(self._transcribe_commit(item, audio), "agent-commit")
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)

    async def _transcribe_commit(self, item: Item, audio: np.ndarray) -> None:
        app = self.app
        try:
            transcript = await app.transcribe(audio)
        except AgentError as exc:
            app.ctx.emit(error_event(exc))
            return
        silent = transcript.looks_like_silence or transcript.looks_repetitive
        item.text = "" if silent else transcript.text.strip()
        app.ctx.emit(InputTranscriptionCompleted(item_id=item.id, transcript=item.text))

    # --- responses ---

    def _response_overrides(self, response: dict[str, Any]) -> dict[str, Any]:
        """Checked per-response options (OpenAI ``response.create`` names) as agent option values."""
        app = self.app
        unknown = set(response) - RESPONSE_KEYS
        if unknown:
            raise InvalidRequest(f"unknown response fields {sorted(unknown)}", code="invalid_response")
        out: dict[str, Any] = {}
        if response.get("instructions") is not None:
            app.limits.instructions("response.instructions", response["instructions"])
            if not isinstance(response["instructions"], str):
                raise InvalidRequest("response.instructions must be a string", code="invalid_response")
            out["instructions"] = response["instructions"]
        tokens = response.get("max_output_tokens")
        if tokens is not None and tokens != "inf":
            if not isinstance(tokens, int) or isinstance(tokens, bool) or not 1 <= tokens <= 4096:
                raise InvalidRequest("max_output_tokens must be 1-4096 or 'inf'", code="invalid_response")
            out["max_tokens"] = tokens
        modalities = response.get("output_modalities")
        if modalities is not None:
            if modalities not in (["audio"], ["text"]):
                raise InvalidRequest("output_modalities must be ['audio'] or ['text']", code="invalid_response")
            out["output"] = modalities[0]
        if response.get("tool_choice") is not None:
            out["tool_choice"] = validate_agent_config({**app.config, "tool_choice": response["tool_choice"]},
                                                       app.ctx.settings)["tool_choice"]
        if response.get("metadata") is not None:
            if not isinstance(response["metadata"], dict) or len(response["metadata"]) > 16:
                raise InvalidRequest("metadata must be an object of at most 16 keys", code="invalid_response")
            out["metadata"] = response["metadata"]
        if response.get("input"):
            raise InvalidRequest("response.input is not supported", code="unsupported_parameter")
        if response.get("conversation") not in (None, "auto", "none"):
            raise InvalidRequest("response.conversation must be 'auto' or 'none'", code="invalid_response")
        out["keep"] = response.get("conversation") != "none"
        return out

    async def wait_for_commits(self) -> None:
        """Until the committed audio is transcribed (a response needs its text)."""
        if self._commits:
            await asyncio.gather(*list(self._commits), return_exceptions=True)
