"""The voice agent through the real path: a real aiortc peer speaks (Piper), the real server runs Silero VAD,
Whisper and Piper, and an OpenAI-compatible server streams the LLM's answers (or the packaged SmolLM2 does)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PcmSourceTrack
from tests.conftest import rms
from tests.openai_stub import OpenAIStub, StubReply, text_reply, tool_call_reply
from tests.speech import synthesize

pytestmark = pytest.mark.real_model  # loads real models: .ci/run runs these under cpu-profile avx2 too

RATE = 48000


def spoken(*parts: str | float) -> np.ndarray:
    """Speech and silences (seconds) back to back, at 48 kHz."""
    chunks = []
    for part in parts:
        if isinstance(part, str):
            chunks.append(synthesize(part, RATE))
        else:
            chunks.append(np.zeros(int(part * RATE), dtype=np.int16))
    return np.concatenate(chunks)


def has_tool_result(body: dict[str, Any]) -> bool:
    return any(m.get("role") == "tool" for m in body.get("messages", []))


def audible_after(peer: ClientPeer, t: float) -> bool:
    return any(rms(pcm) > 0.02 for at, pcm in peer.audio_frames if at >= t)


async def test_spoken_question_calls_a_tool_and_speaks_the_answer(start_server):
    def respond(body: dict[str, Any]) -> StubReply:
        if has_tool_result(body):
            return text_reply("It is ten past nine in the morning.")
        return tool_call_reply([("get_current_time", {"timezone": "UTC"})])

    async with OpenAIStub(responder=respond) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        peer = ClientPeer(server.url, "agent", audio=PcmSourceTrack(spoken(0.5, "What time is it?", 4.0), RATE,
                                                                       tail="silence"))
        await peer.connect()
        try:
            done = await peer.wait_for("response.done", timeout=40)
            assert done["response"]["status"] == "completed", done
            await asyncio.sleep(1.0)
            kinds = [e["type"] for e in peer.events if not e["type"].startswith(("metrics", "pong", "output_audio"))]
            order = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                     "conversation.item.input_audio_transcription.completed", "response.created",
                     "response.function_call_arguments.done", "conversation.item.created",
                     "response.output_audio_transcript.delta", "response.done"]
            positions = [kinds.index(k) for k in order]
            assert positions == sorted(positions), kinds
            transcript = await peer.wait_for("conversation.item.input_audio_transcription.completed")
            assert "time" in transcript["transcript"].lower()
            call = await peer.wait_for("response.function_call_arguments.done")
            assert call["name"] == "get_current_time" and call["response_id"] == done["response"]["id"]
            result = await peer.wait_for("conversation.item.created")
            assert result["item"]["call_id"] == call["call_id"] and '"UTC"' in result["item"]["output"]
            spoken_text = "".join(e["delta"] for e in peer.events
                                  if e["type"] == "response.output_audio_transcript.delta")
            assert "ten past nine" in spoken_text
            # the answer is audible at the peer after the question ended
            stopped_at = peer.event_times[kinds.index("input_audio_buffer.speech_stopped")]
            assert audible_after(peer, stopped_at)
            first, second = stub.requests[0].body, stub.requests[1].body
            assert any(t["function"]["name"] == "get_current_time" for t in first["tools"])
            assert has_tool_result(second) and "UTC" in str(second["messages"][-1])
            assert done["response"]["timings"]["asr_ms"] is not None
        finally:
            await peer.close()


async def test_talking_over_the_agent_cuts_it_off(start_server):
    story = ("Once upon a time a small fox lived at the edge of a quiet forest. Every morning she walked to the "
             "river to watch the fish. One day she met an old turtle who knew every path in the woods. "
             "They became friends and explored the hills together for many years.")

    def respond(body: dict[str, Any]) -> StubReply:
        last = body["messages"][-1]["content"].lower()
        return text_reply("Okay, I will stop." if "stop" in last else story, piece_size=12)

    async with OpenAIStub(responder=respond) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        clip = spoken(0.5, "Please tell me a story.", 3.0, "Stop please.", 4.0)
        peer = ClientPeer(server.url, "agent", audio=PcmSourceTrack(clip, RATE, tail="silence"))
        await peer.connect()
        try:
            truncated = await peer.wait_for("conversation.item.truncated", timeout=40)
            assert 300 <= truncated["audio_end_ms"] < 15000
            second = await peer.wait_for("conversation.item.input_audio_transcription.completed",
                                         lambda e: "stop" in e["transcript"].lower(), timeout=20)
            assert second
            answer = await peer.wait_for("response.done", lambda e: "stop" in str(e["response"]["output"]).lower(),
                                         timeout=30)
            assert answer["response"]["status"] == "completed"
            info = await peer.session_info()
            assert info["app_stats"]["barge_ins"] >= 1
        finally:
            await peer.close()


async def test_chat_with_the_embedded_smollm2(start_server):
    server = await start_server(llm_model="smollm2-135m")  # the fastest packaged model (not the default)
    peer = ClientPeer(server.url, "agent", config={"max_tokens": 24},
                      audio=PcmSourceTrack(spoken(0.5, "Hello, how are you today?", 4.0), RATE, tail="silence"))
    await peer.connect()
    try:
        done = await peer.wait_for("response.done", timeout=90)
        assert done["response"]["status"] == "completed"
        text = "".join(e["delta"] for e in peer.events if e["type"] == "response.output_audio_transcript.delta")
        assert len(text.split()) >= 2, text
        await asyncio.sleep(1.0)
        stopped_at = peer.event_times[[e["type"] for e in peer.events].index("input_audio_buffer.speech_stopped")]
        assert audible_after(peer, stopped_at)
        created = await peer.wait_for("session.created")
        assert created["session"]["engines"]["llm"].startswith("embedded:SmolLM2")
    finally:
        await peer.close()


async def test_deleting_mid_answer_ends_every_task(start_server):
    story = "Once upon a time a small fox lived at the edge of a quiet forest, and every morning she went out. " * 4

    async with OpenAIStub(responder=lambda body: text_reply(story, piece_size=6)) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        await asyncio.sleep(0.2)

        def running() -> list[asyncio.Task]:  # not counting the worker's engine dispatchers (server lifetime)
            return [t for t in asyncio.all_tasks() if not t.done() and not t.get_name().startswith("rtc_agent.worker")]

        baseline = len(running())
        peer = ClientPeer(server.url, "agent", audio=PcmSourceTrack(spoken(0.5, "Tell me a story.", 2.0), RATE,
                                                                       tail="silence"))
        await peer.connect()
        session = server.registry.get(peer.session_id)
        await peer.wait_for("response.output_audio_transcript.delta", timeout=40)
        assert await peer.delete() == 204
        assert session.state == "closed" and session.task_count == 0
        await peer.close(delete=False)
        deadline = asyncio.get_running_loop().time() + 10
        while asyncio.get_running_loop().time() < deadline and len(running()) > baseline:
            await asyncio.sleep(0.1)
        left = running()
        assert len(left) <= baseline, [t.get_coro() for t in left][:10]
