"""Streaming parser for tool calls written in the text, tagged (:mod:`.tagged_calls`) or not (:mod:`.untagged_calls`).

:class:`ToolCallParser` takes text chunks as they stream from the model and gives back, as early as possible,
the items of :mod:`.reply_items`:

- :class:`~.reply_items.SpokenText`: text outside the tags, safe to send to TTS. A tag is never spoken, not even
  partly: the end of a chunk that could be the start of ``<tool_call>`` or ``</tool_call>`` is held back until the
  next chunk decides it.
- :class:`~.reply_items.ParsedToolCall`: one complete call with its arguments decoded.
- :class:`~.reply_items.ToolCallParseError`: a tag whose content is not a valid call, or an unterminated tag at
  the end. Reported, never raised: the agent answers it to the model as an error result.

Untagged calls: a ``{`` or a ```` ``` ```` fence outside a tag holds the text back until the JSON object (braces
balanced outside strings) or the fence closes. A JSON object with a string ``name`` and an ``arguments`` or
``parameters`` object (or no other key) is a call and is never spoken; anything else (prose in braces, a code
block that is not a call) is released as text. Held text longer than ``max_call_chars`` is released too. At the
end of the stream, an unterminated object that starts like a call (``{"name":``) is reported as an unterminated
call, not spoken.
"""

from __future__ import annotations

from collections.abc import Callable

from rtc_agent.apps.agent.reply_items import (
    ParsedItem,
    ParsedToolCall,
    SpokenText,
    ToolCallParseError,
    merge_text,
    new_call_id,
)
from rtc_agent.apps.agent.tagged_calls import CLOSE_TAG, OPEN_TAG, parse_call_body
from rtc_agent.apps.agent.untagged_calls import CALL_START, FENCE, json_object_end, untagged_calls
from rtc_agent.engines.llm.messages import partial_marker_len

__all__ = ["ToolCallParser"]

_TAGS = (OPEN_TAG, CLOSE_TAG)
_HOLD_MARKERS = (OPEN_TAG, CLOSE_TAG, FENCE)


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
            end = json_object_end(buf)
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
            elif CALL_START.match(fenced_body):
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
