"""Tools the agent's model may call: a registry of JSON-schema functions, argument validation, and execution.

Two kinds of tools share one registry per session:

- **server** tools: Python callables (sync or async) run on the server with a timeout. Whatever goes wrong (bad
  arguments, unknown tool, timeout, an exception in the handler) becomes a :class:`ToolResult` with ``ok=False``
  that is answered to the model, never an exception in the turn loop.
- **browser** tools: declared by the page in ``session.update`` (``session.tools``), executed by the client. The
  registry validates their arguments like any other; :class:`PendingBrowserCalls` tracks the calls sent as
  ``response.function_call_arguments.done`` until the page answers with a ``function_call_output`` item or the
  timeout passes.

Validation uses a focused JSON-schema validator (the ``jsonschema`` package is not a dependency): ``type``
(including lists of types), ``enum``, ``const``, ``properties``, ``required``, ``additionalProperties``, ``items``,
``minItems``/``maxItems``, ``uniqueItems``, ``minLength``/``maxLength``, ``pattern``, ``minimum``/``maximum``,
``exclusiveMinimum``/``exclusiveMaximum``, ``multipleOf``, ``anyOf``/``oneOf``/``allOf``/``not``; annotations
(``description``, ``title``, ``default``, ``examples``, ``format``, ...) are ignored. A schema using anything else
(``$ref``, ``if``, ``patternProperties``, ...) is rejected when the tool is registered, rather than half-checked.
Arguments are never coerced: ``"5"`` is not a number.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rtc_agent.errors import InvalidRequest

__all__ = [
    "PendingBrowserCalls",
    "SchemaError",
    "Tool",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "check_schema",
    "validate",
]

ToolKind = Literal["server", "browser"]
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MAX_DESCRIPTION = 2048
_MAX_SCHEMA_BYTES = 16 * 1024


class ToolError(Exception):
    """Raise from a tool handler for an error the model should read as is (e.g. ``unknown unit 'parsec'``);
    other exceptions are reported with their type name."""


class SchemaError(ValueError):
    """A tool's parameter schema cannot be used (malformed, or uses unsupported keywords)."""


# --------------------------------------------------------------------------------------------------------------
# JSON-schema validation

_ANNOTATIONS = frozenset({
    "description", "title", "default", "examples", "example", "format", "$schema", "$id", "$comment",
    "deprecated", "readOnly", "writeOnly", "nullable", "strict",
})
_SUPPORTED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "uniqueItems", "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "anyOf", "oneOf", "allOf", "not",
})
_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})


