"""The agent's response loop with a scripted LLM and a fake voice: tool calls and results, browser tools, tool
timeouts, fillers, held (preemptive) responses, and barge-in truncation on a real SpeechOutput."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import numpy as np

from rtc_agent.apps.agent.browser_calls import PendingBrowserCalls
from rtc_agent.apps.agent.builtin_tools import register_builtins
from rtc_agent.apps.agent.responder import Responder, ResponseOptions
from rtc_agent.apps.agent.tool_registry import ToolRegistry
from rtc_agent.engines.llm.messages import ChatDelta, ChatRequest
from rtc_agent.engines.tts.base import Synthesis
from rtc_agent.rtc import SpeechOutput

RATE = 16000


class ScriptedLLM:
    """Each stream plays the next scripted list of text pieces (raw <tool_call> markup allowed)."""

    def __init__(self, *replies: list[str], delay: float = 0.0) -> None:
        self.replies = list(replies)
        self.requests: list[ChatRequest] = []
        self.delay = delay

    @contextlib.asynccontextmanager
    async def stream(self, request: ChatRequest):
        self.requests.append(request)
        pieces = self.replies.pop(0) if self.replies else ["Okay."]

        async def deltas():
            for piece in pieces:
                await asyncio.sleep(self.delay)
                yield ChatDelta(text=piece)
            yield ChatDelta(finish_reason="stop")

        yield deltas()


class FakeVoice:
    """100 ms of a constant tone per word."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def synthesize(self, text: str, **_: Any) -> Synthesis:
        self.texts.append(text)
        samples = int(0.1 * RATE * max(1, len(text.split())))
        return Synthesis(np.full(samples, 3000, dtype=np.int16), RATE, text, "fake")


def make(llm: ScriptedLLM, *, speech: SpeechOutput | None = None, tools: ToolRegistry | None = None,
         held: bool = False, **options: Any) -> tuple[Responder, list, FakeVoice]:
    events: list = []
    voice = FakeVoice()
    responder = Responder(llm=llm, synthesizer=voice, speech=speech, emit=events.append,
                          tools=tools or register_builtins(ToolRegistry()), pending=PendingBrowserCalls(),
                          history=[{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "What is six times seven?"}],
                          options=ResponseOptions(**options), held=held)
    return responder, events, voice


def types(events: list) -> list[str]:
    return [e.type for e in events]


async def test_tool_call_result_then_spoken_answer():
    llm = ScriptedLLM(['Let me work that out. <tool_call>{"name": "calc', 'ulate", "arguments": {"expression": "6*7"}}',
                       "</tool_call>"], ["It is 42."])
    responder, events, voice = make(llm)
    await responder.run()
    assert types(events) == [
        "response.created", "response.output_audio_transcript.delta", "response.function_call_arguments.done",
        "conversation.item.created", "response.output_audio_transcript.delta", "response.done"]
    call = events[2]
    assert call.name == "calculate" and '"6*7"' in call.arguments
    assert events[3].item["output"].find("42") >= 0 and events[3].item["type"] == "function_call_output"
    # the tool result went back to the model in the second request
    second = llm.requests[1].messages
    assert second[-2]["tool_calls"][0]["function"]["name"] == "calculate"
    assert second[-1]["role"] == "tool" and "42" in second[-1]["content"]
    done = events[-1].response
    assert done["status"] == "completed"
    assert [o["type"] for o in done["output"]] == ["message", "function_call_output", "message"]
    assert voice.texts == ["Let me work that out.", "It is 42."]  # the tag is never spoken
    assert (llm.requests[0].tools and not llm.requests[1].tools) or llm.requests[1].tools


async def test_invalid_arguments_are_answered_as_errors_not_executed():
    llm = ScriptedLLM(['<tool_call>{"name": "convert_units", "arguments": {"value": "ten"}}</tool_call>'],
                      ["Sorry, I could not convert that."])
    responder, events, _ = make(llm)
    await responder.run()
    result = next(e for e in events if e.type == "conversation.item.created").item
    assert '"invalid_arguments"' in result["output"]
    assert "invalid_arguments" in llm.requests[1].messages[-1]["content"]


