"""Native captions events -> OpenAI Realtime (GA) server events, for ``type: transcription`` sessions."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from rtc_agent.protocol import ServerEvent
from rtc_agent.realtime.events import new_id
from rtc_agent.realtime.items import ConversationMirror, Events, error_events, user_item
from rtc_agent.realtime.session_config import SessionConfig

__all__ = ["TranscriptionTranslator"]


class TranscriptionTranslator:
    """Native captions events -> GA events for one ``type: transcription`` session.

    Each caption segment is one user item: its first words commit it (``input_audio_buffer.committed`` and
    ``conversation.item.added``, so while the user still speaks), newly committed words of
    ``caption.partial`` are ``...transcription.delta`` events (committed caption text never changes, so deltas
    only append), ``caption.final`` ends it (``...transcription.completed``, ``conversation.item.done``). The final
    caption is a fresh decode of the whole utterance: when it extends the words sent, the rest is one more delta;
    when it revises them, ``completed`` alone carries the revision (a delta cannot be taken back).
    """

    def __init__(self, config: Callable[[], SessionConfig], session_id: str, *, expires_at: int | None = None) -> None:
        self.config = config
        self.session_id = session_id
        self.expires_at = expires_at
        self.mirror = ConversationMirror()
        self.segments: dict[str, str] = {}  # caption segment -> item id
        self.sent: dict[str, str] = {}  # item id -> transcript sent as deltas
        self.current: str | None = None  # the item of the utterance in progress, until a segment takes it

    @property
    def items(self) -> OrderedDict[str, dict[str, Any]]:
        return self.mirror.items

    def translate(self, event: ServerEvent) -> Events:
        e = event.model_dump()
        kind = event.type
        if kind in ("session.created", "session.updated"):
            return [{"type": kind, "session": self.config().render(self.session_id, self.expires_at)}]
        if kind == "error":
            return error_events(e)
        if kind == "input_audio_buffer.speech_started":
            self.current = new_id("item")
            return [{"type": kind, "audio_start_ms": e["audio_start_ms"], "item_id": self.current}]
        if kind == "input_audio_buffer.speech_stopped":
            item_id = self.current or next(reversed(self.segments.values()), None) or new_id("item")
            return [{"type": kind, "audio_end_ms": e["audio_end_ms"], "item_id": item_id}]
        if kind == "input_audio_buffer.cleared":
            return [{"type": kind}]
        if kind == "caption.partial":
            item_id, out = self._item(e["segment_id"])
            return out + self._delta(item_id, e["committed"])
        if kind == "caption.final":
            item_id, out = self._item(e["segment_id"])
            out += self._delta(item_id, e["text"])
            self.sent.pop(item_id, None)
            self.segments.pop(e["segment_id"], None)
            seconds = round(max(0, e["audio_end_ms"] - e["audio_start_ms"]) / 1000, 3)
            item = user_item(item_id, e["text"])
            self.mirror.items[item_id] = item
            return [*out, {"type": "conversation.item.input_audio_transcription.completed", "item_id": item_id,
                           "content_index": 0, "transcript": e["text"],
                           "usage": {"type": "duration", "seconds": seconds}},
                    {"type": "conversation.item.done", "item": item}]
        return []

    def _item(self, segment_id: str) -> tuple[str, Events]:
        item_id = self.segments.get(segment_id)
        if item_id is not None:
            return item_id, []
        item_id = self.current or new_id("item")
        self.current = None
        self.segments[segment_id] = item_id
        self.sent[item_id] = ""
        return item_id, self.mirror.committed(item_id)

    def _delta(self, item_id: str, text: str) -> Events:
        sent = self.sent.get(item_id, "")
        if not text.startswith(sent) or len(text) <= len(sent):
            return []
        self.sent[item_id] = text
        return [{"type": "conversation.item.input_audio_transcription.delta", "item_id": item_id,
                 "content_index": 0, "delta": text[len(sent):]}]