def check_schema(schema: Any, path: str = "parameters") -> None:
    """Raise :class:`SchemaError` unless ``schema`` is a schema this module can fully check."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        raise SchemaError(f"{path}: a schema must be an object")
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key not in _SUPPORTED:
            raise SchemaError(f"{path}: unsupported schema keyword {key!r}")
        if key == "type":
            types = value if isinstance(value, list) else [value]
            if not types or any(t not in _TYPES for t in types):
                raise SchemaError(f"{path}.type: unknown type {value!r}")
        elif key == "properties":
            if not isinstance(value, Mapping):
                raise SchemaError(f"{path}.properties must be an object")
            for name, sub in value.items():
                check_schema(sub, f"{path}.properties.{name}")
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise SchemaError(f"{path}.required must be a list of names")
        elif key in ("additionalProperties", "items", "not"):
            check_schema(value, f"{path}.{key}")
        elif key in ("anyOf", "oneOf", "allOf"):
            if not isinstance(value, list) or not value:
                raise SchemaError(f"{path}.{key} must be a non-empty list of schemas")
            for i, sub in enumerate(value):
                check_schema(sub, f"{path}.{key}[{i}]")
        elif key == "enum":
            if not isinstance(value, list) or not value:
                raise SchemaError(f"{path}.enum must be a non-empty list")
        elif key == "pattern":
            try:
                re.compile(value)
            except (re.error, TypeError) as exc:
                raise SchemaError(f"{path}.pattern is not a valid regular expression: {exc}") from None
        elif key in ("minItems", "maxItems", "minLength", "maxLength"):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SchemaError(f"{path}.{key} must be a non-negative integer")
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf") and (
            not _is_number(value) or (key == "multipleOf" and value <= 0)
        ):
            raise SchemaError(f"{path}.{key} must be a number" + (" > 0" if key == "multipleOf" else ""))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _type_ok(value: Any, t: str) -> bool:
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return _is_number(value) and float(value).is_integer()
    if t == "number":
        return _is_number(value)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    return value is None  # "null"


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def validate(instance: Any, schema: Any, path: str = "arguments") -> list[str]:
    """Every way ``instance`` breaks ``schema``, as ``"<path>: <message>"`` strings (empty when valid)."""
    if schema is True or schema is None:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here"]
    errors: list[str] = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_ok(instance, t) for t in types):
            return [f"{path}: expected {' or '.join(types)}, got {_show(instance)}"]
    if "enum" in schema and not any(_json_equal(instance, v) for v in schema["enum"]):
        errors.append(f"{path}: must be one of {_show(schema['enum'])}, got {_show(instance)}")
    if "const" in schema and not _json_equal(instance, schema["const"]):
        errors.append(f"{path}: must be {_show(schema['const'])}, got {_show(instance)}")
    if isinstance(instance, str):
        if "minLength" in schema and len(instance) < schema["minLength"]:
            errors.append(f"{path}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(instance) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']} characters")
        if "pattern" in schema and re.search(schema["pattern"], instance) is None:
            errors.append(f"{path}: does not match the pattern {schema['pattern']!r}")
    if _is_number(instance):
        if "minimum" in schema and instance < schema["minimum"]:
            errors.append(f"{path}: must be >= {schema['minimum']}, got {instance}")
        if "maximum" in schema and instance > schema["maximum"]:
            errors.append(f"{path}: must be <= {schema['maximum']}, got {instance}")
        if "exclusiveMinimum" in schema and instance <= schema["exclusiveMinimum"]:
            errors.append(f"{path}: must be > {schema['exclusiveMinimum']}, got {instance}")
        if "exclusiveMaximum" in schema and instance >= schema["exclusiveMaximum"]:
            errors.append(f"{path}: must be < {schema['exclusiveMaximum']}, got {instance}")
        if "multipleOf" in schema:
            quotient = instance / schema["multipleOf"]
            if not math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9):
                errors.append(f"{path}: must be a multiple of {schema['multipleOf']}, got {instance}")
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in instance:
                errors.append(f"{path}: missing required property {name!r}")
        extra = schema.get("additionalProperties", True)
        for name, value in instance.items():
            if name in props:
                errors.extend(validate(value, props[name], f"{path}.{name}"))
            elif extra is False:
                allowed = ", ".join(props) or "none"
                errors.append(f"{path}: unexpected property {name!r} (allowed: {allowed})")
            elif isinstance(extra, Mapping):
                errors.extend(validate(value, extra, f"{path}.{name}"))
    if isinstance(instance, list):
        if "minItems" in schema and len(instance) < schema["minItems"]:
            errors.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            errors.append(f"{path}: more than {schema['maxItems']} items")
        if schema.get("uniqueItems"):
            seen: list[str] = []
            for item in instance:
                key = json.dumps(item, sort_keys=True, default=str)
                if key in seen:
                    errors.append(f"{path}: items must be unique")
                    break
                seen.append(key)
        if "items" in schema:
            for i, item in enumerate(instance):
                errors.extend(validate(item, schema["items"], f"{path}[{i}]"))
    for sub in schema.get("allOf", []):
        errors.extend(validate(instance, sub, path))
    if "anyOf" in schema and not any(not validate(instance, sub, path) for sub in schema["anyOf"]):
        errors.append(f"{path}: matches none of the allowed forms (anyOf)")
    if "oneOf" in schema:
        matches = sum(1 for sub in schema["oneOf"] if not validate(instance, sub, path))
        if matches != 1:
            errors.append(f"{path}: must match exactly one allowed form (oneOf), matches {matches}")
    if "not" in schema and not validate(instance, schema["not"], path):
        errors.append(f"{path}: matches a forbidden form (not)")
    return errors


# --------------------------------------------------------------------------------------------------------------
# tools and results


@dataclass(frozen=True)
class Tool:
    """One function the model may call.

    ``parameters`` is a JSON schema of the arguments object; ``handler`` (server tools only) is called with the
    validated arguments as keyword arguments, may be sync (run in a thread) or async, and returns any JSON-able
    value. ``timeout_s`` bounds one execution (for browser tools: the wait for the page's answer).
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    kind: ToolKind = "server"
    handler: Callable[..., Any] | None = None
    timeout_s: float = 5.0

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
            return [f"arguments: expected an object, got {_show(arguments)}"]
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


def _failure(call_id: str, name: str, error_type: str, message: str, start: float) -> ToolResult:
    return ToolResult(call_id, name, ok=False, error_type=error_type, error=message,
                      duration_s=time.monotonic() - start)


# --------------------------------------------------------------------------------------------------------------
# registry


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
        if not _is_number(timeout) or not 0 < timeout <= 300:
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
            return _failure(call_id, name, "unknown_tool", f"there is no tool named {name!r} (tools: {known})",
                            start)
        errors = tool.validate(arguments)
        if errors:
            return _failure(call_id, name, "invalid_arguments", "; ".join(errors[:5]), start)
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
            return _failure(call_id, name, "tool_timeout", f"{name} did not finish within {tool.timeout_s:g} s",
                            start)
        except ToolError as exc:
            return _failure(call_id, name, "tool_error", str(exc) or type(exc).__name__, start)
        except Exception as exc:
            return _failure(call_id, name, "tool_error", f"{type(exc).__name__}: {exc}", start)
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


# --------------------------------------------------------------------------------------------------------------
# browser round trips


class PendingBrowserCalls:
    """Browser tool calls waiting for the page's ``function_call_output``. One per session, on its event loop.

    ``expect(call_id, name)`` before sending ``response.function_call_arguments.done``; ``resolve(call_id,
    output)`` when the ``function_call_output`` item arrives; ``await wait(call_id, timeout_s)`` gives the
    :class:`ToolResult` (``browser_timeout`` when the page did not answer in time). ``cancel_all`` (barge-in,
    session end) answers every waiter with ``cancelled``.
    """

    def __init__(self) -> None:
        self._calls: dict[str, tuple[str, asyncio.Future[str], float]] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._calls

    def expect(self, call_id: str, name: str) -> None:
        if call_id in self._calls:
            raise ValueError(f"call {call_id!r} is already pending")
        self._calls[call_id] = (name, asyncio.get_running_loop().create_future(), time.monotonic())

    def resolve(self, call_id: str, output: Any) -> bool:
        """Deliver the page's output (a string; anything else is JSON-encoded). False for an unknown, late or
        duplicate ``call_id`` (the caller may report it as an error event)."""
        entry = self._calls.get(call_id)
        if entry is None or entry[1].done():
            return False
        if not isinstance(output, str):
            output = json.dumps(output, ensure_ascii=False, default=str)
        entry[1].set_result(output)
        return True

    async def wait(self, call_id: str, timeout_s: float) -> ToolResult:
        entry = self._calls.get(call_id)
        if entry is None:
            raise KeyError(f"no pending browser call {call_id!r}")
        name, future, start = entry
        try:
            async with asyncio.timeout(timeout_s):
                output = await asyncio.shield(future)
        except TimeoutError:
            return _failure(call_id, name, "browser_timeout",
                            f"the page did not answer {name} within {timeout_s:g} s", start)
        except asyncio.CancelledError:
            if future.cancelled():
                return _failure(call_id, name, "cancelled", f"{name} was cancelled", start)
            raise
        finally:
            self._calls.pop(call_id, None)
            if not future.done():
                future.cancel()
        return ToolResult(call_id, name, ok=True, output=output, duration_s=time.monotonic() - start)

    def cancel_all(self) -> None:
        """Answer every pending call with ``cancelled`` and forget them all."""
        calls, self._calls = self._calls, {}
        for _name, future, _start in calls.values():
            if not future.done():
                future.cancel()
