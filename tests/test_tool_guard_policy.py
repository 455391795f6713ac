"""The tool guard in the response loop, with the scripted chat model in a real worker: an answer that states what
a declared built-in tool gives, without calling it, is discarded unspoken and asked again with the tool forced;
answers that call the tool, turns that ask for nothing a tool gives, and tools the session does not have are left
alone."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pytest

from rtc_agent.apps.agent.browser_calls import PendingBrowserCalls
from rtc_agent.apps.agent.builtin_tools import register_builtins
from rtc_agent.apps.agent.responder import Responder, ResponseOptions
from rtc_agent.apps.agent.tool_guard import guarded_tool
from rtc_agent.apps.agent.tool_registry import ToolRegistry
from rtc_agent.engines.llm.client import LLMClient
from rtc_agent.engines.tts.base import Synthesis
from rtc_agent.worker import Worker
from tests.fakes import ScriptedChat, register

RATE = 16000
TOKYO_CALL = '<tool_call>{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}</tool_call>'
FIXED = dt.datetime(2026, 7, 4, 19, 29, tzinfo=dt.UTC)  # 04:29 in Tokyo


class Voice:
    """50 ms of tone per clause; remembers what it was asked to say."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def synthesize(self, text: str, **_: Any) -> Synthesis:
        self.texts.append(text)
        return Synthesis(np.full(800, 1000, dtype=np.int16), RATE, text, "scripted")


@pytest.fixture
async def worker():
    w = Worker()
    yield w
    await w.close()


async def respond(worker: Worker, chat: ScriptedChat, question: str, *, tools: ToolRegistry | None = None,
                  **options: Any) -> tuple[Responder, list, Voice]:
    register(worker, "llm", chat)
    events: list = []
    voice = Voice()
    responder = Responder(llm=LLMClient(worker, "llm"), synthesizer=voice, speech=None, emit=events.append,
                          tools=tools or register_builtins(ToolRegistry(), now=lambda: FIXED),
                          pending=PendingBrowserCalls(),
                          history=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": question}],
                          options=ResponseOptions(**{"tool_guard": True, **options}))
    await responder.run()
    return responder, events, voice


def spoken(events: list) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")


@pytest.mark.parametrize(("question", "made_up", "call", "tool"), [
    ("What time is it in Tokyo?", "The current time in Tokyo is 14:00.", TOKYO_CALL, "get_current_time"),
    ("What is 17 times 23?", "17 times 23 is 401.",
     '<tool_call>{"name": "calculate", "arguments": {"expression": "17*23"}}</tool_call>', "calculate"),
    ("How many miles is 10 kilometers?", "That is about 5 miles.",
     '<tool_call>{"name": "convert_units", "arguments": {"value": 10, "from_unit": "km", "to_unit": "mi"}}'
     '</tool_call>', "convert_units"),
])
async def test_an_answer_without_the_tool_is_discarded_and_asked_again_with_it_forced(worker, question, made_up,
                                                                                      call, tool):
    chat = ScriptedChat(made_up, call, "Here is the answer from the tool.")
    responder, events, voice = await respond(worker, chat, question)
    assert [r.tool_choice for r in chat.requests] == [None, {"type": "function", "function": {"name": tool}}, None]
    assert responder.guard_retries == [tool]
    heard = spoken(events) + " ".join(voice.texts)
    assert made_up not in heard and made_up.split()[-1] not in heard  # never spoken, never shown
    done = events[-1].response
    assert done["status"] == "completed"
    assert made_up not in str(done["output"])  # not in the items the conversation keeps either
    assert [o["type"] for o in done["output"]] == ["message", "function_call_output", "message"]
    assert any(e.type == "response.function_call_arguments.done" and e.name == tool for e in events)
    # the history sent to the model never holds the discarded answer
    assert all(made_up not in str(m) for r in chat.requests for m in r.messages)


async def test_the_tool_result_reaches_the_answer(worker):
    chat = ScriptedChat("It is 2 PM in Tokyo.", TOKYO_CALL, "It is 4:29 in the morning in Tokyo.")
    _, events, _ = await respond(worker, chat, "What time is it in Tokyo?")
    result = next(e for e in events if e.type == "conversation.item.created").item
    assert "04:29" in result["output"] and "Asia/Tokyo" in result["output"]
    assert "4:29" in spoken(events)


async def test_an_answer_that_calls_the_tool_is_spoken_as_it_is(worker):
    chat = ScriptedChat(["Let me check. ", TOKYO_CALL], "It is 4:29 AM.")
    responder, _, voice = await respond(worker, chat, "What time is it in Tokyo?")
    assert responder.guard_retries == [] and len(chat.requests) == 2
    assert voice.texts[0] == "Let me check."  # held until the call came, then spoken
    assert [r.tool_choice for r in chat.requests] == [None, None]


async def test_turns_that_ask_no_tool_are_not_held_or_asked_again(worker):
    chat = ScriptedChat("Tokyo is the capital of Japan.")
    responder, events, _ = await respond(worker, chat, "Tell me about Tokyo.")
    assert len(chat.requests) == 1 and responder.guard_retries == []
    assert "capital" in spoken(events)


async def test_the_guard_is_off_by_default_for_a_plain_responder_and_with_tools_not_offered(worker):
    chat = ScriptedChat("It is 2 PM.", default="It is 2 PM.")
    responder, _, _ = await respond(worker, chat, "What time is it?", tool_guard=False)
    assert len(chat.requests) == 1 and responder.guard_retries == []
    other = Worker()
    try:
        responder, _, _ = await respond(other, chat, "What time is it?", offer_tools=False)
    finally:
        await other.close()
    assert responder.guard_retries == [] and not chat.requests[-1].tools


def test_only_declared_builtin_server_tools_count() -> None:
    question = [{"role": "user", "content": "What time is it in Tokyo?"}]
    tools = register_builtins(ToolRegistry())
    assert guarded_tool(question, tools) == "get_current_time"
    tools.remove("get_current_time")
    assert guarded_tool(question, tools) is None
    # a page's browser tool of the same name is not the built-in one
    replaced = register_builtins(ToolRegistry())
    replaced.declare_browser_tools([{"type": "function", "name": "get_current_time", "parameters": {}}],
                                   replace_server=True)
    assert guarded_tool(question, replaced) is None
    # only the user's turn being answered counts
    assert guarded_tool([*question, {"role": "tool", "tool_call_id": "c1", "content": "{}"}], tools) is None
    assert guarded_tool([{"role": "user", "content": [{"type": "text", "text": "What is 6 times 7?"}]}],
                        tools) == "calculate"


async def test_a_forced_answer_that_still_has_no_call_is_spoken_once(worker):
    """The guard asks again once: a server that ignores tool_choice gets its second answer through."""
    chat = ScriptedChat("It is 2 PM.", "I cannot check the time.")
    responder, events, _ = await respond(worker, chat, "What time is it?")
    assert len(chat.requests) == 2 and responder.guard_retries == ["get_current_time"]
    assert "cannot check" in spoken(events) and "2 PM" not in spoken(events)
