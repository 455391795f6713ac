"""One tool the agent's model may call, and the outcome of one call.

Two kinds of tools: **server** tools are Python callables run on the server; **browser** tools are declared by
the page in ``session.update`` and executed by the client (see :mod:`rtc_agent.apps.agent.browser_calls`).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rtc_agent.apps.agent.tool_schema import SchemaError, brief_json, check_schema, validate

__all__ = ["Tool", "ToolError", "ToolKind", "ToolResult", "tool_failure"]

ToolKind = Literal["server", "browser"]
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MAX_DESCRIPTION = 2048


class ToolError(Exception):
    """Raise from a tool handler for an error the model should read as is (e.g. ``unknown unit 'parsec'``);
    other exceptions are reported with their type name."""


@dataclass(frozen=True)
class Tool:
    """One function the model may call.

    ``parameters`` is a JSON schema of the arguments object; ``handler`` (server tools only) is called with the
    validated arguments as keyword arguments, may be sync (run in a thread) or async, and returns any JSON-able
    value. ``timeout_s`` bounds one execution (for browser tools: the wait for the page's answer).
    ``asked_by`` (the built-in tools set it): whether a user's turn asks for what this tool answers; the tool
    guard (:mod:`rtc_agent.apps.agent.tool_guard`) then makes the model call it instead of answering from memory.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    kind: ToolKind = "server"
    handler: Callable[..., Any] | None = None
    timeout_s: float = 5.0
    asked_by: Callable[[str], bool] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise SchemaError(f"tool name must be 1-64 letters, digits, '_' or '-', got {self.name!r}")
        if self.kind not in ("server", "browser"):
            raise SchemaError(f"tool {self.name}: kind must be 'server' or 'browser', got {self.kind!r}")
        if self.kind == "server" and not callable(self.handler):
            raise SchemaError(f"server tool {self.name} needs a callable handler")
        if not isinstance(self.description, str) or len(self.description) > _MAX_DESCRIPTION:
            raise SchemaError(f"tool {self.name}: description must be a string of at most {_MAX_DESCRIPTION} chars")
        if not isinstance(self.parameters, Mapping) or self.parameters.get("type", "object") != "object":
            raise SchemaError(f"tool {self.name}: parameters must be a JSON schema of type 'object'")
        check_schema(self.parameters, f"{self.name}.parameters")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise SchemaError(f"tool {self.name}: timeout_s must be > 0, got {self.timeout_s!r}")

    def spec(self) -> dict[str, Any]:
        """The Chat Completions ``tools`` entry."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": dict(self.parameters)}}

    def realtime_spec(self) -> dict[str, Any]:
        """The flat OpenAI Realtime form (``session.tools`` entries)."""
        return {"type": "function", "name": self.name, "description": self.description,
                "parameters": dict(self.parameters)}

    def validate(self, arguments: Any) -> list[str]:
        """Errors of ``arguments`` against ``parameters`` (empty when valid)."""
        if not isinstance(arguments, dict):
            return [f"arguments: expected an object, got {brief_json(arguments)}"]
        return validate(arguments, self.parameters)


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one call, as it goes back to the model.

    ``ok`` with ``output`` (any JSON-able value; for browser tools the page's output string), or not ``ok`` with
    ``error_type`` (``unknown_tool``, ``invalid_arguments``, ``tool_timeout``, ``tool_error``, ``browser_timeout``,
    ``cancelled``) and ``error`` (a message for the model). ``duration_s`` covers validation and execution.
    """

    call_id: str
    name: str
    ok: bool
    output: Any = None
    error_type: str | None = None
    error: str | None = None
    duration_s: float = 0.0

    def content(self) -> str:
        """The tool message content: a string output as is, anything else as JSON; errors as
        ``{"error": {"type", "message"}}``."""
        if not self.ok:
            return json.dumps({"error": {"type": self.error_type, "message": self.error}}, ensure_ascii=False)
        if isinstance(self.output, str):
            return self.output
        return json.dumps(self.output, ensure_ascii=False, default=str)

    def message(self) -> dict[str, Any]:
        """The OpenAI ``tool`` message that returns this result to the model."""
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.content()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (for tool cards on the page and logs)."""
        out: dict[str, Any] = {"call_id": self.call_id, "name": self.name, "ok": self.ok,
                               "duration_ms": round(self.duration_s * 1000, 1)}
        if self.ok:
            out["output"] = self.output
        else:
            out["error"] = {"type": self.error_type, "message": self.error}
        return out


def tool_failure(call_id: str, name: str, error_type: str, message: str, start: float) -> ToolResult:
    """A failed result whose ``duration_s`` runs from ``start`` (a ``time.monotonic()`` reading) to now."""
    return ToolResult(call_id, name, ok=False, error_type=error_type, error=message,
                      duration_s=time.monotonic() - start)

