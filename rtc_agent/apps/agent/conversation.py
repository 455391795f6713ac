"""``Conversation``: the items of one agent session and the chat messages they make.

Items follow OpenAI Realtime: user messages, assistant messages (possibly with tool calls), and tool results
(``function_call_output``). The history is bounded; the oldest items go first, always starting again at a user
message so a tool result never loses the call it answers.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

_ids = itertools.count(1)


def new_item_id() -> str:
    return f"item_{next(_ids)}"


@dataclass
class Item:
    id: str
    role: str  # "user" | "assistant" | "system" | "tool"
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI message tool_calls entries
    call_id: str | None = None  # for role "tool"
    truncated: bool = False

    def message(self) -> dict[str, Any]:
        if self.role == "tool":
            return {"role": "tool", "tool_call_id": self.call_id, "content": self.text}
        message: dict[str, Any] = {"role": self.role, "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message

    def realtime(self) -> dict[str, Any]:
        """The item as OpenAI Realtime shows it (``response.done`` output, ``conversation.item.created``)."""
        if self.role == "tool":
            return {"id": self.id, "type": "function_call_output", "call_id": self.call_id, "output": self.text}
        content_type = "output_audio" if self.role == "assistant" else "input_text"
        out: dict[str, Any] = {"id": self.id, "type": "message", "role": self.role,
                               "content": [{"type": content_type, "transcript": self.text}]}
        if self.truncated:
            out["status"] = "incomplete"
        return out


class Conversation:
    def __init__(self, instructions: str, *, max_items: int = 60) -> None:
        self.instructions = instructions
        self.max_items = max_items
        self.items: deque[Item] = deque()

    def add(self, item: Item, *, after: str | None = None) -> Item:
        """Append ``item``, or insert it right after the item ``after`` (``"root"``: first); ``KeyError`` when
        ``after`` names no item."""
        if after is None:
            self.items.append(item)
        elif after == "root":
            self.items.appendleft(item)
        else:
            index = next((i for i, it in enumerate(self.items) if it.id == after), None)
            if index is None:
                raise KeyError(after)
            self.items.insert(index + 1, item)
        while len(self.items) > self.max_items:
            self.items.popleft()
            while self.items and self.items[0].role != "user":
                self.items.popleft()
        return item

    def add_user(self, text: str, item_id: str | None = None) -> Item:
        return self.add(Item(item_id or new_item_id(), "user", text))

    def get(self, item_id: str) -> Item | None:
        return next((i for i in self.items if i.id == item_id), None)

    def delete(self, item_id: str) -> bool:
        """Remove an item; False when there is none with that id."""
        item = self.get(item_id)
        if item is None:
            return False
        self.items.remove(item)
        return True

    @property
    def last_id(self) -> str | None:
        return self.items[-1].id if self.items else None

    def messages(self, extra: list[Item] | None = None) -> list[dict[str, Any]]:
        """System instructions, the history, then ``extra`` items (a turn not yet committed)."""
        out = [{"role": "system", "content": self.instructions}]
        out += [item.message() for item in [*self.items, *(extra or [])]]
        return out
