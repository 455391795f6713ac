"""OpenAI Realtime details: ``rate_limits.updated`` after each
``response.created``; ``output_audio_buffer.started`` / ``.stopped`` / ``.cleared`` over WebRTC (translation, and
``output_audio_buffer.clear`` on a live call cutting the reply on the track); ``audio/pcma`` input through the
official SDK; and a ``session.update`` the app refuses (after the adapter's own checks passed) changing nothing."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from rtc_agent.config import Settings
from rtc_agent.protocol import events as ev
from rtc_agent.realtime.adapter import RealtimeAdapter
from rtc_agent.realtime.audio import alaw_encode
from rtc_agent.realtime.events import RealtimeError
from rtc_agent.realtime.session_config import SessionConfig
from tests.openai_stub import OpenAIStub, text_reply
from tests.realtime_helpers import Events, check_shape, client, spoken
from tests.speech import content_share
from tests.test_realtime_calls import Caller

SETTINGS = Settings()


def adapter(transport: str) -> RealtimeAdapter:
    return RealtimeAdapter(SessionConfig.new("realtime", SETTINGS), session_id="sess_g", settings=SETTINGS,
                           transport=transport, take_audio=(lambda rid: []) if transport == "websocket" else None)


# --- without a server ---

def test_rate_limits_follow_each_response_created():
    a = adapter("websocket")
    out = [check_shape(e) for e in a.server(ev.ResponseCreated(response={"id": "resp_1"}))]
    assert [e["type"] for e in out] == ["response.created", "rate_limits.updated"]
    names = {limit["name"] for limit in out[1]["rate_limits"]}
    assert names == {"requests", "tokens"}


def test_output_audio_buffer_events_on_webrtc():
    a = adapter("webrtc")
    out = [check_shape(e) for event in (
        ev.OutputAudioStarted(utterance_id="u1", response_id="resp_1"),
        ev.OutputAudioStopped(utterance_id="u1", sent_ms=900, response_id="resp_1"),
        ev.OutputAudioStarted(utterance_id="u2", response_id="resp_2"),
        ev.OutputAudioStopped(utterance_id="u2", sent_ms=300, cleared=True, response_id="resp_2"),
    ) for e in a.server(event)]
    assert [(e["type"], e["response_id"]) for e in out] == [
        ("output_audio_buffer.started", "resp_1"), ("output_audio_buffer.stopped", "resp_1"),
        ("output_audio_buffer.started", "resp_2"), ("output_audio_buffer.cleared", "resp_2")]
    assert a.client(json.dumps({"type": "output_audio_buffer.clear"})).clear_output is True
    try:  # over a WebSocket the client plays the audio: refused, naming the event
        adapter("websocket").client(json.dumps({"type": "output_audio_buffer.clear", "event_id": "evt_c"}))
    except RealtimeError as exc:
        assert (exc.code, exc.event_id) == ("unsupported_parameter", "evt_c")
    else:
        raise AssertionError("output_audio_buffer.clear was taken over a WebSocket")


def test_server_vad_options_and_voice_reach_the_agent():
    from rtc_agent.realtime.adapter import serving_app

    config = SessionConfig.new("realtime", SETTINGS).updated({"audio": {
        "input": {"turn_detection": {"type": "server_vad", "threshold": 0.7, "prefix_padding_ms": 500,
                                     "silence_duration_ms": 800, "create_response": False,
                                     "interrupt_response": False}},
        "output": {"voice": "verse"}}})
    app_cls, agent = serving_app(config, SETTINGS)  # the agent app takes it
    assert app_cls.name == "agent"
    assert (agent["vad_threshold"], agent["prefix_padding_ms"], agent["min_silence_ms"]) == (0.7, 500, 800)
    assert agent["create_response"] is False and agent["barge_in"] is False and agent["turn_detection"] == "vad"
    session = check_shape({"type": "session.updated", "event_id": "e", "session": config.render("sess_v")})
    assert session["session"]["audio"]["output"]["voice"] == "verse"
    assert session["session"]["audio"]["input"]["turn_detection"]["create_response"] is False


def test_a_refused_update_is_taken_back_and_later_ones_kept():
    from rtc_agent.errors import AgentError

    a = adapter("websocket")
    default = a.config.data["instructions"]
    first = a.client(json.dumps({"type": "session.update", "event_id": "evt_a",
                                 "session": {"instructions": "too long for the app", "max_output_tokens": 50}}))
    second = a.client(json.dumps({"type": "session.update", "session": {"output_modalities": ["text"]}}))
    ref_a, ref_b = first.native[0].event_id, second.native[0].event_id
    assert ref_a != "evt_a" and a.config.data["max_output_tokens"] == 50  # the config moves at once
    error = check_shape(a.error(AgentError("too large", code="config_too_large"), ref_a))
    assert error["error"]["event_id"] == "evt_a"
    assert a.config.data["instructions"] == default and a.config.data["max_output_tokens"] == "inf"
    assert a.config.data["output_modalities"] == ["text"]  # still pending, kept
    updated = a.server(ev.SessionUpdated(session={}))  # the app applied the second one
    assert updated[0]["session"]["output_modalities"] == ["text"] and updated[0]["session"]["instructions"] == default
    assert a.error(AgentError("x"), ref_b)["error"]["event_id"] == ref_b  # answered: no longer mapped


# --- against a real server ---

async def test_session_update_refused_by_the_app_changes_nothing(start_server):
    server = await start_server()
    async with client(server).realtime.connect(model="gpt-realtime") as conn:
        events = Events(conn)
        created = await events.wait_for("session.created")
        instructions = created["session"]["instructions"]
        long = "x" * (SETTINGS.max_instructions_chars + 1)  # the adapter takes it; the agent's limit refuses it
        await conn.send_raw(json.dumps({"type": "session.update", "event_id": "evt_long",
                                        "session": {"type": "realtime", "instructions": long,
                                                    "output_modalities": ["text"]}}))
        error = await events.wait_for("error", lambda e: e["error"]["event_id"] == "evt_long", timeout=10)
        assert error["error"]["code"] == "config_too_large", error
        await conn.session.update(session={"type": "realtime", "max_output_tokens": 100})
        updated = await events.wait_for("session.updated")
        assert updated["session"]["instructions"] == instructions
        assert updated["session"]["output_modalities"] == ["audio"]  # the refused update's other field too
        assert updated["session"]["max_output_tokens"] == 100
        await events.close()


@pytest.mark.real_model
async def test_pcma_input_is_heard(start_server):
    server = await start_server()
    async with client(server).realtime.connect(model="gpt-realtime") as conn:
        events = Events(conn)
        await events.wait_for("session.created")
        await conn.session.update(session={"type": "realtime", "audio": {"input": {
            "format": {"type": "audio/pcma"}, "turn_detection": None, "transcription": {"model": "whisper-1"}}}})
        updated = await events.wait_for("session.updated")
        assert updated["session"]["audio"]["input"]["format"] == {"type": "audio/pcma"}
        speech = alaw_encode(spoken(0.3, "When is the meeting tomorrow?", 0.5, rate=8000))
        for i in range(0, len(speech), 1600):
            await conn.input_audio_buffer.append(audio=base64.b64encode(speech[i:i + 1600]).decode())
        await conn.input_audio_buffer.commit()
        completed = await events.wait_for("conversation.item.input_audio_transcription.completed", timeout=40)
        assert content_share(completed["transcript"], ["when", "meeting", "tomorrow"]) >= 2 / 3, completed
        await events.close()


@pytest.mark.real_model
async def test_output_audio_buffer_clear_cuts_the_reply_on_a_call(start_server):
    story = ("Once upon a time a small fox lived at the edge of a quiet forest. Every morning she walked to the "
             "river to watch the fish. One day she met an old turtle who knew every path in the woods. ") * 3
    async with OpenAIStub(default=text_reply(story, piece_size=6, delay_s=0.03)) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        caller = Caller()
        try:
            assert await caller.call(server.url, "sk-anything") == 201
            await caller.wait_for("session.created")
            caller.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Tell me a long story."}]}})
            caller.send({"type": "response.create"})
            started = await caller.wait_for("output_audio_buffer.started", timeout=40)
            rid = started["response_id"]
            await asyncio.sleep(0.5)
            mark = len(caller.events)
            caller.send({"type": "output_audio_buffer.clear", "event_id": "evt_clear"})
            cleared = await caller.wait_for("output_audio_buffer.cleared", after=mark)
            assert cleared["response_id"] == rid
            assert not [e for e in caller.events if e["type"] == "error"], caller.events
            caller.send({"type": "response.cancel"})
            done = await caller.wait_for("response.done", timeout=20, after=mark)
            assert done["response"]["id"] == rid and done["response"]["status"] == "cancelled"
            assert done["response"]["status_details"]["reason"] == "client_cancelled"
        finally:
            await caller.close()
