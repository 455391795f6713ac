"""``RealtimeAdapter``: one OpenAI Realtime session over an app, both ways, for either transport.

Client side: :meth:`RealtimeAdapter.client` checks one GA client event and says what to do with it
(:class:`ClientAction`): events to answer at once (``conversation.item.retrieve``), native client events for the
app (:mod:`rtc_agent.protocol.events`), input audio bytes (WebSocket ``input_audio_buffer.append``), or clearing
the output track (WebRTC ``output_audio_buffer.clear``). A refused event raises
:class:`~rtc_agent.realtime.events.RealtimeError` carrying its ``event_id``; the transport sends
:meth:`RealtimeAdapter.error` and goes on. ``session.update`` is validated whole before the app sees it, so the
adapter's :class:`SessionConfig` and the app's config move together; an update the app still refuses (its own
limits: instructions length, tool schemas) is taken back when its ``error`` goes out (:meth:`RealtimeAdapter.error`).

Server side: :meth:`RealtimeAdapter.server` turns one native event into stamped GA events
(:mod:`rtc_agent.realtime.mapping`). Every GA event gets a fresh ``event_id``. The GA API has no
``session.ended``: a session the server ends (shutdown, maximum duration, rate limit, ...) says so with a last
GA ``error`` whose ``code`` is the reason (``session_expired`` for the maximum duration, as OpenAI's), see
:data:`ENDED_ERRORS`; ends the client asked for (``deleted``) or caused by its leaving (``peer_closed``) are silent.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rtc_agent.protocol import ClientEvent, ServerEvent
from rtc_agent.protocol.events import (
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemTruncate,
    InputAudioBufferClear,
    InputAudioBufferCommit,
    ResponseCancel,
    ResponseCreate,
    SessionUpdate,
)
from rtc_agent.realtime.audio import decode_base64
from rtc_agent.realtime.events import RealtimeError, error_body, new_id, parse_client_event
from rtc_agent.realtime.mapping import Translator
from rtc_agent.realtime.session_config import SessionConfig
from rtc_agent.realtime.transcription_mapping import TranscriptionTranslator

__all__ = ["MAX_EVENT_BYTES", "ClientAction", "RealtimeAdapter", "serving_app"]

MAX_EVENT_BYTES = 4 * 1024 * 1024  # one client event (about 60 s of 24 kHz PCM16 in base64)
RESPONSE_FIELDS = frozenset({"instructions", "max_output_tokens", "output_modalities", "tool_choice", "metadata",
                             "conversation", "input", "audio", "reasoning", "parallel_tool_calls", "tools",
                             "prompt"})
RESPONSE_IGNORED = frozenset({"audio", "reasoning", "parallel_tool_calls"})  # accepted, not applied
RESPONSE_UNSUPPORTED = frozenset({"tools", "prompt"})
MESSAGE_PARTS = {"user": ("input_text",), "system": ("input_text",), "assistant": ("output_text", "output_audio")}
MAX_PENDING_UPDATES = 64  # session.update events the app has neither applied nor refused yet
#: reasons of a server-side end -> (error type, code) of the GA ``error`` that announces it
ENDED_ERRORS = {
    "server_shutdown": ("server_error", "server_shutdown"),
    "internal_error": ("server_error", "internal_error"),
    "max_duration": ("invalid_request_error", "session_expired"),
    "rate_limited": ("rate_limit_error", "rate_limited"),
    "slow_client": ("invalid_request_error", "slow_client"),
    "heartbeat_lost": ("invalid_request_error", "heartbeat_lost"),
    "connect_timeout": ("invalid_request_error", "connect_timeout"),
}


@dataclass
class ClientAction:
    """What one client event asks of the transport, in this order: ``replies``, ``audio``, ``native``."""

    replies: list[dict[str, Any]] = field(default_factory=list)
    native: list[ClientEvent] = field(default_factory=list)
    audio: bytes | None = None
    clear_output: bool = False
    event_id: str | None = None  # the client event's own id (for errors found later, e.g. undecodable audio)


def _native_item(item: dict[str, Any]) -> dict[str, Any]:
    """A GA ``conversation.item.create`` item as the agent takes it (text messages, function_call_output)."""
    kind = item.get("type")
    out: dict[str, Any] = {"id": item["id"]} if isinstance(item.get("id"), str) and item["id"] else {}
    if kind == "function_call_output":
        if not isinstance(item.get("call_id"), str) or not isinstance(item.get("output"), str):
            raise RealtimeError("a function_call_output needs string 'call_id' and 'output'", param="item.output",
                                code="missing_required_parameter")
        return {**out, "type": kind, "call_id": item["call_id"], "output": item["output"]}
    if kind != "message":
        raise RealtimeError(f"items of type {str(kind)[:30]!r} cannot be created here (messages and "
                            "function_call_output only)", param="item.type", code="unsupported_parameter")
    role = item.get("role")
    if role not in MESSAGE_PARTS:
        raise RealtimeError("role must be 'user', 'system' or 'assistant'", param="item.role")
    content = item.get("content")
    if not isinstance(content, list) or not content:
        raise RealtimeError("a message needs a list of content parts", param="item.content",
                            code="missing_required_parameter")
    parts = []
    for i, part in enumerate(content):
        ptype = part.get("type") if isinstance(part, dict) else None
        if ptype not in MESSAGE_PARTS[role]:
            raise RealtimeError(f"{role} content parts of type {str(ptype)[:30]!r} are not supported "
                                f"({' or '.join(MESSAGE_PARTS[role])})", param=f"item.content[{i}].type",
                                code="unsupported_parameter")
        text = part.get("text", part.get("transcript"))
        if not isinstance(text, str):
            raise RealtimeError("a text part needs a string 'text'", param=f"item.content[{i}].text")
        parts.append({"type": "output_text" if role == "assistant" else "input_text", "text": text})
    return {**out, "type": "message", "role": role, "content": parts}


class RealtimeAdapter:
    """The GA surface of one session (see the module docstring).

    ``transport`` is ``"websocket"`` or ``"webrtc"``; ``take_audio(response_id)`` hands over the base64 reply
    audio written since the last call (WebSocket only).
    """

    def __init__(self, config: SessionConfig, *, session_id: str, settings: Any, transport: str,
                 take_audio: Callable[[str], list[str]] | None = None,
                 max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.config = config
        self.session_id = session_id
        self.settings = settings
        self.transport = transport
        self.max_event_bytes = max_event_bytes
        limit = getattr(settings, "max_session_seconds", 0)
        expires_at = int(time.time() + limit) if limit else None
        self.translator: Translator | TranscriptionTranslator = (
            Translator(lambda: self.config, session_id, take_audio=take_audio, expires_at=expires_at)
            if config.kind == "realtime" else
            TranscriptionTranslator(lambda: self.config, session_id, expires_at=expires_at))
        #: session.update events handed to the app and not yet answered, by the native event's own id:
        #: (the client's event_id, the config before it, the client's session object)
        self._updates: OrderedDict[str, tuple[str | None, SessionConfig, dict[str, Any]]] = OrderedDict()

    @staticmethod
    def stamp(event: dict[str, Any]) -> dict[str, Any]:
        return {"type": event["type"], "event_id": new_id("event"), **event}

    def server(self, event: ServerEvent) -> list[dict[str, Any]]:
        """The stamped GA events for one native server event."""
        if event.type == "session.updated" and self._updates:  # the app applied the oldest update
            self._updates.popitem(last=False)
        if event.type == "session.ended":
            return [self.ended(event.reason, event.message)] if event.reason in ENDED_ERRORS else []
        out = [self.stamp(e) for e in self.translator.translate(event)]
        for e in out:
            if e["type"] == "error" and e["error"].get("event_id") in self._updates:
                e["error"]["event_id"] = self._refused(e["error"]["event_id"])
        return out

    def ended(self, reason: str, message: str) -> dict[str, Any]:
        """The stamped GA ``error`` that announces a server-side end for ``reason`` (see :data:`ENDED_ERRORS`)."""
        kind, code = ENDED_ERRORS.get(reason, ("server_error", reason))
        return self.stamp({"type": "error", "error": {"type": kind, "code": code, "message": message,
                                                      "param": None, "event_id": None}})

    def error(self, exc: Exception, event_id: str | None = None) -> dict[str, Any]:
        """The stamped GA ``error`` event for ``exc`` (``event_id``: the client event at fault, or the id of a
        native ``session.update`` the app refused: the session config goes back to what the app has)."""
        return self.stamp(error_body(exc, self._refused(event_id)))

    def _refused(self, event_id: str | None) -> str | None:
        """The client's ``event_id`` for ``event_id``; when it names a pending ``session.update``, that update
        is taken back: the config is rebuilt from the one before it with the later pending updates reapplied
        (each of those is answered by the app in turn, and taken back too if refused)."""
        if event_id not in self._updates:
            return event_id
        client_id, config, _ = self._updates.pop(event_id)
        for ref, (later_id, _before, update) in list(self._updates.items()):
            self._updates[ref] = (later_id, config, update)
            with contextlib.suppress(RealtimeError):
                config = config.updated(update)
        self.config = config
        return client_id

    def client(self, raw: str | bytes) -> ClientAction:
        """Check one client message; see :class:`ClientAction`. Raises :class:`RealtimeError`."""
        data = parse_client_event(raw, max_bytes=self.max_event_bytes)
        try:
            action = self._dispatch(data)
            action.event_id = data.get("event_id")
            return action
        except RealtimeError as exc:
            exc.event_id = exc.event_id or data.get("event_id")
            raise

    def _dispatch(self, data: dict[str, Any]) -> ClientAction:
        kind, event_id = data["type"], data.get("event_id")
        realtime = self.config.kind == "realtime"
        if kind == "session.update":
            before, after = self.config, self.config.updated(data["session"])
            update = after.native_update(before, self.settings)
            # the config moves now (later events use it); if the app refuses the update, _refused takes it back
            self.config, ref = after, new_id("event")
            self._updates[ref] = (event_id, before, data["session"])
            while len(self._updates) > MAX_PENDING_UPDATES:
                self._updates.popitem(last=False)
            return ClientAction(native=[SessionUpdate(session=update, event_id=ref)])
        if kind == "input_audio_buffer.append":
            if self.transport != "websocket":
                raise RealtimeError("over WebRTC the input audio travels on the audio track, not in events",
                                    param="type", code="unsupported_parameter")
            try:
                return ClientAction(audio=decode_base64(data["audio"]))
            except ValueError as exc:
                raise RealtimeError(f"Invalid 'audio': {exc}", param="audio") from None
        if kind == "input_audio_buffer.commit":
            return ClientAction(native=[InputAudioBufferCommit(event_id=event_id)])
        if kind == "input_audio_buffer.clear":
            return ClientAction(native=[InputAudioBufferClear(event_id=event_id)])
        if kind == "output_audio_buffer.clear":
            if self.transport != "webrtc":
                raise RealtimeError("output_audio_buffer.clear is for WebRTC sessions; over a WebSocket the "
                                    "client plays (and stops) the audio itself", param="type",
                                    code="unsupported_parameter")
            return ClientAction(clear_output=True)
        if kind == "conversation.item.retrieve":
            item = self.translator.items.get(data["item_id"])
            if item is None:
                raise RealtimeError(f"Item with item_id {data['item_id'][:64]!r} not found", param="item_id")
            return ClientAction(replies=[self.stamp({"type": "conversation.item.retrieved", "item": item})])
        if not realtime:
            if kind == "conversation.item.delete" and self.translator.items.pop(data["item_id"], None) is not None:
                return ClientAction(replies=[self.stamp({"type": "conversation.item.deleted",
                                                         "item_id": data["item_id"]})])
            raise RealtimeError(f"{kind} is not available in a transcription session", param="type",
                                code="unsupported_parameter")
        return self._conversation(kind, data, event_id)

    def _conversation(self, kind: str, data: dict[str, Any], event_id: str | None) -> ClientAction:
        translator = self.translator
        assert isinstance(translator, Translator)
        if kind == "conversation.item.create":
            item = _native_item(data["item"])
            return ClientAction(native=[ConversationItemCreate(item=item, event_id=event_id,
                                                               previous_item_id=data.get("previous_item_id"))])
        if kind == "conversation.item.delete":
            return ClientAction(native=[ConversationItemDelete(item_id=data["item_id"], event_id=event_id)])
        if kind == "conversation.item.truncate":
            if data["content_index"] != 0:
                raise RealtimeError("assistant items have one content part: content_index must be 0",
                                    param="content_index")
            translator.truncations.add(data["item_id"])
            return ClientAction(native=[ConversationItemTruncate(item_id=data["item_id"], event_id=event_id,
                                                                 audio_end_ms=data["audio_end_ms"])])
        if kind == "response.create":
            translator.cancel_requested = bool(translator.responses)  # a new response replaces the current one
            return ClientAction(native=[ResponseCreate(response=self._response(data.get("response") or {}),
                                                       event_id=event_id)])
        translator.cancel_requested = bool(translator.responses)  # response.cancel
        return ClientAction(native=[ResponseCancel(response_id=data.get("response_id"), event_id=event_id)])

    @staticmethod
    def _response(response: dict[str, Any]) -> dict[str, Any]:
        for key in response:
            if key not in RESPONSE_FIELDS:
                raise RealtimeError(f"Unknown parameter: 'response.{key}'.", param=f"response.{key}",
                                    code="unknown_parameter")
            if key in RESPONSE_UNSUPPORTED and response[key] not in (None, []):
                raise RealtimeError(f"response.{key} is not supported by this server (set it on the session)",
                                    param=f"response.{key}", code="unsupported_parameter")
        return {k: v for k, v in response.items() if k not in RESPONSE_IGNORED | RESPONSE_UNSUPPORTED}


def serving_app(config: SessionConfig, settings: Any) -> tuple[type, dict[str, Any]]:
    """The app class that serves ``config`` (``agent`` for realtime, ``captions`` for transcription) and its
    validated configuration. Raises :class:`~rtc_agent.errors.InvalidRequest` like the app's own validation."""
    from rtc_agent.apps import AgentApp, CaptionsApp  # the apps import much; only the routes need them

    if config.kind == "realtime":
        return AgentApp, AgentApp.validate_config(config.agent_config(settings), settings)
    return CaptionsApp, CaptionsApp.validate_config(config.captions_config(settings), settings)
