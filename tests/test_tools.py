"""The tool registry: schema validation, server tools (sync/async, timeouts, failures as error results), browser
tool declarations and round trips."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from rtc_agent.apps.agent.browser_calls import PendingBrowserCalls
from rtc_agent.apps.agent.tool import Tool, ToolError, ToolResult
from rtc_agent.apps.agent.tool_registry import ToolRegistry
from rtc_agent.apps.agent.tool_schema import SchemaError, check_schema, validate
from rtc_agent.errors import InvalidRequest

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2, "description": "a city"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2, "uniqueItems": True},
        "ratio": {"type": ["number", "null"], "exclusiveMinimum": 0},
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "nested": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                   "additionalProperties": False},
    },
    "required": ["city"],
    "additionalProperties": False,
}


# validation ----------------------------------------------------------------------------------------------------


def test_valid_arguments() -> None:
    args = {"city": "Paris", "days": 3, "unit": "c", "tags": ["a", "b"], "ratio": None, "code": "CDG",
            "nested": {"ok": True}}
    assert validate(args, SCHEMA) == []
    assert validate({"city": "Rome", "days": 2.0}, SCHEMA) == []  # 2.0 is an integer in JSON schema


@pytest.mark.parametrize(("args", "fragment"), [
    ({}, "missing required property 'city'"),
    ({"city": 5}, "arguments.city: expected string, got 5"),
    ({"city": "P"}, "shorter than 2"),
    ({"city": "Paris", "days": "3"}, 'arguments.days: expected integer, got "3"'),
    ({"city": "Paris", "days": 1.5}, "expected integer"),
    ({"city": "Paris", "days": True}, "expected integer"),
    ({"city": "Paris", "days": 9}, "must be <= 7"),
    ({"city": "Paris", "unit": "k"}, "must be one of"),
    ({"city": "Paris", "tags": ["a", "a"]}, "unique"),
    ({"city": "Paris", "tags": ["a", "b", "c"]}, "more than 2 items"),
    ({"city": "Paris", "tags": ["a", 1]}, "arguments.tags[1]: expected string"),
    ({"city": "Paris", "ratio": 0}, "must be > 0"),
    ({"city": "Paris", "code": "cdg"}, "does not match"),
    ({"city": "Paris", "nested": {}}, "arguments.nested: missing required property 'ok'"),
    ({"city": "Paris", "nested": {"ok": True, "x": 1}}, "unexpected property 'x'"),
    ({"city": "Paris", "country": "FR"}, "unexpected property 'country' (allowed: city, days"),
])
def test_invalid_arguments(args: dict, fragment: str) -> None:
    errors = validate(args, SCHEMA)
    assert any(fragment in e for e in errors), errors


def test_combinators() -> None:
    schema = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert validate("x", schema) == [] and validate(3, schema) == []
    assert validate(1.5, schema)
    one = {"oneOf": [{"type": "number"}, {"type": "integer"}]}
    assert validate(1.5, one) == [] and validate(2, one)  # 2 matches both
    assert validate(5, {"allOf": [{"minimum": 1}, {"maximum": 3}]})
    assert validate("a", {"not": {"type": "string"}})
    assert validate(3, {"const": 3}) == [] and validate(True, {"const": 1})
    assert validate(0.3, {"multipleOf": 0.1}) == [] and validate(0.35, {"multipleOf": 0.1})


def test_schema_check_rejects_what_it_cannot_validate() -> None:
    check_schema(SCHEMA)
    for bad, fragment in [
        ({"$ref": "#/defs/x"}, "unsupported schema keyword '$ref'"),
        ({"type": "object", "properties": {"a": {"if": {}}}}, "properties.a: unsupported schema keyword 'if'"),
        ({"type": "strange"}, "unknown type"),
        ({"pattern": "("}, "not a valid regular expression"),
        ({"required": "a"}, "must be a list"),
        ({"enum": []}, "non-empty"),
        ({"multipleOf": 0}, "> 0"),
        ("string", "must be an object"),
    ]:
        with pytest.raises(SchemaError) as err:
            check_schema(bad)
        assert fragment in str(err.value)


def test_tool_definition_errors() -> None:
    with pytest.raises(SchemaError, match="tool name"):
        Tool("bad name!", "", {"type": "object"}, handler=lambda: 1)
    with pytest.raises(SchemaError, match="handler"):
        Tool("t", "", {"type": "object"})
    with pytest.raises(SchemaError, match="type 'object'"):
        Tool("t", "", {"type": "string"}, handler=lambda: 1)
    with pytest.raises(SchemaError, match="timeout_s"):
        Tool("t", "", {"type": "object"}, handler=lambda: 1, timeout_s=0)


# server tools --------------------------------------------------------------------------------------------------


def make_registry() -> ToolRegistry:
    registry = ToolRegistry(default_timeout_s=2.0)

    @registry.tool(parameters={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                               "required": ["a", "b"], "additionalProperties": False})
    def add(a: float, b: float) -> float:
        """Add two numbers.

        More text that is not part of the description."""
        return a + b

    async def greet(name: str = "you") -> str:
        await asyncio.sleep(0)
        return f"hello {name}"

    registry.register(greet, description="Greet someone.",
                      parameters={"type": "object", "properties": {"name": {"type": "string"}}})

    def fail() -> None:
        raise RuntimeError("disk on fire")

    registry.register(fail, description="Always fails.")

    def refuse() -> None:
        raise ToolError("unknown city 'Atlantis'")

    registry.register(refuse, description="Refuses.")
    return registry


async def test_sync_and_async_server_tools_run() -> None:
    registry = make_registry()
    result = await registry.run("c1", "add", {"a": 2, "b": 0.5})
    assert result.ok and result.output == 2.5 and result.call_id == "c1" and result.name == "add"
    assert result.message() == {"role": "tool", "tool_call_id": "c1", "content": "2.5"}
    greeting = await registry.run("c2", "greet", {"name": "Ada"})
    assert greeting.ok and greeting.content() == "hello Ada"  # strings go to the model as they are
    assert registry.get("add") is not None and registry.get("add").description == "Add two numbers."


async def test_invalid_and_unknown_calls_are_error_results_and_do_not_run() -> None:
    calls: list[object] = []
    registry = ToolRegistry()
    registry.register(lambda x: calls.append(x), name="record",
                      parameters={"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})
    bad = await registry.run("c1", "record", {"x": "one"})
    assert not bad.ok and bad.error_type == "invalid_arguments" and "arguments.x: expected integer" in bad.error
    assert json.loads(bad.content()) == {"error": {"type": "invalid_arguments", "message": bad.error}}
    not_object = await registry.run("c2", "record", ["x"])
    assert not_object.error_type == "invalid_arguments"
    unknown = await registry.run("c3", "weather", {})
    assert unknown.error_type == "unknown_tool" and "record" in unknown.error
    assert calls == []


async def test_failures_become_error_results() -> None:
    registry = make_registry()
    failed = await registry.run("c1", "fail", {})
    assert not failed.ok and failed.error_type == "tool_error" and failed.error == "RuntimeError: disk on fire"
    refused = await registry.run("c2", "refuse", {})
    assert refused.error == "unknown city 'Atlantis'"  # ToolError: the message as is
    assert refused.to_dict()["error"] == {"type": "tool_error", "message": "unknown city 'Atlantis'"}


async def test_timeouts_for_async_and_sync_handlers() -> None:
    release = threading.Event()
    registry = ToolRegistry()

    async def hang() -> None:
        await asyncio.Event().wait()

    def block() -> None:
        release.wait(10)

    registry.register(hang, description="", timeout_s=0.05)
    registry.register(block, description="", timeout_s=0.05)
    try:
        for name in ("hang", "block"):
            result = await registry.run("c", name, {})
            assert not result.ok and result.error_type == "tool_timeout"
            assert "did not finish within 0.05 s" in result.error
    finally:
        release.set()  # the blocked thread ends


async def test_unserializable_output_is_stringified() -> None:
    registry = ToolRegistry()
    registry.register(lambda: object(), name="obj", description="")
    result = await registry.run("c", "obj", {})
    assert result.ok and isinstance(result.output, str)


def test_duplicate_names_and_copy() -> None:
    registry = make_registry()
    with pytest.raises(ValueError, match="already registered"):
        registry.register(lambda: 1, name="add")
    copy = registry.copy()
    copy.remove("add")
    assert "add" in registry and "add" not in copy
    specs = registry.specs()
    assert specs[0] == {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.", "parameters": registry.get("add").parameters}}


# browser tools -------------------------------------------------------------------------------------------------

PAGE_TOOLS = [
    {"type": "function", "name": "set_theme", "description": "Switch the page between light and dark.",
     "parameters": {"type": "object", "properties": {"theme": {"type": "string", "enum": ["light", "dark"]}},
                    "required": ["theme"]}},
    {"type": "function", "function": {"name": "show_note", "description": "Show a note.",
                                      "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}},
     "timeout_s": 3},
]


def test_browser_tool_declarations() -> None:
    registry = make_registry()
    declared = registry.declare_browser_tools(PAGE_TOOLS)
    assert [(t.name, t.kind, t.timeout_s) for t in declared] == [("set_theme", "browser", 15.0),
                                                                  ("show_note", "browser", 3.0)]
    assert {t.name for t in registry.tools("browser")} == {"set_theme", "show_note"}
    assert "set_theme" in [s["function"]["name"] for s in registry.specs()]
    assert declared[0].realtime_spec()["name"] == "set_theme"
    # a new declaration replaces the old one; an empty list removes them all
    registry.declare_browser_tools(PAGE_TOOLS[:1])
    assert [t.name for t in registry.tools("browser")] == ["set_theme"]
    registry.declare_browser_tools([])
    assert registry.tools("browser") == [] and "add" in registry


@pytest.mark.parametrize(("specs", "fragment"), [
    ("nope", "must be a list"),
    ([{"type": "function", "name": "add", "parameters": {"type": "object"}}], "server tool"),
    ([{"type": "retrieval"}], "only type 'function'"),
    ([{"type": "function", "name": "x y"}], "tool name"),
    ([{"type": "function", "name": "x", "parameters": {"type": "object", "properties": {"a": {"$ref": "#"}}}}],
     "unsupported schema keyword"),
    ([{"type": "function", "name": "x", "timeout_s": 0}], "timeout_s"),
    ([{"type": "function", "name": "x"}, {"type": "function", "name": "x"}], "unique"),
])
def test_bad_browser_declarations_are_rejected_whole(specs: object, fragment: str) -> None:
    registry = make_registry()
    registry.declare_browser_tools(PAGE_TOOLS)
    with pytest.raises(InvalidRequest) as err:
        registry.declare_browser_tools(specs)
    assert err.value.code == "invalid_tools" and fragment in err.value.message
    assert {t.name for t in registry.tools("browser")} == {"set_theme", "show_note"}  # unchanged


async def test_browser_call_round_trip_and_validation() -> None:
    registry = make_registry()
    registry.declare_browser_tools(PAGE_TOOLS)
    checked = registry.check("call_1", "set_theme", {"theme": "dark"})
    assert isinstance(checked, Tool) and checked.kind == "browser"
    rejected = registry.check("call_2", "set_theme", {"theme": "purple"})
    assert isinstance(rejected, ToolResult) and rejected.error_type == "invalid_arguments"
    with pytest.raises(ValueError, match="browser tool"):
        await registry.run("call_1", "set_theme", {"theme": "dark"})

    pending = PendingBrowserCalls()
    pending.expect("call_1", "set_theme")
    waiter = asyncio.create_task(pending.wait("call_1", checked.timeout_s))
    await asyncio.sleep(0)
    assert pending.resolve("call_1", '{"ok": true}')
    result = await waiter
    assert result.ok and result.output == '{"ok": true}' and result.content() == '{"ok": true}'
    assert not pending.resolve("call_1", "late")  # answered already
    assert not pending.resolve("call_404", "x") and len(pending) == 0


async def test_browser_call_timeout_and_cancel() -> None:
    pending = PendingBrowserCalls()
    pending.expect("a", "set_theme")
    result = await pending.wait("a", 0.05)
    assert not result.ok and result.error_type == "browser_timeout" and "set_theme" in result.error
    assert "a" not in pending

    pending.expect("b", "show_note")
    waiter = asyncio.create_task(pending.wait("b", 10))
    await asyncio.sleep(0)
    pending.cancel_all()
    cancelled = await waiter
    assert cancelled.error_type == "cancelled" and len(pending) == 0

    pending.expect("c", "show_note")
    assert pending.resolve("c", {"shown": True})  # non-string outputs are JSON-encoded
    assert (await pending.wait("c", 1)).output == '{"shown": true}'
