"""Tool calls written without ``<tool_call>`` tags: bare JSON (Qwen2.5-Coder-0.5B) and ```json fences (the 1.5B).

They are recognised in any chunking and never spoken; JSON or code that is not a call is spoken as text."""

from __future__ import annotations

import itertools

import pytest

from rtc_agent.apps.agent.reply_items import ParsedToolCall, SpokenText, ToolCallParseError
from rtc_agent.apps.agent.reply_parser import ReplyParser
from rtc_agent.apps.agent.tool_parser import ToolCallParser
from rtc_agent.apps.agent.untagged_calls import untagged_calls
from rtc_agent.engines.llm.messages import ChatDelta


def _ids():
    counter = itertools.count(1)
    return lambda: f"call_{next(counter)}"


def run(chunks: list[str]) -> tuple[str, list]:
    parser = ToolCallParser(id_factory=_ids())
    items = []
    for chunk in chunks:
        items.extend(parser.feed(chunk))
    items.extend(parser.flush())
    spoken = "".join(i.text for i in items if isinstance(i, SpokenText))
    calls = [i for i in items if not isinstance(i, SpokenText)]
    return spoken, calls


def every_split(text: str):
    yield [text]
    yield list(text)  # one character at a time
    for n in (2, 3, 5, 7):
        yield [text[i:i + n] for i in range(0, len(text), n)]


BARE = '{"name": "calculate", "arguments": {"expression": "17 * 23"}}'
FENCED = '```json\n{\n  "name": "get_current_time",\n  "arguments": {\n    "timezone": "Asia/Tokyo"\n  }\n}\n```'


@pytest.mark.parametrize("chunks", list(every_split(BARE)))
def test_bare_json_call_is_a_call_and_never_spoken(chunks):
    spoken, calls = run(chunks)
    assert spoken == ""
    assert len(calls) == 1 and isinstance(calls[0], ParsedToolCall)
    assert calls[0].name == "calculate" and calls[0].arguments == {"expression": "17 * 23"}


@pytest.mark.parametrize("chunks", list(every_split(FENCED)))
def test_fenced_json_call_is_a_call_and_never_spoken(chunks):
    spoken, calls = run(chunks)
    assert spoken == ""
    assert [(c.name, c.arguments) for c in calls] == [("get_current_time", {"timezone": "Asia/Tokyo"})]


@pytest.mark.parametrize("chunks", list(every_split("Let me check. " + BARE + " Done.")))
def test_text_around_a_bare_call_is_spoken(chunks):
    spoken, calls = run(chunks)
    assert spoken == "Let me check.  Done."
    assert [c.name for c in calls] == ["calculate"]


def test_string_arguments_parameters_key_and_braces_inside_strings():
    spoken, calls = run(['{"name": "f", "parameters": "{\\"a\\": \\"}{\\"}"}'])
    assert spoken == "" and calls[0].arguments == {"a": "}{"}


def test_a_json_list_of_calls_in_a_fence():
    spoken, calls = run(['```\n[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]\n```'])
    assert spoken == "" and [c.name for c in calls] == ["a", "b"]


@pytest.mark.parametrize("text", [
    "I use {curly braces} sometimes.",
    '{"answer": 42} is the JSON.',
    "```python\nprint(1)\n```",
    '{"name": "Bob", "age": 3}',  # a name but other keys and no arguments: data, not a call
])
def test_braces_and_code_that_are_not_calls_are_spoken(text):
    for chunks in every_split(text):
        spoken, calls = run(chunks)
        assert calls == [] and spoken == text


def test_an_unclosed_brace_in_prose_is_spoken_at_the_end():
    spoken, calls = run(["An open { brace", " and more"])
    assert calls == [] and spoken == "An open { brace and more"


def test_a_call_cut_off_by_max_tokens_is_reported_not_spoken():
    spoken, calls = run(['{"name": "calculate", "arguments": {"expr'])
    assert spoken == ""
    assert len(calls) == 1 and isinstance(calls[0], ToolCallParseError)
    spoken, calls = run(['```json\n{"name": "calculate", "argu'])
    assert spoken == "" and isinstance(calls[0], ToolCallParseError)


def test_partial_fence_is_held_until_decided():
    parser = ToolCallParser(id_factory=_ids())
    assert parser.feed("Hello ``") == [SpokenText("Hello ")]
    assert parser.in_call is False
    assert parser.feed("`json\n{") == []
    assert parser.in_call is True  # held: maybe a call


def test_tagged_calls_still_work_next_to_untagged():
    spoken, calls = run(["Sure. <tool_call>\n" + BARE + "\n</tool_call>"])
    assert spoken == "Sure. " and [c.name for c in calls] == ["calculate"]


def test_reply_parser_records_untagged_calls_and_speaks_nothing():
    parser = ReplyParser(id_factory=_ids())
    for piece in (BARE[:10], BARE[10:30], BARE[30:]):
        parser.feed(ChatDelta(text=piece))
    parser.feed(ChatDelta(finish_reason="stop"))
    assert parser.text == ""
    assert [c.name for c in parser.calls] == ["calculate"]


def test_untagged_calls_helper():
    assert untagged_calls(BARE)[0].name == "calculate"
    assert untagged_calls("hello") is None
    assert untagged_calls('{"function": "f", "arguments": {}}')[0].name == "f"
    assert untagged_calls('{"name": "f", "arguments": [1]}') is None
