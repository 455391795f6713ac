"""How the embedded engine honours ``tool_choice``: the assistant turn starts with the call (its tag, the name of a
named function and the opening of its arguments), ``none`` offers no tools; and a compact model answering a tool
result hears only the turn it answers."""

from __future__ import annotations

import json

from rtc_agent.apps.agent.builtin_tools import register_builtins
from rtc_agent.apps.agent.tool_parser import ToolCallParser
from rtc_agent.apps.agent.tool_registry import ToolRegistry
from rtc_agent.engines.llm.chat_template import forced_call_prefix, template_turns
from rtc_agent.engines.llm.messages import ChatRequest

SPECS = register_builtins(ToolRegistry()).specs()
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 17 times 23?"}]


def request(choice: object, tools: list | None = None) -> ChatRequest:
    return ChatRequest(messages=ASK, tools=SPECS if tools is None else tools, tool_choice=choice)


def test_a_named_function_is_started_for_the_model_in_both_forms() -> None:
    for choice in ({"type": "function", "function": {"name": "calculate"}}, {"type": "function", "name": "calculate"}):
        prefix = forced_call_prefix(request(choice), SPECS)
        assert prefix.startswith("<tool_call>") and '"name": "calculate"' in prefix and prefix.endswith('{"')
        # what the model then writes completes one call the agent's parser reads
        parser = ToolCallParser()
        items = parser.feed(prefix + 'expression": "17 * 23"}}') + parser.flush()
        assert [(i.name, i.arguments) for i in items] == [("calculate", {"expression": "17 * 23"})]


def test_required_opens_the_call_and_auto_none_or_unknown_names_do_not() -> None:
    assert forced_call_prefix(request("required"), SPECS) == '<tool_call>\n{"name": "'
    for choice in (None, "auto", "none", {"type": "function", "function": {"name": "no_such_tool"}}):
        assert forced_call_prefix(request(choice), SPECS) == ""
    assert forced_call_prefix(request("required", tools=[]), []) == ""  # nothing offered: nothing forced


def test_a_function_without_parameters_gets_an_empty_object_to_close() -> None:
    tools = [{"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}]
    prefix = forced_call_prefix(request({"type": "function", "name": "ping"}, tools=tools), tools)
    assert prefix.endswith('"arguments": {')


def test_tool_choice_none_offers_no_tools() -> None:
    _, tools = template_turns(request("none"), compact=True, template_has_tools=True)
    assert tools == []
    _, tools = template_turns(request("auto"), compact=True, template_has_tools=True)
    assert [t["function"]["name"] for t in tools] == ["get_current_time", "calculate", "convert_units"]


def test_a_compact_model_answering_a_tool_result_hears_only_that_turn() -> None:
    call = {"id": "c2", "type": "function", "function": {"name": "calculate",
                                                          "arguments": json.dumps({"expression": "17*23"})}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What time is it in Tokyo?"},
        {"role": "assistant", "content": "The time in Tokyo is 10:56 AM."},
        {"role": "user", "content": "What is 17 times 23?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c2", "content": '{"result": 391}'},
    ]
    turns, tools = template_turns(ChatRequest(messages=messages, tools=SPECS), compact=True, template_has_tools=True)
    text = json.dumps(turns)
    assert tools == [] and "10:56" not in text and "Tokyo" not in text
    assert turns[0]["role"] == "system" and "391" in turns[-1]["content"]
    assert "What is 17 times 23?" in turns[-1]["content"]  # the answer note names the question
