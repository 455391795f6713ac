"""OpenAI Realtime conversation control through the official SDK: manual turns (``turn_detection: null``,
``input_audio_buffer.commit``), ``conversation.item.retrieve`` / ``.delete`` / ``.truncate``, G.711 audio, and
barge-in over the WebSocket (speech during an answer cancels it with ``turn_detected``)."""

from __future__ import annotations

import base64

import pytest

from rtc_agent.bench.common import normalize_text
from rtc_agent.realtime.audio import ulaw_decode, ulaw_encode
from tests.openai_stub import OpenAIStub, text_reply
from tests.realtime_helpers import Events, client, overlap, spoken, stream_audio, transcribe
from tests.speech import content_share, resample

REPLY = "Sure, the meeting is at ten."
QUESTION_WORDS = ["when", "meeting", "tomorrow"]  # of the spoken "When is the meeting tomorrow?"


@pytest.mark.real_model
async def test_manual_turns_with_commit_and_conversation_items(start_server):
    async with OpenAIStub(default=text_reply(REPLY)) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        async with client(server).realtime.connect(model="gpt-realtime") as conn:
            events = Events(conn)
            await events.wait_for("session.created")
            await conn.session.update(session={"type": "realtime", "audio": {"input": {
                "turn_detection": None, "transcription": {"model": "whisper-1"}}}})
            updated = await events.wait_for("session.updated")
            assert updated["session"]["audio"]["input"]["turn_detection"] is None
            await stream_audio(conn, spoken(0.3, "When is the meeting tomorrow?", 0.5), realtime=False)
            await conn.input_audio_buffer.commit()
            committed = await events.wait_for("input_audio_buffer.committed")
            completed = await events.wait_for("conversation.item.input_audio_transcription.completed")
            assert completed["item_id"] == committed["item_id"]
            assert content_share(completed["transcript"], QUESTION_WORDS) >= 2 / 3, completed["transcript"]
            assert "input_audio_buffer.speech_started" not in events.types()  # no VAD turns
            assert "response.created" not in events.types()  # a commit does not answer
            await conn.response.create()
            done = await events.wait_for("response.done", timeout=30)
            assert done["response"]["status"] == "completed"
            heard = normalize_text(completed["transcript"])
            assert heard in normalize_text(stub.requests[0].messages[-1]["content"])  # the LLM got what was heard

            await conn.conversation.item.retrieve(item_id=committed["item_id"])
            retrieved = await events.wait_for("conversation.item.retrieved")
            assert retrieved["item"]["content"][0]["transcript"] == completed["transcript"]
            answer = done["response"]["output"][0]
            audio_ms = len(b"".join(base64.b64decode(e["delta"]) for e in events.of("response.output_audio.delta"))) \
                // 48
            await conn.conversation.item.truncate(item_id=answer["id"], content_index=0, audio_end_ms=audio_ms // 3)
            truncated = await events.wait_for("conversation.item.truncated")
            assert truncated["item_id"] == answer["id"] and truncated["audio_end_ms"] == audio_ms // 3
            await conn.conversation.item.delete(item_id=committed["item_id"])
            deleted = await events.wait_for("conversation.item.deleted")
            assert deleted["item_id"] == committed["item_id"]
            mark = len(events.items)
            await conn.input_audio_buffer.clear()
            await events.wait_for("input_audio_buffer.cleared", after=mark)
            await conn.response.create()
            await events.wait_for("response.done", after=mark, timeout=30)
            history = stub.requests[1].messages
            assert not any(heard in normalize_text(str(m.get("content"))) for m in history)  # deleted
            assert history[-1]["role"] == "assistant" and len(history[-1]["content"]) < len(REPLY)  # truncated
            await events.close()


@pytest.mark.real_model
async def test_g711_audio_in_and_out(start_server):
    async with OpenAIStub(default=text_reply(REPLY)) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        async with client(server).realtime.connect(model="gpt-realtime") as conn:
            events = Events(conn)
            await events.wait_for("session.created")
            await conn.session.update(session={"type": "realtime", "audio": {
                "input": {"format": {"type": "audio/pcmu"}, "turn_detection": None,
                          "transcription": {"model": "whisper-1"}},
                "output": {"format": {"type": "audio/pcmu"}}}})
            await events.wait_for("session.updated")
            speech = ulaw_encode(spoken(0.3, "When is the meeting tomorrow?", 0.5, rate=8000))
            for i in range(0, len(speech), 1600):
                await conn.input_audio_buffer.append(audio=base64.b64encode(speech[i:i + 1600]).decode())
            await conn.input_audio_buffer.commit()
            completed = await events.wait_for("conversation.item.input_audio_transcription.completed", timeout=30)
            assert content_share(completed["transcript"], QUESTION_WORDS) >= 2 / 3, completed["transcript"]
            await conn.response.create()
            done = await events.wait_for("response.done", timeout=30)
            data = b"".join(base64.b64decode(e["delta"]) for e in events.of("response.output_audio.delta")
                            if e["response_id"] == done["response"]["id"])
            pcm = ulaw_decode(data)
            assert len(pcm) > 8000  # over a second at 8 kHz
            heard = await transcribe(server, resample(pcm, 8000, 24000))
            assert overlap(REPLY, heard) >= 0.6, heard
            await events.close()


@pytest.mark.real_model
async def test_speaking_over_an_answer_cancels_it(start_server):
    story = "Once upon a time a small fox lived at the edge of a quiet forest, and she loved the river. " * 4
    async with OpenAIStub(default=text_reply(story, piece_size=5, delay_s=0.05)) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        async with client(server).realtime.connect(model="gpt-realtime") as conn:
            events = Events(conn)
            await events.wait_for("session.created")
            await stream_audio(conn, spoken(0.3, "Tell me a story please.", 1.0))
            first = await events.wait_for("response.output_audio.delta", timeout=40)
            await stream_audio(conn, spoken("Stop, that is enough.", 1.0))
            done = await events.wait_for("response.done", timeout=20)
            assert done["response"]["id"] == first["response_id"]
            assert done["response"]["status"] == "cancelled"
            assert done["response"]["status_details"]["reason"] == "turn_detected"
            starts = events.of("input_audio_buffer.speech_started")
            assert len(starts) >= 2
            assert events.items.index(starts[1]) < events.items.index(done)
            await events.close()
