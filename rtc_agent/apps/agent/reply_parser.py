"""Turns a whole stream of LLM deltas into reply items: text, calls written in the text, and structured
``tool_calls`` deltas (servers with a tool parser) merged into one sequence, so the turn loop handles one kind
of item. Pure Python: no model library here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rtc_agent.apps.agent.reply_items import (
    ParsedItem,
    ParsedToolCall,
    SpokenText,
    ToolCallParseError,
    merge_text,
    new_call_id,
)
from rtc_agent.apps.agent.tool_parser import ToolCallParser
from rtc_agent.protocol import json_limits

__all__ = ["ReplyParser"]


class _ToolCallDeltaLike(Protocol):
    index: int
    id: str | None
    name: str | None
    arguments: str


class _DeltaLike(Protocol):
    """What :class:`ReplyParser` reads from a delta (``rtc_agent.engines.llm.ChatDelta`` fits)."""

    text: str
    tool_calls: Iterable[_ToolCallDeltaLike]
    finish_reason: str | None


@dataclass
class _Structured:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class ReplyParser:
    """Turns LLM deltas into :data:`ParsedItem` items, in order.

    Text goes through a :class:`ToolCallParser`; structured tool-call deltas are merged by index and a call is
    emitted when the next index starts or the reply finishes (its arguments JSON is then complete). The delta
    with ``finish_reason`` flushes everything; ``finish()`` does the same for a stream that ended without one
    (idempotent). ``finish_reason`` and ``usage`` keep what the stream reported; ``calls`` lists every call
    emitted (text and structured), ``text`` everything spoken.
    """

    def __init__(self, *, id_factory: Callable[[], str] = new_call_id) -> None:
        self._id = id_factory
        self._text = ToolCallParser(id_factory=id_factory)
        self._structured: dict[int, _Structured] = {}
        self._finished = False
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.calls: list[ParsedToolCall | ToolCallParseError] = []
        self._spoken: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self._spoken)

    @property
    def in_call(self) -> bool:
        """True while a tool call is being written (text tag open, or structured call deltas pending)."""
        return self._text.in_call or bool(self._structured)

    def feed(self, delta: _DeltaLike) -> list[ParsedItem]:
        if self._finished:
            return []
        out: list[ParsedItem] = []
        if delta.text:
            out.extend(self._text.feed(delta.text))
        for part in delta.tool_calls or ():
            earlier = [i for i in self._structured if i < part.index]
            for index in sorted(earlier):
                out.append(self._complete(index))
            call = self._structured.setdefault(part.index, _Structured())
            if part.id:
                call.id = part.id
            if part.name:
                call.name = part.name
            if part.arguments:
                call.arguments.append(part.arguments)
        if getattr(delta, "usage", None) is not None:
            self.usage = delta.usage
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
            out.extend(self._flush())
        return self._record(out)

    def finish(self) -> list[ParsedItem]:
        return self._record(self._flush())

    def _flush(self) -> list[ParsedItem]:
        if self._finished:
            return []
        self._finished = True
        out = self._text.flush()
        for index in sorted(self._structured):
            out.append(self._complete(index))
        return out

    def _complete(self, index: int) -> ParsedToolCall | ToolCallParseError:
        call = self._structured.pop(index)
        call_id = call.id or self._id()
        raw = "".join(call.arguments)
        if not call.name:
            return ToolCallParseError(call_id, "the structured tool call has no name", raw)
        try:
            args = json_limits.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            return ToolCallParseError(call_id, f"the arguments of {call.name} are not valid JSON: {exc}", raw,
                                      call.name)
        if not isinstance(args, dict):
            return ToolCallParseError(call_id, f"the arguments of {call.name} must be a JSON object", raw, call.name)
        return ParsedToolCall(call_id, call.name, args, raw)

    def _record(self, items: list[ParsedItem]) -> list[ParsedItem]:
        items = merge_text(items)
        for item in items:
            if isinstance(item, SpokenText):
                self._spoken.append(item.text)
            else:
                self.calls.append(item)
        return items
