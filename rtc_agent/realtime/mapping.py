"""Native server events -> OpenAI Realtime (GA) server events: the one place the two vocabularies meet.

:class:`Translator` serves ``type: realtime`` sessions (the agent app; ``type: transcription`` sessions are
:mod:`rtc_agent.realtime.transcription_mapping`'s). It turns one native event into the GA events it means (dicts
without ``event_id``), keeping the state GA needs and the native stream does not carry:

- a response's items: the agent speaks clause by clause (``response.output_audio_transcript.delta`` per clause);
  the first delta of an item opens it (``response.output_item.added``, ``conversation.item.added``,
  ``response.content_part.added``), ``response.done`` closes it (``response.output_audio.done``,
  ``response.output_audio_transcript.done``, ``response.content_part.done``, ``response.output_item.done``,
  ``conversation.item.done``). Over a WebSocket the audio written for a clause (``take_audio``) goes out as
  ``response.output_audio.delta`` right before the clause's transcript delta; over WebRTC it is on the track.
- tool calls: calls of the client's own tools become ``function_call`` items with
  ``response.function_call_arguments.delta`` / ``.done``; the server's built-in tools run inside the response and
  are not shown (their results neither).
- user turns: a VAD turn's item is committed when its transcript is known (``input_audio_buffer.committed``,
  ``conversation.item.added``, the transcription events when the session asks for them, ``conversation.item.done``).
- a GA mirror of the conversation (:attr:`Translator.items`) for ``conversation.item.retrieve``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rtc_agent.protocol import ServerEvent
from rtc_agent.realtime.events import new_id
from rtc_agent.realtime.items import ConversationMirror, Events, error_events, ga_item, user_item
from rtc_agent.realtime.session_config import SessionConfig

__all__ = ["Translator"]

NOMINAL_LIMITS = [{"name": "requests", "limit": 1000, "remaining": 999, "reset_seconds": 60.0},
                  {"name": "tokens", "limit": 100000, "remaining": 100000, "reset_seconds": 60.0}]


@dataclass
class _Open:
    """The item of a response being written now."""

    item: dict[str, Any]
    index: int  # output_index
    part: str  # "audio" | "text"
    text: list[str] = field(default_factory=list)


@dataclass
class _Response:
    id: str
    modality: str
    metadata: Any = None
    output: list[dict[str, Any]] = field(default_factory=list)
    open: _Open | None = None


class Translator:
    """Native agent events -> GA events for one ``type: realtime`` session (see the module docstring).

    ``config`` returns the session's current :class:`SessionConfig`; ``take_audio(response_id)`` the base64
    audio chunks written since the last call (WebSocket only; None over WebRTC).
    """

    def __init__(self, config: Callable[[], SessionConfig], session_id: str, *,
                 take_audio: Callable[[str], list[str]] | None = None, expires_at: int | None = None) -> None:
        self.config = config
        self.session_id = session_id
        self.expires_at = expires_at
        self.take_audio = take_audio
        self.mirror = ConversationMirror()
        self.responses: dict[str, _Response] = {}
        self.hidden_calls: set[str] = set()  # server tool calls: their outputs are not shown either
        self.committed: set[str] = set()  # user items already announced (manual commits)
        self.turns: OrderedDict[str, list[int | None]] = OrderedDict()  # user item -> [start_ms, end_ms]
        self.truncations: set[str] = set()  # items the client asked to truncate (WebSocket)
        self.cancel_requested = False  # the next cancelled response was the client's doing

    @property
    def items(self) -> OrderedDict[str, dict[str, Any]]:
        return self.mirror.items

    def translate(self, event: ServerEvent) -> Events:
        handler = getattr(self, "_" + event.type.replace(".", "_"), None)
        return handler(event.model_dump()) if handler is not None else []

    # --- session and errors ---

    def _session_created(self, e: dict[str, Any]) -> Events:
        return [{"type": "session.created", "session": self.config().render(self.session_id, self.expires_at)}]

    def _session_updated(self, e: dict[str, Any]) -> Events:
        return [{"type": "session.updated", "session": self.config().render(self.session_id, self.expires_at)}]

    def _error(self, e: dict[str, Any]) -> Events:
        return error_events(e)

    # --- input audio and user items ---

    def _input_audio_buffer_speech_started(self, e: dict[str, Any]) -> Events:
        item_id = e.get("item_id") or new_id("item")
        self.turns[item_id] = [e["audio_start_ms"], None]
        while len(self.turns) > 64:  # turns that never got a transcript (silence)
            self.turns.popitem(last=False)
        return [{"type": "input_audio_buffer.speech_started", "audio_start_ms": e["audio_start_ms"],
                 "item_id": item_id}]

    def _input_audio_buffer_speech_stopped(self, e: dict[str, Any]) -> Events:
        item_id = e.get("item_id") or new_id("item")
        self.turns.setdefault(item_id, [None, None])[1] = e["audio_end_ms"]
        return [{"type": "input_audio_buffer.speech_stopped", "audio_end_ms": e["audio_end_ms"], "item_id": item_id}]

    def _input_audio_buffer_committed(self, e: dict[str, Any]) -> Events:
        self.committed.add(e["item_id"])
        self.turns[e["item_id"]] = [e.get("audio_start_ms"), e.get("audio_end_ms")]
        return self.mirror.committed(e["item_id"])

    def _input_audio_buffer_cleared(self, e: dict[str, Any]) -> Events:
        return [{"type": "input_audio_buffer.cleared"}]

    def _conversation_item_input_audio_transcription_completed(self, e: dict[str, Any]) -> Events:
        item_id, transcript = e["item_id"], e["transcript"]
        out = [] if item_id in self.committed else self.mirror.committed(item_id)
        self.committed.discard(item_id)
        if self.config().transcribe:
            start, end = self.turns.pop(item_id, [None, None])
            seconds = round(max(0, (end or 0) - (start or 0)) / 1000, 3)
            if transcript:
                out.append({"type": "conversation.item.input_audio_transcription.delta", "item_id": item_id,
                            "content_index": 0, "delta": transcript})
            out.append({"type": "conversation.item.input_audio_transcription.completed", "item_id": item_id,
                        "content_index": 0, "transcript": transcript,
                        "usage": {"type": "duration", "seconds": seconds}})
        item = user_item(item_id, transcript if self.config().transcribe else None)
        self.mirror.items[item_id] = item
        return [*out, {"type": "conversation.item.done", "item": item}]

    # --- items the client made, and their changes ---

    def _conversation_item_created(self, e: dict[str, Any]) -> Events:
        native = e["item"]
        if native.get("type") == "function_call_output" and native.get("call_id") in self.hidden_calls:
            return []
        if "ok" in native:  # a tool result the responder made (browser_tool_calls "wait"): not a GA event
            return []
        item = ga_item(native)
        return [*self.mirror.added(item), {"type": "conversation.item.done", "item": item}]

    def _conversation_item_deleted(self, e: dict[str, Any]) -> Events:
        self.mirror.items.pop(e["item_id"], None)
        return [{"type": "conversation.item.deleted", "item_id": e["item_id"]}]

    def _conversation_item_truncated(self, e: dict[str, Any]) -> Events:
        if self.take_audio is not None and e["item_id"] not in self.truncations:
            return []  # a WebSocket client plays the audio itself: only its own truncate is answered
        self.truncations.discard(e["item_id"])
        return [{"type": "conversation.item.truncated", "item_id": e["item_id"],
                 "content_index": e.get("content_index", 0), "audio_end_ms": e["audio_end_ms"]}]

    # --- responses ---

    def _response_object(self, r: _Response, status: str, **extra: Any) -> dict[str, Any]:
        config = self.config().data
        audio_out = config["audio"].get("output", {})
        return {"id": r.id, "object": "realtime.response", "status": status, "status_details": None,
                "output": list(r.output), "conversation_id": "conv_" + self.session_id,
                "output_modalities": [r.modality], "max_output_tokens": config.get("max_output_tokens", "inf"),
                "audio": {"output": {"format": audio_out.get("format"), "voice": audio_out.get("voice")}},
                "usage": None, "metadata": r.metadata, **extra}

    def _response_created(self, e: dict[str, Any]) -> Events:
        native = e["response"]
        r = _Response(native["id"], (native.get("output_modalities") or ["audio"])[0], native.get("metadata"))
        self.responses[r.id] = r
        return [{"type": "response.created", "response": self._response_object(r, "in_progress")},
                {"type": "rate_limits.updated", "rate_limits": NOMINAL_LIMITS}]

    def _where(self, r: _Response, o: _Open) -> dict[str, Any]:
        return {"response_id": r.id, "item_id": o.item["id"], "output_index": o.index, "content_index": 0}

    def _open(self, r: _Response, item_id: str, part: str) -> tuple[_Open, Events]:
        if r.open is not None and r.open.item["id"] == item_id:
            return r.open, []
        out = self._close(r, "completed")
        item = {"id": item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                "status": "in_progress", "content": []}
        o = r.open = _Open(item, len(r.output), part)
        r.output.append(item)
        empty = {"type": "audio", "transcript": ""} if part == "audio" else {"type": "text", "text": ""}
        out += [{"type": "response.output_item.added", "response_id": r.id, "output_index": o.index,
                 "item": dict(item)}, *self.mirror.added(dict(item)),
                {"type": "response.content_part.added", **self._where(r, o), "part": empty}]
        return o, out

    def _audio(self, r: _Response, o: _Open | None) -> Events:
        chunks = self.take_audio(r.id) if self.take_audio is not None else []
        if o is None or o.part != "audio":
            return []
        return [{"type": "response.output_audio.delta", **self._where(r, o), "delta": c} for c in chunks]

    def _delta(self, e: dict[str, Any], part: str) -> Events:
        r = self.responses.get(e["response_id"])
        if r is None:
            return []
        o, out = self._open(r, e.get("item_id") or new_id("item"), part)
        o.text.append(e["delta"])
        kind = "response.output_audio_transcript.delta" if part == "audio" else "response.output_text.delta"
        return [*out, *self._audio(r, o), {"type": kind, **self._where(r, o), "delta": e["delta"]}]

    def _response_output_audio_transcript_delta(self, e: dict[str, Any]) -> Events:
        return self._delta(e, "audio")

    def _response_output_text_delta(self, e: dict[str, Any]) -> Events:
        return self._delta(e, "text")

    def _response_function_call_arguments_done(self, e: dict[str, Any]) -> Events:
        r = self.responses.get(e.get("response_id") or "")
        if r is None or e["name"] not in self.config().client_tools:
            self.hidden_calls.add(e["call_id"])
            return []
        out = self._close(r, "completed")
        item = {"id": new_id("item"), "object": "realtime.item", "type": "function_call", "status": "in_progress",
                "name": e["name"], "call_id": e["call_id"], "arguments": ""}
        index = len(r.output)
        where = {"response_id": r.id, "item_id": item["id"], "output_index": index, "call_id": e["call_id"]}
        done = {**item, "status": "completed", "arguments": e["arguments"]}
        r.output.append(done)
        out += [{"type": "response.output_item.added", "response_id": r.id, "output_index": index, "item": item},
                *self.mirror.added(dict(item)),
                {"type": "response.function_call_arguments.delta", **where, "delta": e["arguments"]},
                {"type": "response.function_call_arguments.done", **where, "name": e["name"],
                 "arguments": e["arguments"]},
                {"type": "response.output_item.done", "response_id": r.id, "output_index": index, "item": done},
                {"type": "conversation.item.done", "item": done}]
        self.mirror.items[item["id"]] = done
        return out

    def _close(self, r: _Response, status: str) -> Events:
        """Finish the open item of ``r`` (its audio tail first)."""
        o = r.open
        if o is None:
            return []
        out = self._audio(r, o)
        r.open = None
        text = "".join(o.text).strip()
        where = self._where(r, o)
        if o.part == "audio":
            part = {"type": "audio", "transcript": text}
            content = {"type": "output_audio", "transcript": text}
            out += [{"type": "response.output_audio.done", **where},
                    {"type": "response.output_audio_transcript.done", **where, "transcript": text}]
        else:
            part = {"type": "text", "text": text}
            content = {"type": "output_text", "text": text}
            out.append({"type": "response.output_text.done", **where, "text": text})
        item = {**o.item, "status": status, "content": [content]}
        r.output[o.index] = item
        self.mirror.items[item["id"]] = item
        out += [{"type": "response.content_part.done", **where, "part": part},
                {"type": "response.output_item.done", "response_id": r.id, "output_index": o.index, "item": item},
                {"type": "conversation.item.done", "item": item}]
        return out

    def _response_done(self, e: dict[str, Any]) -> Events:
        native = e["response"]
        r = self.responses.pop(native["id"], None)
        if r is None:
            return []
        status = native.get("status", "completed")
        out = self._close(r, "completed" if status == "completed" else "incomplete")
        details: dict[str, Any] | None = None
        if status == "cancelled":
            details = {"type": "cancelled", "reason": "client_cancelled" if self.cancel_requested else "turn_detected"}
            self.cancel_requested = False
        elif status == "failed":
            details = {"type": "failed", "error": {"type": "server_error", "code": "response_failed"}}
        usage = native.get("usage") or {}
        tokens_in, tokens_out = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
        ga_usage = {"total_tokens": tokens_in + tokens_out, "input_tokens": tokens_in, "output_tokens": tokens_out,
                    "input_token_details": {"text_tokens": tokens_in, "audio_tokens": 0, "image_tokens": 0,
                                            "cached_tokens": 0},
                    "output_token_details": {"text_tokens": tokens_out, "audio_tokens": 0}}
        out.append({"type": "response.done",
                    "response": self._response_object(r, status, status_details=details, usage=ga_usage)})
        return out

    # --- output audio on the WebRTC track ---

    def _output_audio_buffer_started(self, e: dict[str, Any]) -> Events:
        return [{"type": "output_audio_buffer.started", "response_id": e.get("response_id")}]

    def _output_audio_buffer_stopped(self, e: dict[str, Any]) -> Events:
        kind = "output_audio_buffer.cleared" if e.get("cleared") else "output_audio_buffer.stopped"
        return [{"type": kind, "response_id": e.get("response_id")}]

