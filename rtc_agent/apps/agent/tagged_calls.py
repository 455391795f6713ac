"""Tool calls in Qwen/Hermes tags: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``.

:func:`parse_call_body` reads the text between the tags: ``arguments`` given as a JSON object or as a string
holding one; ``parameters`` is accepted for ``arguments``; a JSON list in one tag gives one call per element; a
Markdown code fence around the JSON is tolerated. Whatever is not a valid call (malformed JSON, no name,
arguments not an object) becomes a :class:`~rtc_agent.apps.agent.reply_items.ToolCallParseError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rtc_agent.apps.agent.reply_items import ParsedToolCall, ToolCallParseError, new_call_id
from rtc_agent.apps.agent.untagged_calls import unfence
from rtc_agent.protocol import json_limits

__all__ = ["CLOSE_TAG", "OPEN_TAG", "parse_call_body"]

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"


def _parse_call_object(obj: Any, raw: str, call_id: str) -> ParsedToolCall | ToolCallParseError:
    if not isinstance(obj, dict):
        return ToolCallParseError(call_id, "a tool call must be a JSON object with 'name' and 'arguments'", raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ToolCallParseError(call_id, "the tool call has no 'name'", raw)
    name = name.strip()
    args = obj.get("arguments", obj.get("parameters"))
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = json_limits.loads(args) if args.strip() else {}
        except ValueError as exc:
            return ToolCallParseError(call_id, f"the arguments of {name} are not valid JSON: {exc}", raw, name)
    if not isinstance(args, dict):
        return ToolCallParseError(call_id, f"the arguments of {name} must be a JSON object", raw, name)
    return ParsedToolCall(call_id, name, args, raw)


def parse_call_body(body: str,
                    id_factory: Callable[[], str] = new_call_id) -> list[ParsedToolCall | ToolCallParseError]:
    """The calls in the text between ``<tool_call>`` and ``</tool_call>``; never raises."""
    raw = body.strip()
    text = unfence(raw)
    if not text:
        return [ToolCallParseError(id_factory(), "empty <tool_call>", raw)]
    try:
        obj, end = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than Python recurses
        return [ToolCallParseError(id_factory(), f"malformed JSON in <tool_call>: {exc}", raw)]
    if text[end:].strip():
        return [ToolCallParseError(id_factory(), "unexpected text after the JSON in <tool_call>", raw)]
    objs = obj if isinstance(obj, list) and obj else [obj]
    return [_parse_call_object(o, raw, id_factory()) for o in objs]