async def test_browser_tool_round_trip():
    tools = register_builtins(ToolRegistry())
    tools.declare_browser_tools([{"type": "function", "name": "show_banner", "description": "Show a banner",
                                  "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                                                 "required": ["text"]}}])
    llm = ScriptedLLM(['<tool_call>{"name": "show_banner", "arguments": {"text": "hi"}}</tool_call>'], ["Done."])
    responder, events, _ = make(llm, tools=tools)
    task = asyncio.get_running_loop().create_task(responder.run())
    while "response.function_call_arguments.done" not in types(events):
        await asyncio.sleep(0.01)
    call = events[-1]
    assert call.name == "show_banner"
    assert responder.pending.resolve(call.call_id, '{"shown": true}')
    await task
    assert llm.requests[1].messages[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": '{"shown": true}'}
    assert events[-1].response["status"] == "completed"


async def test_browser_tool_timeout_returns_an_error_result():
    tools = ToolRegistry(browser_timeout_s=0.2)
    tools.declare_browser_tools([{"type": "function", "name": "show_banner", "description": "Show a banner",
                                  "parameters": {"type": "object", "properties": {}}}])
    llm = ScriptedLLM(['<tool_call>{"name": "show_banner", "arguments": {}}</tool_call>'], ["The page did not answer."])
    responder, _events, _ = make(llm, tools=tools)
    await responder.run()
    assert "browser_timeout" in llm.requests[1].messages[-1]["content"]


async def test_slow_server_tool_times_out_after_a_spoken_filler():
    tools = ToolRegistry()

    async def slow_lookup(city: str) -> str:
        await asyncio.sleep(5)
        return "sunny"

    tools.register(slow_lookup, name="weather", description="Weather of a city", timeout_s=1.3,
                   parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    llm = ScriptedLLM(['<tool_call>{"name": "weather", "arguments": {"city": "Oslo"}}</tool_call>'],
                      ["The weather service is slow right now."])
    responder, events, voice = make(llm, tools=tools, filler="One moment.", filler_after_s=0.2)
    await responder.run()
    assert voice.texts[0] == "One moment."
    assert "tool_timeout" in llm.requests[1].messages[-1]["content"]
    assert events[-1].response["status"] == "completed"


async def test_held_response_is_silent_until_released():
    llm = ScriptedLLM(["Hello there. How can I help?"])
    speech = SpeechOutput()
    responder, events, _ = make(llm, speech=speech, held=True)
    task = asyncio.get_running_loop().create_task(responder.run())
    await asyncio.sleep(0.1)
    assert events == [] and not speech.busy and voice_requested(responder)
    responder.release()
    await task
    assert types(events)[0] == "response.created" and types(events)[-1] == "response.done"
    assert speech.busy


def voice_requested(responder: Responder) -> bool:
    return bool(responder.synthesizer.texts)


async def test_barge_in_truncates_to_what_was_played():
    llm = ScriptedLLM(["One two three four. Five six seven eight. Nine ten eleven twelve."])
    speech = SpeechOutput()
    responder, events, _ = make(llm, speech=speech)
    task = asyncio.get_running_loop().create_task(responder.run())
    while len(responder.clauses) < 3:
        await asyncio.sleep(0.01)
    for _ in range(30):  # 600 ms of the 1.2 s answer reach the peer
        speech.next_frame_pcm()
    responder.interrupt()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert not speech.busy and not speech.next_frame_pcm().any()  # silent from the next frame
    truncated = next(e for e in events if e.type == "conversation.item.truncated")
    assert truncated.audio_end_ms == 600
    item = responder.items[0]
    assert item.truncated and item.id == truncated.item_id
    assert item.text.split() == ["One", "two", "three", "four.", "Five", "six"]
    # generation had finished (response.done came first); the tail was still playing when the user cut in
    assert types(events)[-2:] == ["response.done", "conversation.item.truncated"]


async def test_barge_in_during_generation_cancels_the_response():
    llm = ScriptedLLM(["One two three four.", " Five six seven eight.", " Nine ten."], delay=0.3)
    speech = SpeechOutput()
    responder, events, _ = make(llm, speech=speech)
    task = asyncio.get_running_loop().create_task(responder.run())
    while not responder.clauses:
        await asyncio.sleep(0.01)
    for _ in range(10):
        speech.next_frame_pcm()
    responder.interrupt()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert types(events)[-2:] == ["conversation.item.truncated", "response.done"]
    assert events[-2].audio_end_ms == 200
    done = events[-1].response
    assert done["status"] == "cancelled" and done["output"][0]["status"] == "incomplete"
    assert done["output"][0]["content"][0]["transcript"] == "One two"


async def test_cancel_before_audio_reports_cancelled_without_truncation():
    llm = ScriptedLLM(["A long answer that takes a while."], delay=0.2)
    responder, events, _ = make(llm, speech=SpeechOutput())
    task = asyncio.get_running_loop().create_task(responder.run())
    await asyncio.sleep(0.05)
    responder.interrupt()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert types(events) == ["response.created", "response.done"]
    assert events[-1].response["status"] == "cancelled"
