"""Tool calls written without tags: bare JSON (``{"name": ..., "arguments": ...}``, what Qwen2.5-Coder-0.5B
answers) or the same JSON in a Markdown fence (```` ```json ... ``` ````, what the 1.5B writes)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from rtc_agent.apps.agent.reply_items import ParsedToolCall, new_call_id
from rtc_agent.protocol import json_limits

__all__ = ["CALL_START", "FENCE", "json_object_end", "unfence", "untagged_calls"]

FENCE = "```"
_FENCED = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
#: how an object that is meant as a call starts (an unterminated one is reported, not spoken)
CALL_START = re.compile(r'^\{\s*"(name|function)"\s*:')


def unfence(text: str) -> str:
    """The body of a Markdown code block that is all of ``text`` (stripped), or ``text`` itself."""
    fenced = _FENCED.match(text)
    return fenced.group(1).strip() if fenced else text


def json_object_end(text: str) -> int:
    """The index just past the JSON object that starts at ``text[0] == "{"``, or -1 while it is open."""
    depth = 0
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth <= 0:
                return i + 1
    return -1


def untagged_calls(text: str, id_factory: Callable[[], str] = new_call_id) -> list[ParsedToolCall] | None:
    """The calls in ``text`` (bare JSON or a fenced block) when it holds only tool calls; None when it is not one.

    A call is an object with a string ``name`` (or ``function``, as some models write it) and an object
    ``arguments``/``parameters`` (or no other key); a list of such objects gives one call each.
    """
    body = unfence(text.strip())
    if not body.startswith(("{", "[")):
        return None
    try:
        obj, end = json.JSONDecoder().raw_decode(body)
    except (ValueError, RecursionError):
        return None
    if body[end:].strip():
        return None
    objs = obj if isinstance(obj, list) and obj else [obj]
    calls: list[ParsedToolCall] = []
    for o in objs:
        if not isinstance(o, dict):
            return None
        name = o.get("name", o.get("function"))
        if not isinstance(name, str) or not name.strip():
            return None
        args = o.get("arguments", o.get("parameters"))
        if args is None and set(o) - {"name", "function"}:
            return None
        if isinstance(args, str):
            try:
                args = json_limits.loads(args) if args.strip() else {}
            except ValueError:
                return None
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return None
        calls.append(ParsedToolCall(id_factory(), name.strip(), args, text.strip()))
    return calls

