"""The OpenAI Realtime API over a WebSocket, driven by the official ``openai`` SDK against the real server: a
text turn, a spoken turn (Piper speech streamed at real time, Silero VAD, Whisper, the reply's audio heard back
by Whisper), a function-call round trip and ``response.cancel``, with a scripted OpenAI-compatible LLM."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from rtc_agent.bench.common import normalize_text
from tests.openai_stub import OpenAIStub, StubReply, text_reply, tool_call_reply
from tests.realtime_helpers import Events, audio_of, client, overlap, spoken, stream_audio, transcribe, words

pytestmark = pytest.mark.real_model  # loads real models: .ci/run runs these under cpu-profile avx2 too

REPLY = "The weather is sunny and warm today."
QUESTION_WORDS = {"weather", "paris", "today"}  # the content words of the spoken question
WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}


def user_text(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def test_text_turn_in_text_and_in_audio(start_server):
    async with OpenAIStub(default=text_reply(REPLY)) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        async with client(server).realtime.connect(model="gpt-realtime") as conn:
            events = Events(conn)
            created = await events.wait_for("session.created")
            assert created["session"]["type"] == "realtime" and created["session"]["model"] == "gpt-realtime"
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"],
                                               "instructions": "Be brief."})
            updated = await events.wait_for("session.updated")
            assert updated["session"]["output_modalities"] == ["text"]
            assert updated["session"]["instructions"] == "Be brief."
            await conn.conversation.item.create(item=user_text("What is the weather like?"))
            added = await events.wait_for("conversation.item.added")
            assert added["item"]["role"] == "user"
            await conn.response.create()
            done = await events.wait_for("response.done")
            response = done["response"]
            assert response["status"] == "completed" and response["output_modalities"] == ["text"]
            text = await events.wait_for("response.output_text.done")
            assert text["text"] == REPLY
            assert response["output"][0]["content"][0] == {"type": "output_text", "text": REPLY}
            assert response["usage"]["total_tokens"] > 0
            assert stub.requests[0].messages[0] == {"role": "system", "content": "Be brief."}
            kinds = events.types()
            order = ["response.created", "response.output_item.added", "response.content_part.added",
                     "response.output_text.delta", "response.output_text.done", "response.content_part.done",
                     "response.output_item.done", "response.done"]
            assert [kinds.index(k) for k in order] == sorted(kinds.index(k) for k in order), kinds

            mark = len(events.items)  # the same turn answered with speech (per-response override)
            await conn.response.create(response={"output_modalities": ["audio"], "metadata": {"turn": "2"}})
            done = await events.wait_for("response.done", after=mark)
            response = done["response"]
            assert response["status"] == "completed" and response["metadata"] == {"turn": "2"}
            transcript = (await events.wait_for("response.output_audio_transcript.done", after=mark))["transcript"]
            assert transcript == REPLY
            audio = audio_of(events.items, response["id"])
            assert len(audio) > 24000, len(audio)  # over a second of PCM16 24 kHz
            heard = await transcribe(server, audio)
            assert overlap(REPLY, heard) >= 0.6, heard
            await events.close()


async def test_spoken_turn_is_detected_transcribed_and_answered_in_speech(start_server):
    async with OpenAIStub(default=text_reply(REPLY)) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        async with client(server).realtime.connect(model="gpt-realtime") as conn:
            events = Events(conn)
            await events.wait_for("session.created")
            await conn.session.update(session={"type": "realtime", "audio": {
                "input": {"transcription": {"model": "whisper-1", "language": "en"},
                          "turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}}})
            await events.wait_for("session.updated")
            await stream_audio(conn, spoken(0.4, "What is the weather like in Paris today?", 1.5))
            started = await events.wait_for("input_audio_buffer.speech_started")
            stopped = await events.wait_for("input_audio_buffer.speech_stopped")
            assert started["item_id"] == stopped["item_id"]
            assert 200 <= started["audio_start_ms"] < stopped["audio_end_ms"] <= 4000, (started, stopped)
            done_transcript = await events.wait_for("conversation.item.input_audio_transcription.completed",
                                                    timeout=30)
            assert done_transcript["item_id"] == started["item_id"]
            # what Whisper heard: most of the question's content words (base hears "Paris" as "pairs" on some CPUs)
            heard_question = done_transcript["transcript"]
            assert len(QUESTION_WORDS & words(heard_question)) >= 2, heard_question
            committed = await events.wait_for("input_audio_buffer.committed")
            assert committed["item_id"] == started["item_id"]
            done = await events.wait_for("response.done", timeout=40)
            assert done["response"]["status"] == "completed"
            # the LLM was asked what was heard
            assert normalize_text(heard_question) in normalize_text(stub.requests[0].messages[-1]["content"])
            audio = audio_of(events.items, done["response"]["id"])
            assert len(audio) > 24000
            heard = await transcribe(server, audio)
            assert overlap(REPLY, heard) >= 0.6, heard
            kinds = events.types()
            assert kinds.index("input_audio_buffer.speech_stopped") < kinds.index("response.created")
            await events.close()


async def test_function_call_round_trip(start_server):
    def respond(body: dict[str, Any]) -> StubReply:
        if any(m.get("role") == "tool" for m in body["messages"]):
            return text_reply("It is twenty one degrees in Oslo.")
        return tool_call_reply([("get_weather", {"city": "Oslo"})], call_ids=["call_weather1"])

    async with OpenAIStub(responder=respond) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        async with client(server).realtime.connect(model="gpt-realtime") as conn:
            events = Events(conn)
            await events.wait_for("session.created")
            await conn.session.update(session={"type": "realtime", "tools": [WEATHER_TOOL], "tool_choice": "auto"})
            updated = await events.wait_for("session.updated")
            assert updated["session"]["tools"][0]["name"] == "get_weather"
            await conn.conversation.item.create(item=user_text("What's the weather in Oslo?"))
            await conn.response.create()
            call = await events.wait_for("response.function_call_arguments.done")
            assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Oslo"}
            assert call["call_id"] == "call_weather1"
            first = await events.wait_for("response.done")
            assert first["response"]["status"] == "completed"
            assert [o["type"] for o in first["response"]["output"]] == ["function_call"]
            assert first["response"]["output"][0]["call_id"] == "call_weather1"
            assert any(t["function"]["name"] == "get_weather" for t in stub.requests[0].body["tools"])

            mark = len(events.items)
            await conn.conversation.item.create(item={"type": "function_call_output", "call_id": call["call_id"],
                                                      "output": json.dumps({"celsius": 21})})
            added = await events.wait_for("conversation.item.added", after=mark)
            assert added["item"]["type"] == "function_call_output"
            await conn.response.create()
            second = await events.wait_for("response.done", after=mark, timeout=40)
            assert second["response"]["status"] == "completed"
            transcript = (await events.wait_for("response.output_audio_transcript.done", after=mark))["transcript"]
            assert "twenty one degrees" in transcript
            assert len(audio_of(events.items, second["response"]["id"])) > 24000
            messages = stub.requests[1].messages
            assert messages[-1] == {"role": "tool", "tool_call_id": "call_weather1", "content": '{"celsius": 21}'}
            assert messages[-2]["tool_calls"][0]["id"] == "call_weather1"
            await events.close()


async def test_response_cancel_stops_a_long_answer(start_server):
    story = ("Once upon a time a small fox lived at the edge of a quiet forest. Every morning she walked to the "
             "river to watch the fish. One day she met an old turtle who knew every path in the woods. ") * 3
    async with OpenAIStub(default=text_reply(story, piece_size=6, delay_s=0.03)) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        async with client(server).realtime.connect(model="gpt-realtime") as conn:
            events = Events(conn)
            await events.wait_for("session.created")
            await conn.conversation.item.create(item=user_text("Tell me a long story."))
            await conn.response.create()
            first = await events.wait_for("response.output_audio.delta", timeout=30)
            await conn.response.cancel()
            done = await events.wait_for("response.done", timeout=15)
            assert done["response"]["id"] == first["response_id"]
            assert done["response"]["status"] == "cancelled"
            assert done["response"]["status_details"]["reason"] == "client_cancelled"
            assert done["response"]["output"][0]["status"] == "incomplete"
            await stub.wait_disconnect(timeout=10)  # generation stopped at the LLM too
            spoken_text = "".join(e["delta"] for e in events.of("response.output_audio_transcript.delta"))
            assert 0 < len(spoken_text) < len(story) / 2
            await asyncio.sleep(1.0)  # nothing more of that response arrives
            after = events.items[events.items.index(done) + 1:]
            assert [e for e in after if e.get("response_id") == done["response"]["id"]] == []
            await events.close()
