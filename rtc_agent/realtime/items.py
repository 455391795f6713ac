"""GA conversation items shared by both event mappings: user items, errors, and the mirror of the conversation."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["ConversationMirror", "Events", "error_events", "ga_item", "user_item"]

Events = list[dict[str, Any]]


def user_item(item_id: str, transcript: str | None, *, status: str = "completed") -> dict[str, Any]:
    """A GA user message of input audio (``transcript`` ``None``: not transcribed)."""
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "user", "status": status,
            "content": [{"type": "input_audio", "transcript": transcript}]}


def error_events(e: dict[str, Any]) -> Events:
    """A native ``error`` event (as a dict) in GA form."""
    err = e["error"]
    return [{"type": "error", "error": {"type": err["type"], "code": err["code"], "message": err["message"],
                                        "param": None, "event_id": err.get("event_id")}}]


def ga_item(native: dict[str, Any]) -> dict[str, Any]:
    """A native ``conversation.item.created`` item (agent ``Item.realtime()``) in GA form."""
    if native.get("type") == "function_call_output":
        return {"id": native["id"], "object": "realtime.item", "type": "function_call_output", "status": "completed",
                "call_id": native.get("call_id"), "output": native.get("output", "")}
    role = native.get("role", "user")
    text = " ".join(p.get("transcript") or p.get("text") or "" for p in native.get("content", []))
    kind = "output_text" if role == "assistant" else "input_text"
    return {"id": native["id"], "object": "realtime.item", "type": "message", "role": role, "status": "completed",
            "content": [{"type": kind, "text": text}]}


class ConversationMirror:
    """GA items of the conversation, in order (for ``previous_item_id`` and ``conversation.item.retrieve``)."""

    def __init__(self, limit: int = 256) -> None:
        self.items: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.limit = limit

    @property
    def last(self) -> str | None:
        return next(reversed(self.items)) if self.items else None

    def added(self, item: dict[str, Any]) -> Events:
        """Add ``item``; the ``conversation.item.added`` event that says so."""
        previous = self.last
        self.items[item["id"]] = item
        while len(self.items) > self.limit:
            self.items.popitem(last=False)
        return [{"type": "conversation.item.added", "previous_item_id": previous, "item": item}]

    def committed(self, item_id: str) -> Events:
        """The user item ``item_id`` enters the conversation, not transcribed yet: ``input_audio_buffer.committed``
        and its ``conversation.item.added``."""
        return [{"type": "input_audio_buffer.committed", "item_id": item_id, "previous_item_id": self.last},
                *self.added(user_item(item_id, None, status="in_progress"))]
