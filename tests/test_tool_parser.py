"""The streaming <tool_call> parser: tags split at every position, several calls, bad JSON, text around calls, and
the delta-level ReplyParser."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable

import pytest

from rtc_agent.apps.agent.reply_items import ParsedItem, ParsedToolCall, SpokenText, ToolCallParseError, merge_text
from rtc_agent.apps.agent.reply_parser import ReplyParser
from rtc_agent.apps.agent.tagged_calls import CLOSE_TAG, OPEN_TAG
from rtc_agent.apps.agent.tool_parser import ToolCallParser
from rtc_agent.engines.llm import ChatDelta, ToolCallDelta


def ids() -> itertools.count[int]:
    return itertools.count(1)


def parser() -> ToolCallParser:
    counter = ids()
    return ToolCallParser(id_factory=lambda: f"call_{next(counter)}")


def run(chunks: Iterable[str], p: ToolCallParser | None = None) -> list[ParsedItem]:
    """Feed ``chunks`` and flush; assert no piece of a tag is ever spoken; merge adjacent text."""
    p = p or parser()
    items: list[ParsedItem] = []
    for chunk in chunks:
        out = p.feed(chunk)
        for item in out:
            if isinstance(item, SpokenText):
                assert OPEN_TAG not in item.text and CLOSE_TAG not in item.text
        items += out
    items += p.flush()
    return merge_text(items)


CALL = '{"name": "get_current_time", "arguments": {"timezone": "Europe/Paris"}}'
TEXT = f"Let me check.\n{OPEN_TAG}\n{CALL}\n{CLOSE_TAG}\nDone."


def expected_items() -> list[ParsedItem]:
    return [
        SpokenText("Let me check.\n"),
        ParsedToolCall("call_1", "get_current_time", {"timezone": "Europe/Paris"}, CALL),
        SpokenText("\nDone."),
    ]


def test_whole_text_in_one_chunk() -> None:
    assert run([TEXT]) == expected_items()


@pytest.mark.parametrize("cut", range(1, len(TEXT)))
def test_split_in_two_at_every_position(cut: int) -> None:
    assert run([TEXT[:cut], TEXT[cut:]]) == expected_items()


def test_one_character_at_a_time() -> None:
    assert run(list(TEXT)) == expected_items()


@pytest.mark.parametrize("size", [2, 3, 5, 7, 11])
def test_fixed_size_chunks(size: int) -> None:
    assert run([TEXT[i:i + size] for i in range(0, len(TEXT), size)]) == expected_items()


def test_text_before_a_tag_is_released_before_the_call_completes() -> None:
    p = parser()
    assert p.feed("Sure, one moment. <tool") == [SpokenText("Sure, one moment. ")]  # "<tool" held back
    assert p.feed("_call>{\"name\": \"calc") == []
    assert p.in_call
    out = p.feed("ulate\", \"arguments\": {\"expression\": \"2+2\"}}</tool_call>")
    assert out == [ParsedToolCall("call_1", "calculate", {"expression": "2+2"}, out[0].raw)]  # type: ignore[union-attr]
    assert not p.in_call


def test_a_lone_angle_bracket_is_text() -> None:
    assert run(["if a <", " b then"]) == [SpokenText("if a < b then")]
    assert run(["x <"]) == [SpokenText("x <")]
    assert run(["3 <tool", "box> is fine"]) == [SpokenText("3 <toolbox> is fine")]


def test_dangling_partial_tag_at_the_end_is_not_spoken() -> None:
    assert run(["Okay. <tool_ca"]) == [SpokenText("Okay. ")]


def test_several_calls_and_text_between() -> None:
    text = (
        "First "
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>'
        " then "
        '<tool_call>{"name": "b", "arguments": "{\\"y\\": [1, 2]}"}</tool_call>'
        '<tool_call>{"name": "c"}</tool_call>'
        " end"
    )
    for size in (1, 4, len(text)):
        items = run([text[i:i + size] for i in range(0, len(text), size)])
        assert [type(i).__name__ for i in items] == [
            "SpokenText", "ParsedToolCall", "SpokenText", "ParsedToolCall", "ParsedToolCall", "SpokenText"]
        calls = [i for i in items if isinstance(i, ParsedToolCall)]
        assert [(c.call_id, c.name, c.arguments) for c in calls] == [
            ("call_1", "a", {"x": 1}), ("call_2", "b", {"y": [1, 2]}), ("call_3", "c", {})]
        assert "".join(i.text for i in items if isinstance(i, SpokenText)) == "First  then  end"


def test_a_json_list_gives_several_calls() -> None:
    items = run(['<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"k": "v"}}]</tool_call>'])
    assert [(i.name, i.arguments) for i in items if isinstance(i, ParsedToolCall)] == [("a", {}), ("b", {"k": "v"})]


def test_parameters_alias_and_code_fence() -> None:
    items = run(['<tool_call>\n```json\n{"name": "a", "parameters": {"q": 1}}\n```\n</tool_call>'])
    assert items == [ParsedToolCall("call_1", "a", {"q": 1}, items[0].raw)]  # type: ignore[union-attr]


@pytest.mark.parametrize(("body", "fragment"), [
    ('{"name": "a", "arguments": {"x": 1}', "malformed JSON"),
    ("not json at all", "malformed JSON"),
    ('{"arguments": {}}', "no 'name'"),
    ('{"name": "a", "arguments": "{oops"}', "arguments of a are not valid JSON"),
    ('{"name": "a", "arguments": [1, 2]}', "must be a JSON object"),
    ('"just a string"', "must be a JSON object"),
    ("", "empty"),
    ('{"name": "a"} trailing', "unexpected text"),
])
def test_malformed_calls_are_reported_not_raised(body: str, fragment: str) -> None:
    items = run(["Hmm. ", f"<tool_call>{body}</tool_call>", " Sorry."])
    assert items[0] == SpokenText("Hmm. ")
    assert isinstance(items[1], ToolCallParseError)
    assert fragment in items[1].message
    assert items[1].call_id == "call_1"
    assert items[2] == SpokenText(" Sorry.")


def test_bad_arguments_keep_the_name() -> None:
    items = run(['<tool_call>{"name": "calc", "arguments": "{bad"}</tool_call>'])
    assert isinstance(items[0], ToolCallParseError) and items[0].name == "calc"


def test_unterminated_call_with_complete_json_is_accepted() -> None:
    # servers that use </tool_call> as a stop string cut the closing tag off
    items = run(['Checking. <tool_call>\n{"name": "a", "arguments": {"n": 2}}\n'])
    assert items == [SpokenText("Checking. "), ParsedToolCall("call_1", "a", {"n": 2}, items[1].raw)]  # type: ignore


def test_unterminated_call_with_incomplete_json_is_an_error() -> None:
    items = run(['<tool_call>{"name": "a", "argu'])
    assert len(items) == 1 and isinstance(items[0], ToolCallParseError)
    assert "unterminated" in items[0].message


def test_new_call_before_the_previous_closed() -> None:
    items = run(['<tool_call>{"name": "a", "arguments": {}}<tool_call>{"name": "b", "arguments": {}}</tool_call>'])
    assert [i.name for i in items if isinstance(i, ParsedToolCall)] == ["a", "b"]


def test_stray_closing_tag_is_dropped() -> None:
    assert run(["Fine.</tool_call> Really."]) == [SpokenText("Fine. Really.")]


def test_over_long_call_is_reported_and_skipped() -> None:
    p = ToolCallParser(id_factory=lambda: "id", max_call_chars=50)
    items = run(["<tool_call>", '{"name": "a", "arguments": {"x": "' + "y" * 200, '"}}</tool_call> after'], p)
    assert isinstance(items[0], ToolCallParseError) and "longer than 50" in items[0].message
    assert items[1:] == [SpokenText(" after")]


def test_arguments_json_is_compact() -> None:
    call = ParsedToolCall("c", "f", {"a": 1, "b": "é"})
    assert json.loads(call.arguments_json) == {"a": 1, "b": "é"}
    assert " " not in call.arguments_json


# ReplyParser ---------------------------------------------------------------------------------------------------


def reply_parser() -> ReplyParser:
    counter = ids()
    return ReplyParser(id_factory=lambda: f"gen_{next(counter)}")


def test_reply_parser_structured_calls_complete_when_the_next_index_starts() -> None:
    rp = reply_parser()
    assert rp.feed(ChatDelta(text="One sec.")) == [SpokenText("One sec.")]
    assert rp.feed(ChatDelta(tool_calls=(ToolCallDelta(0, id="call_x", name="a"),))) == []
    assert rp.in_call
    assert rp.feed(ChatDelta(tool_calls=(ToolCallDelta(0, arguments='{"q": '),))) == []
    assert rp.feed(ChatDelta(tool_calls=(ToolCallDelta(0, arguments='"v"}'),))) == []
    out = rp.feed(ChatDelta(tool_calls=(ToolCallDelta(1, name="b"),)))
    assert out == [ParsedToolCall("call_x", "a", {"q": "v"}, '{"q": "v"}')]
    out = rp.feed(ChatDelta(finish_reason="tool_calls", usage="u"))  # type: ignore[arg-type]
    assert out == [ParsedToolCall("gen_1", "b", {}, "")]
    assert rp.finish_reason == "tool_calls" and rp.usage == "u"
    assert rp.text == "One sec." and len(rp.calls) == 2
    assert rp.finish() == []  # idempotent


def test_reply_parser_mixes_text_calls_and_reports_bad_structured_arguments() -> None:
    rp = reply_parser()
    items = []
    for piece in ["Hi <tool", '_call>{"name": "t", "arguments": {}}</tool_call>', " bye"]:
        items += rp.feed(ChatDelta(text=piece))
    items += rp.feed(ChatDelta(tool_calls=(ToolCallDelta(0, id="c9", name="u", arguments="{nope"),)))
    items += rp.feed(ChatDelta(finish_reason="stop"))
    assert items[0] == SpokenText("Hi ")
    assert isinstance(items[1], ParsedToolCall) and items[1].name == "t"
    assert items[2] == SpokenText(" bye")
    assert isinstance(items[3], ToolCallParseError) and items[3].name == "u" and items[3].call_id == "c9"


def test_reply_parser_finish_without_finish_reason_flushes() -> None:
    rp = reply_parser()
    rp.feed(ChatDelta(text='<tool_call>{"name": "a", "arguments": {}}'))
    assert [type(i).__name__ for i in rp.finish()] == ["ParsedToolCall"]


@pytest.mark.parametrize("args", ["[" * 3000 + "]" * 3000, "1" * 5000])
def test_hostile_arguments_are_a_parse_error_not_an_exception(args):
    """Arguments nested deeper than Python recurses, or a number too long to convert, from a tagged call, a
    string inside one, or a structured (OpenAI-style) call: an error item the agent reports, never a crash."""
    body = "[" * 3000 + "]" * 3000
    tagged = run([f'{OPEN_TAG}{{"name": "f", "arguments": {json.dumps(args)}}}{CLOSE_TAG}'])
    deep = run([f"{OPEN_TAG}{body}{CLOSE_TAG}"])
    structured = ReplyParser()
    items = structured.feed(ChatDelta(tool_calls=[ToolCallDelta(index=0, id="c1", name="f", arguments=args)]))
    items += structured.finish()
    for got in (tagged, deep, items):
        assert [type(i) for i in got] == [ToolCallParseError], got
