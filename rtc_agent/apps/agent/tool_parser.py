"""Streaming parser for tool calls written in the text: Qwen/Hermes ``<tool_call>{"name": ..., "arguments": ...}
</tool_call>``, and the same JSON written bare (``{"name": ..., "arguments": ...}``, what Qwen2.5-Coder-0.5B
answers) or in a Markdown fence (```` ```json ... ``` ````, what the 1.5B writes).

:class:`ToolCallParser` takes text chunks as they stream from the model and gives back, as early as possible:

- :class:`SpokenText`: text outside the tags, safe to send to TTS. A tag is never spoken, not even partly: the
  end of a chunk that could be the start of ``<tool_call>`` or ``</tool_call>`` is held back until the next chunk
  decides it.
- :class:`ParsedToolCall`: one complete call with its arguments decoded (``arguments`` given as a JSON object
  or as a string holding one; ``parameters`` is accepted for ``arguments``; a JSON list in one tag gives one
  call per element; a Markdown code fence around the JSON is tolerated).
- :class:`ToolCallParseError`: a tag whose content is not a valid call (malformed JSON, no name, arguments not
  an object, an unterminated tag at the end). Reported, never raised: the agent answers it to the model as an
  error result.

Untagged calls: a ``{`` or a ```` ``` ```` fence outside a tag holds the text back until the JSON object (braces
balanced outside strings) or the fence closes. A JSON object with a string ``name`` and an ``arguments`` or
``parameters`` object (or no other key) is a call and is never spoken; anything else (prose in braces, a code
block that is not a call) is released as text. Held text longer than ``max_call_chars`` is released too. At the
end of the stream, an unterminated object that starts like a call (``{"name":``) is reported as an unterminated
call, not spoken.

:class:`ReplyParser` does the same for a whole stream of LLM deltas, merging structured ``tool_calls`` deltas
(servers with a tool parser) with calls written in the text (servers without one), so the turn loop handles
one kind of item. Pure Python: no model library here.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rtc_agent.engines.llm.base import partial_marker_len
from rtc_agent.protocol import json_limits

__all__ = [
    "CLOSE_TAG",
    "OPEN_TAG",
    "ParsedItem",
    "ParsedToolCall",
    "ReplyParser",
    "SpokenText",
    "ToolCallParseError",
    "ToolCallParser",
    "merge_text",
    "new_call_id",
    "parse_call_body",
    "untagged_calls",
]

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_TAGS = (OPEN_TAG, CLOSE_TAG)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
FENCE = "```"
_HOLD_MARKERS = (OPEN_TAG, CLOSE_TAG, FENCE)
_CALL_START = re.compile(r'^\{\s*"(name|function)"\s*:')


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
    text = raw
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
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


def _json_object_end(text: str) -> int:
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
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
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


class ToolCallParser:
    """Incremental ``<tool_call>`` parser; see the module docstring.

    ``feed(chunk)`` returns the items completed by ``chunk`` (possibly none); ``flush()`` ends the stream: held
    text is released (a dangling partial tag such as ``<tool`` is dropped, a lone ``<`` is text), and an
    unterminated call is parsed anyway (servers often drop the closing tag as a stop string), or reported.
    Consecutive text pieces of one ``feed`` are merged. A second ``<tool_call>`` before the first closed ends
    the first. A stray ``</tool_call>`` is dropped. A call longer than ``max_call_chars`` is reported and
    skipped. Not thread-safe; one parser per reply.
    """

    def __init__(self, *, id_factory: Callable[[], str] = new_call_id, max_call_chars: int = 64_000) -> None:
        self._id = id_factory
        self._max = max_call_chars
        self._buf = ""
        self._inside = False
        self._skipping = False  # inside an over-long call: drop until its closing tag
        self._untagged = ""  # "{" or FENCE while holding a possible untagged call (kept in _buf)

    @property
    def in_call(self) -> bool:
        """True while inside ``<tool_call>`` (the agent may show a "calling a tool" state)."""
        return self._inside or bool(self._untagged)

    def feed(self, chunk: str) -> list[ParsedItem]:
        if not chunk:
            return []
        self._buf += chunk
        out: list[ParsedItem] = []
        while True:
            if self._inside:
                if not self._step_inside(out):
                    break
            elif self._untagged:
                if not self._step_untagged(out):
                    break
            elif not self._step_outside(out):
                break
        return merge_text(out)

    def _step_outside(self, out: list[ParsedItem]) -> bool:
        buf = self._buf
        positions = [(buf.find(tag), tag) for tag in (*_TAGS, FENCE, "{")]
        found = [(i, tag) for i, tag in positions if i >= 0]
        if found:
            i, tag = min(found)
            if i:
                out.append(SpokenText(buf[:i]))
            if tag in (FENCE, "{"):  # maybe an untagged call: hold it (from its first character) until it closes
                self._untagged = tag
                self._buf = buf[i:]
                return True
            self._buf = buf[i + len(tag):]
            if tag == OPEN_TAG:
                self._inside = True
            return True
        hold = partial_marker_len(buf, _HOLD_MARKERS)
        cut = len(buf) - hold
        if cut:
            out.append(SpokenText(buf[:cut]))
        self._buf = buf[cut:]
        return False

    def _step_inside(self, out: list[ParsedItem]) -> bool:
        buf = self._buf
        end = buf.find(CLOSE_TAG)
        reopen = buf.find(OPEN_TAG)
        if reopen >= 0 and (end < 0 or reopen < end):  # a new call starts before this one closed
            if not self._skipping:
                out.extend(parse_call_body(buf[:reopen], self._id))
            self._skipping = False
            self._buf = buf[reopen + len(OPEN_TAG):]
            return True
        if end >= 0:
            if not self._skipping:
                out.extend(parse_call_body(buf[:end], self._id))
            self._skipping = False
            self._inside = False
            self._buf = buf[end + len(CLOSE_TAG):]
            return True
        if not self._skipping and len(buf) > self._max:
            out.append(ToolCallParseError(self._id(), f"<tool_call> longer than {self._max} characters",
                                          buf[:200]))
            self._skipping = True
        if self._skipping:  # keep only what could be the start of the closing tag
            self._buf = buf[len(buf) - partial_marker_len(buf, _TAGS):]
        return False

    def _step_untagged(self, out: list[ParsedItem]) -> bool:
        buf = self._buf
        if self._untagged == FENCE:
            close = buf.find(FENCE, len(FENCE))
            end = close + len(FENCE) if close >= 0 else -1
        else:
            end = _json_object_end(buf)
        if end < 0:
            if len(buf) > self._max:  # not a call we can use: speak it rather than hold it forever
                self._untagged = ""
                out.append(SpokenText(buf))
                self._buf = ""
            return False
        self._untagged = ""
        block, self._buf = buf[:end], buf[end:]
        calls = untagged_calls(block, self._id)
        if calls:
            out.extend(calls)
        else:
            out.append(SpokenText(block))
        return True

    def flush(self) -> list[ParsedItem]:
        out: list[ParsedItem] = []
        buf, self._buf = self._buf, ""
        if self._untagged:
            self._untagged = ""
            calls = untagged_calls(buf, self._id) if buf.strip() else None
            body = buf.strip()
            fenced_body = body[len(FENCE):].lstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ").strip() \
                if body.startswith(FENCE) else body
            if calls:
                out.extend(calls)
            elif _CALL_START.match(fenced_body):
                out.append(ToolCallParseError(self._id(), "unterminated tool call", body[:2000]))
            else:
                out.append(SpokenText(buf))
            return out
        if self._inside:
            self._inside = False
            if self._skipping:
                self._skipping = False
            elif buf.strip():
                items = parse_call_body(buf, self._id)
                if all(isinstance(i, ParsedToolCall) for i in items):
                    out.extend(items)
                else:
                    out.append(ToolCallParseError(self._id(), "unterminated <tool_call>", buf.strip()[:2000]))
            else:
                out.append(ToolCallParseError(self._id(), "unterminated <tool_call>", ""))
        elif buf and len(buf) < 2:
            out.append(SpokenText(buf))  # a lone "<" is text; "<t", "</tool" ... are a cut-off tag
        return out


def merge_text(items: list[ParsedItem]) -> list[ParsedItem]:
    """``items`` with each run of adjacent ``SpokenText`` joined into one."""
    merged: list[ParsedItem] = []
    for item in items:
        if isinstance(item, SpokenText) and merged and isinstance(merged[-1], SpokenText):
            merged[-1] = SpokenText(merged[-1].text + item.text)
        else:
            merged.append(item)
    return merged


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
