"""Length caps on the free text and lists a client sends to an app, in its config or in its events.

Every cap is a server setting (group ``limits``): ``max_instructions_chars`` for the agent's instructions (and
the tool outputs a page returns), ``max_tools`` and ``max_tool_schema_bytes`` for the tools a page declares,
``max_text_field_chars`` for every other free-text field (filler, vision prompts, user text messages...).

A value over its cap raises :class:`~rtc_agent.errors.InvalidRequest` with code ``config_too_large`` and a message
naming the field, the limit and the size: a 400 at session creation, an ``error`` event (the session goes on) for
a client event. Caps are checked before anything else looks at the text, so an oversized value never reaches a
model.
"""

from __future__ import annotations

import json
import reprlib
from dataclasses import dataclass
from typing import Any

from rtc_agent.errors import InvalidRequest

__all__ = ["TextLimits", "show", "show_keys", "too_large"]

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 80
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6


def show(value: Any) -> str:
    """A short ``repr`` of client input for error messages: long strings and numbers cut, deep or long
    containers abbreviated (never recursing far: a 3000-deep list is fine)."""
    try:
        return _REPR.repr(value)
    except (ValueError, RecursionError):  # e.g. an int past Python's digit limit
        return f"<{type(value).__name__}>"


def show_keys(keys: Any, most: int = 10) -> str:
    """Sorted unknown keys for an error message: at most ``most`` of them, each cut short."""
    names = sorted(str(k) for k in keys)
    shown = [show(name) for name in names[:most]]
    return "[" + ", ".join(shown) + (f", ... ({len(names)} in all)" if len(names) > most else "") + "]"


def too_large(field: str, limit: int, size: int, unit: str = "characters") -> InvalidRequest:
    """The ``config_too_large`` error for ``field`` (``size`` over ``limit`` ``unit``)."""
    return InvalidRequest(f"{field} is too large: {size} {unit}, the limit is {limit} {unit}",
                          code="config_too_large")


@dataclass(frozen=True)
class TextLimits:
    """The caps (see the module docstring); :meth:`from_settings` reads them, with these defaults for settings
    objects that lack them (``None`` included)."""

    instructions_chars: int = 8000
    text_chars: int = 1000
    tools: int = 32
    tool_schema_bytes: int = 16384

    @classmethod
    def from_settings(cls, settings: Any) -> TextLimits:
        d = cls()
        return cls(instructions_chars=int(getattr(settings, "max_instructions_chars", d.instructions_chars)),
                   text_chars=int(getattr(settings, "max_text_field_chars", d.text_chars)),
                   tools=int(getattr(settings, "max_tools", d.tools)),
                   tool_schema_bytes=int(getattr(settings, "max_tool_schema_bytes", d.tool_schema_bytes)))

    def text(self, field: str, value: Any, limit: int | None = None) -> Any:
        """``value`` unchanged; ``config_too_large`` when it is a string longer than ``limit`` (default: the
        free-text cap). Non-strings pass through (type checks are the caller's)."""
        cap = self.text_chars if limit is None else limit
        if isinstance(value, str) and len(value) > cap:
            raise too_large(field, cap, len(value))
        return value

    def instructions(self, field: str, value: Any) -> Any:
        """:meth:`text` with the instructions cap."""
        return self.text(field, value, self.instructions_chars)

    @staticmethod
    def json_text(value: Any) -> str:
        """``value`` as compact JSON (what a non-string tool output becomes); ``invalid_item`` when it cannot be."""
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (RecursionError, ValueError):
            raise InvalidRequest("the value cannot be encoded as JSON", code="invalid_item") from None

    def tools_list(self, field: str, specs: Any) -> Any:
        """``specs`` unchanged; ``config_too_large`` when a list of more than ``tools`` entries, or whose JSON is
        larger than ``tool_schema_bytes`` in total. Anything else passes through (the tool registry checks it)."""
        if not isinstance(specs, list):
            return specs
        if len(specs) > self.tools:
            raise too_large(field, self.tools, len(specs), "tools")
        try:
            size = len(json.dumps(specs, ensure_ascii=False, default=str).encode())
        except (RecursionError, ValueError):
            raise InvalidRequest(f"{field} cannot be encoded as JSON", code="invalid_tools") from None
        if size > self.tool_schema_bytes:
            raise too_large(field, self.tool_schema_bytes, size, "bytes")
        return specs
