"""The items a parsed model reply is made of: text to speak, well-formed tool calls, and calls that could not be
read (reported to the model as error results, never raised)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = ["ParsedItem", "ParsedToolCall", "SpokenText", "ToolCallParseError", "merge_text", "new_call_id"]


def new_call_id() -> str:
    """A fresh call id in OpenAI's style (``call_`` + 24 hex digits)."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(frozen=True)
class SpokenText:
    """Text for the listener (may be whitespace only, e.g. the newline before a tag; TTS may skip those)."""

    text: str


@dataclass(frozen=True)
class ParsedToolCall:
    """A complete, well-formed tool call (its arguments are not yet validated against the tool's schema)."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    raw: str = ""

    @property
    def arguments_json(self) -> str:
        """The arguments as a compact JSON string (for ``response.function_call_arguments.done``)."""
        return json.dumps(self.arguments, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class ToolCallParseError:
    """A tool call that could not be read. ``name`` is set when the name was readable (bad arguments)."""

    call_id: str
    message: str
    raw: str = ""
    name: str | None = None


ParsedItem = SpokenText | ParsedToolCall | ToolCallParseError


def merge_text(items: list[ParsedItem]) -> list[ParsedItem]:
    """``items`` with each run of adjacent ``SpokenText`` joined into one."""
    merged: list[ParsedItem] = []
    for item in items:
        if isinstance(item, SpokenText) and merged and isinstance(merged[-1], SpokenText):
            merged[-1] = SpokenText(merged[-1].text + item.text)
        else:
            merged.append(item)
    return merged
