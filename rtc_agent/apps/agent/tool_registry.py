"""The tools of one session: registration of server tools, declaration of browser tools, lookup, and running.

Whatever goes wrong running a server tool (bad arguments, unknown tool, timeout, an exception in the handler)
becomes a :class:`~rtc_agent.apps.agent.tool.ToolResult` with ``ok=False`` that is answered to the model, never an
exception in the turn loop. Browser tools are validated like any other but run by the page
(:class:`~rtc_agent.apps.agent.browser_calls.PendingBrowserCalls` waits for their answers).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rtc_agent.apps.agent.tool import Tool, ToolError, ToolKind, ToolResult, tool_failure
from rtc_agent.apps.agent.tool_schema import SchemaError, is_number
from rtc_agent.errors import InvalidRequest

__all__ = ["ToolRegistry"]

_MAX_SCHEMA_BYTES = 16 * 1024


class ToolRegistry:
    """The tools of one session (make one per session with :meth:`copy` from a shared base registry).

    ``default_timeout_s`` applies to server tools registered without one, ``browser_timeout_s`` to browser
    tools. Names are unique across both kinds; browser tools cannot replace server tools.
    """

    def __init__(self, tools: Iterable[Tool] = (), *, default_timeout_s: float = 5.0,
                 browser_timeout_s: float = 15.0, max_browser_tools: int = 32) -> None:
        self.default_timeout_s = default_timeout_s
        self.browser_timeout_s = browser_timeout_s
        self.max_browser_tools = max_browser_tools
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def copy(self) -> ToolRegistry:
        """A registry with the same tools and settings (tools are immutable, so sharing them is safe)."""
        return ToolRegistry(self._tools.values(), default_timeout_s=self.default_timeout_s,
                            browser_timeout_s=self.browser_timeout_s, max_browser_tools=self.max_browser_tools)

    # registration ---------------------------------------------------------------------------------------------

    def add(self, tool: Tool, *, replace: bool = False) -> Tool:
        """Register ``tool``; ``ValueError`` when the name is taken (unless ``replace``)."""
        if tool.name in self._tools and not replace:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def register(self, handler: Callable[..., Any], *, name: str | None = None, description: str | None = None,
                 parameters: Mapping[str, Any] | None = None, timeout_s: float | None = None) -> Tool:
        """Register a server tool. ``name`` defaults to the function's name, ``description`` to its docstring's
        first paragraph, ``parameters`` to an object schema without properties."""
        doc = inspect.getdoc(handler) or ""
        tool = Tool(
            name=name or handler.__name__,
            description=description if description is not None else doc.split("\n\n")[0].replace("\n", " "),
            parameters=parameters if parameters is not None else {"type": "object", "properties": {}},
            kind="server", handler=handler,
            timeout_s=timeout_s if timeout_s is not None else self.default_timeout_s,
        )
        return self.add(tool)

    def tool(self, *, name: str | None = None, description: str | None = None,
             parameters: Mapping[str, Any] | None = None,
             timeout_s: float | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of :meth:`register`; returns the function unchanged."""

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register(fn, name=name, description=description, parameters=parameters, timeout_s=timeout_s)
            return fn

        return decorate

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)

    def declare_browser_tools(self, specs: Any, *, replace_server: bool = False) -> list[Tool]:
        """Replace the browser tools with the ones a page declared in ``session.update`` (``session.tools``).

        Each spec is ``{"type": "function", "name", "description", "parameters"}`` (Realtime form) or
        ``{"type": "function", "function": {...}}`` (Chat Completions form); an optional ``timeout_s`` (seconds)
        overrides ``browser_timeout_s``. All or nothing: any invalid spec raises ``InvalidRequest`` (code
        ``invalid_tools``) and leaves the registry as it was. An empty list removes all browser tools. A name
        taken by a server tool is refused, unless ``replace_server``: then the browser tool takes its place for
        this registry (OpenAI Realtime clients know only their own tools).
        """
        if not isinstance(specs, list):
            raise InvalidRequest("session.tools must be a list of function definitions", code="invalid_tools")
        if len(specs) > self.max_browser_tools:
            raise InvalidRequest(f"at most {self.max_browser_tools} browser tools may be declared",
                                 code="invalid_tools")
        tools: list[Tool] = []
        for i, spec in enumerate(specs):
            try:
                tools.append(self._browser_tool(spec))
            except (SchemaError, TypeError, ValueError) as exc:
                raise InvalidRequest(f"session.tools[{i}]: {exc}", code="invalid_tools") from None
        names = [t.name for t in tools]
        for name in names:
            existing = self._tools.get(name)
            if existing is not None and existing.kind == "server" and not replace_server:
                raise InvalidRequest(f"session.tools: {name!r} is a server tool and cannot be redeclared",
                                     code="invalid_tools")
        if len(set(names)) != len(names):
            raise InvalidRequest("session.tools: tool names must be unique", code="invalid_tools")
        for name in [n for n, t in self._tools.items() if t.kind == "browser"]:
            del self._tools[name]
        for tool in tools:
            self._tools[tool.name] = tool
        return tools

    def _browser_tool(self, spec: Any) -> Tool:
        if not isinstance(spec, Mapping):
            raise SchemaError("a tool must be an object")
        if spec.get("type", "function") != "function":
            raise SchemaError(f"only type 'function' is supported, got {spec.get('type')!r}")
        fn = spec.get("function", spec)
        if not isinstance(fn, Mapping):
            raise SchemaError("'function' must be an object")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if len(json.dumps(params, default=str)) > _MAX_SCHEMA_BYTES:
            raise SchemaError(f"parameters larger than {_MAX_SCHEMA_BYTES} bytes")
        timeout = spec.get("timeout_s", fn.get("timeout_s", self.browser_timeout_s))
        if not is_number(timeout) or not 0 < timeout <= 300:
            raise SchemaError("timeout_s must be a number within (0, 300]")
        return Tool(name=fn.get("name"), description=fn.get("description") or "", parameters=params,
                    kind="browser", timeout_s=float(timeout))

    # lookup ---------------------------------------------------------------------------------------------------

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return list(self._tools)

    def tools(self, kind: ToolKind | None = None) -> list[Tool]:
        return [t for t in self._tools.values() if kind is None or t.kind == kind]

    def specs(self) -> list[dict[str, Any]]:
        """All tools as Chat Completions ``tools`` entries (what goes into the LLM request)."""
        return [t.spec() for t in self._tools.values()]

    # calls ----------------------------------------------------------------------------------------------------

    def check(self, call_id: str, name: str, arguments: Any) -> Tool | ToolResult:
        """The tool to run, or the error result to answer instead (``unknown_tool``, ``invalid_arguments``)."""
        start = time.monotonic()
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return tool_failure(call_id, name, "unknown_tool", f"there is no tool named {name!r} (tools: {known})",
                            start)
        errors = tool.validate(arguments)
        if errors:
            return tool_failure(call_id, name, "invalid_arguments", "; ".join(errors[:5]), start)
        return tool

    async def run(self, call_id: str, name: str, arguments: Any) -> ToolResult:
        """Validate and run a server tool; never raises except ``CancelledError``.

        A browser tool is not run here (``ValueError``: the turn loop sends it to the page and waits with
        :class:`PendingBrowserCalls`). A sync handler runs in a thread: on timeout the call is answered with
        ``tool_timeout`` at once, the thread finishes in the background (Python cannot stop it), so handlers
        should bound their own work.
        """
        start = time.monotonic()
        checked = self.check(call_id, name, arguments)
        if isinstance(checked, ToolResult):
            return checked
        tool = checked
        if tool.kind != "server" or tool.handler is None:
            raise ValueError(f"{name} is a browser tool: send it to the page instead of running it")
        try:
            async with asyncio.timeout(tool.timeout_s):
                output = await _call(tool.handler, arguments)
        except TimeoutError:
            return tool_failure(call_id, name, "tool_timeout", f"{name} did not finish within {tool.timeout_s:g} s",
                            start)
        except ToolError as exc:
            return tool_failure(call_id, name, "tool_error", str(exc) or type(exc).__name__, start)
        except Exception as exc:
            return tool_failure(call_id, name, "tool_error", f"{type(exc).__name__}: {exc}", start)
        try:
            json.dumps(output)
        except (TypeError, ValueError):
            output = str(output)
        return ToolResult(call_id, name, ok=True, output=output, duration_s=time.monotonic() - start)


async def _call(handler: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(handler):
        return await handler(**arguments)
    result = await asyncio.to_thread(handler, **arguments)
    if inspect.isawaitable(result):
        return await result
    return result

