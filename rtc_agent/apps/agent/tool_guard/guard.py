"""Which declared built-in tool a user's turn asks for, and the ``tool_choice`` that forces it.

Only server tools that declare a matcher (``Tool.asked_by``, set on the built-in tools) count: a page's browser
tool that replaced a built-in one, or a tool the session does not have, never triggers the guard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rtc_agent.apps.agent.tool_registry import ToolRegistry

__all__ = ["forced_choice", "guarded_tool"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def guarded_tool(messages: Sequence[Mapping[str, Any]], tools: ToolRegistry) -> str | None:
    """The name of the first declared server tool whose matcher recognises the last message, when that message
    is the user's (the turn being answered); None otherwise."""
    if not messages or messages[-1].get("role") != "user":
        return None
    text = _text(messages[-1].get("content"))
    for tool in tools.tools("server"):
        if tool.asked_by is not None and tool.asked_by(text):
            return tool.name
    return None


def forced_choice(name: str) -> dict[str, Any]:
    """The Chat Completions ``tool_choice`` that makes the model call the tool ``name``."""
    return {"type": "function", "function": {"name": name}}
