"""The agent's client events: session updates, conversation items, the input audio buffer and responses.

:class:`ClientEvents` is a mixin of :class:`~rtc_agent.apps.agent.app.AgentApp` (it uses the app's conversation,
tools, config and turn machinery). Contracts, per event:

- ``session.update``: ``instructions``, ``tools`` (browser tools; with ``tools_replace_server`` they may take
  the names of built-in server tools) and ``config`` (any of :data:`~rtc_agent.apps.agent.config.LIVE_KEYS`); all
  checked before anything changes, answered with ``session.updated``.
- ``conversation.item.create``: a user, system or assistant text message (optionally after ``previous_item_id``,
  ``"root"`` for first), or a ``function_call_output`` for a browser tool. With ``browser_tool_calls:
  "end_response"`` an output nobody waits for becomes a tool item for the next response.
- ``conversation.item.delete`` / ``.truncate``: remove an item; cut an assistant item to what the client played.
- ``input_audio_buffer.commit`` / ``.clear``: the audio since the last commit (or turn) becomes a user item, which
  is transcribed; or it is dropped. ``commit`` needs at least ``MIN_COMMIT_MS`` of audio.
- ``response.create``: a response now, with per-response ``instructions``, ``max_output_tokens``,
  ``output_modalities``, ``tool_choice``, ``metadata`` and ``conversation: "none"`` (out of band: its items are
  not kept). It waits for committed audio still being transcribed. ``response.cancel`` stops the current one.

Every refusal is an :class:`~rtc_agent.errors.InvalidRequest` (an ``error`` event; the session goes on).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from rtc_agent.apps.agent.config import LIVE_KEYS, validate_agent_config
from rtc_agent.apps.agent.conversation import Item, new_item_id
from rtc_agent.apps.limits import show
from rtc_agent.engines.asr.base import TranscribeRequest
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
    SessionUpdate,
    SessionUpdated,
    VisionPrompt,
)

if TYPE_CHECKING:
    from rtc_agent.apps.agent.app import AgentApp

MIN_COMMIT_MS = 100
MESSAGE_ROLES = {"user": "input_text", "system": "input_text", "assistant": "output_text"}
RESPONSE_KEYS = frozenset({"instructions", "max_output_tokens", "output_modalities", "tool_choice", "metadata",
                           "conversation", "input"})


class ClientEvents:
    """Client-event handling of the agent app (a mixin: ``self`` is the :class:`AgentApp`)."""

    async def on_event(self: AgentApp, event: ClientEvent) -> None:
        if isinstance(event, SessionUpdate):
            self._update_session(event.session)
        elif isinstance(event, ConversationItemCreate):
            self._create_item(event.item, getattr(event, "previous_item_id", None))
        elif isinstance(event, ResponseCreate):
            overrides = self._response_overrides(event.response or {})
            self._cancel_response()
            self._respond_now(overrides)
        elif isinstance(event, ResponseCancel):
            if self._response_done() and not (self.responder and self.responder.playing):
                raise InvalidRequest("there is no response to cancel", code="no_active_response")
            self._cancel_response()
        elif isinstance(event, InputAudioBufferCommit):
            self._commit_buffer()
        elif isinstance(event, InputAudioBufferClear):
            self._buffer_start_ms = self.ring.end_ms
            self.ctx.emit(InputAudioBufferCleared())
        elif isinstance(event, ConversationItemDelete):
            if not self.conversation.delete(event.item_id):
                raise InvalidRequest(f"no item {show(event.item_id)} in the conversation", code="unknown_item")
            self.ctx.emit(ConversationItemDeleted(item_id=event.item_id))
        elif isinstance(event, ConversationItemTruncate):
            self._truncate(event.item_id, event.audio_end_ms)
        elif isinstance(event, VisionPrompt):
            if self.vision is None:
                raise InvalidRequest("visual commentary is off for this session", code="vision_unavailable")
            await self.vision.prompt(event.text)
        else:
            raise InvalidRequest(f"app {self.name!r} does not handle {event.type!r}", code="unsupported_event")

    # --- session ---

    def _update_session(self: AgentApp, session: dict[str, Any]) -> None:
        self.limits.instructions("session.instructions", session.get("instructions"))
        self.limits.tools_list("session.tools", session.get("tools"))
        if "instructions" in session and not isinstance(session["instructions"], str):
            raise InvalidRequest("instructions must be a string", code="invalid_config")
        changes = session.get("config") or {}
        if not isinstance(changes, dict) or set(changes) - LIVE_KEYS:
            fixed = sorted(set(changes) - LIVE_KEYS) if isinstance(changes, dict) else changes
            raise InvalidRequest(f"session.config may change only {sorted(LIVE_KEYS)}, not {show(fixed)}",
                                 code="invalid_config")
        config = validate_agent_config({**self.config, **changes}, self.ctx.settings) if changes else self.config
        declared = (self.tools.declare_browser_tools(session["tools"],
                                                     replace_server=bool(session.get("tools_replace_server")))
                    if "tools" in session else None)
        if "instructions" in session:
            config["instructions"] = self.conversation.instructions = session["instructions"]
        self._apply_config(config)
        self.ctx.emit(SessionUpdated(session={
            "config": {k: v for k, v in self.config.items() if k != "instructions"},
            "instructions": self.conversation.instructions,
            "tools": [t.realtime_spec() for t in self.tools.tools()],
            "browser_tools": [t.name for t in declared] if declared is not None else None,
            "tools_offered": self.offer_tools,
        }))

    # --- items ---

    def _create_item(self: AgentApp, item: dict[str, Any], previous_item_id: str | None = None) -> None:
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
        self.limits.text("conversation.item.create item.id", item.get("id"))
        kinds = (MESSAGE_ROLES[role], "text")
        text = " ".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
                        and p.get("type") in kinds).strip()
        if not text:
            raise InvalidRequest(f"a {role} message needs {MESSAGE_ROLES[role]} content", code="invalid_item")
        self.limits.text("conversation.item.create text", text)
        item_id = item.get("id") if isinstance(item.get("id"), str) and item.get("id") else new_item_id()
        if self.conversation.get(item_id) is not None:
            raise InvalidRequest(f"an item {show(item_id)} exists already", code="duplicate_item")
        try:
            created = self.conversation.add(Item(item_id, role, text), after=previous_item_id)
        except KeyError:
            raise InvalidRequest(f"no item {show(previous_item_id)} to insert after",
                                 code="unknown_previous_item") from None
        self.ctx.emit(ConversationItemCreated(item=created.realtime()))

    def _tool_output(self: AgentApp, item: dict[str, Any]) -> None:
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or output is None:
            raise InvalidRequest("function_call_output needs call_id and output", code="invalid_item")
        text = output if isinstance(output, str) else self.limits.json_text(output)
        self.limits.instructions("function_call_output output", text)
        if self.pending.resolve(call_id, output):
            return
        called = any(c.get("id") == call_id for i in self.conversation.items for c in i.tool_calls)
        answered = any(i.role == "tool" and i.call_id == call_id for i in self.conversation.items)
        if self.config["browser_tool_calls"] != "end_response" or not called or answered:
            raise InvalidRequest(f"no tool call {show(call_id)} is waiting for output", code="unknown_call")
        created = self.conversation.add(Item(new_item_id(), "tool", text, call_id=call_id))
        self.ctx.emit(ConversationItemCreated(item=created.realtime()))

    def _truncate(self: AgentApp, item_id: str, audio_end_ms: int) -> None:
        item = self.conversation.get(item_id)
        clauses = self._spoken.get(item_id)
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
        self.ctx.emit(ConversationItemTruncated(item_id=item_id, audio_end_ms=audio_end_ms))

    # --- input audio buffer ---

    def _commit_buffer(self: AgentApp) -> None:
        start, end = max(self._buffer_start_ms, self.ring.start_ms), self.ring.end_ms
        if end - start < MIN_COMMIT_MS:
            raise InvalidRequest(f"the input audio buffer holds {max(0, end - start)} ms; committing needs at "
                                 f"least {MIN_COMMIT_MS} ms", code="input_audio_buffer_commit_empty")
        audio = self.ring.slice(start, end)
        self._buffer_start_ms = end
        item_id = new_item_id()
        self.ctx.emit(InputAudioBufferCommitted(item_id=item_id, previous_item_id=self.conversation.last_id,
                                                audio_start_ms=start, audio_end_ms=end))
        item = self.conversation.add(Item(item_id, "user", ""))  # in place now; its text follows
        task = self.ctx.spawn(self._transcribe_commit(item, audio), "agent-commit")
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)

    async def _transcribe_commit(self: AgentApp, item: Item, audio: Any) -> None:
        language = self.config["language"]
        try:
            transcript = await self.ctx.worker.call("asr", TranscribeRequest(
                audio, language=None if language == "auto" else language, urgent=True))
        except AgentError as exc:
            self.ctx.emit(error_event(exc))
            return
        silent = transcript.looks_like_silence or transcript.looks_repetitive
        item.text = "" if silent else transcript.text.strip()
        self.ctx.emit(InputTranscriptionCompleted(item_id=item.id, transcript=item.text))

    # --- responses ---

    def _response_overrides(self: AgentApp, response: dict[str, Any]) -> dict[str, Any]:
        """Checked per-response options (OpenAI ``response.create`` names) as agent option values."""
        unknown = set(response) - RESPONSE_KEYS
        if unknown:
            raise InvalidRequest(f"unknown response fields {sorted(unknown)}", code="invalid_response")
        out: dict[str, Any] = {}
        if response.get("instructions") is not None:
            self.limits.instructions("response.instructions", response["instructions"])
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
            out["tool_choice"] = validate_agent_config({**self.config, "tool_choice": response["tool_choice"]},
                                                       self.ctx.settings)["tool_choice"]
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

    async def _await_commits(self: AgentApp) -> None:
        """Committed audio still being transcribed: a response needs its text."""
        if self._commits:
            await asyncio.gather(*list(self._commits), return_exceptions=True)
