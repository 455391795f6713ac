"""The OpenAI Realtime adapter's parts without a server: G.711 and resampling, client-event checks, the session
object and its mapping to the apps' configuration, and native -> GA event translation (every GA event checked
against the official SDK's models)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rtc_agent.config import Settings
from rtc_agent.protocol import events as ev
from rtc_agent.realtime.adapter import RealtimeAdapter
from rtc_agent.realtime.audio import InputDecoder, OutputEncoder, alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from rtc_agent.realtime.events import RealtimeError, parse_client_event
from rtc_agent.realtime.session_config import SessionConfig
from tests.realtime_helpers import check_shape

SETTINGS = Settings()


# --- audio ---

@pytest.mark.parametrize("encode, decode", [(ulaw_encode, ulaw_decode), (alaw_encode, alaw_decode)])
def test_g711_round_trip_stays_within_its_quantization(encode, decode):
    x = np.arange(-32768, 32768, 3, dtype=np.int32).astype(np.int16)
    back = decode(encode(x)).astype(np.int32)
    error = np.abs(back - x)
    assert error.max() <= 1100  # the widest G.711 step is 1024 (plus clipping near full scale)
    assert np.all(error <= np.maximum(40, np.abs(x.astype(np.int32)) // 14))  # logarithmic: ~1/16 of the level


def test_known_g711_codes():
    assert ulaw_decode(bytes([0xFF, 0x7F, 0x80, 0x00])).tolist() == [0, 0, 32124, -32124]
    assert alaw_decode(bytes([0xD5, 0x55])).tolist() == [8, -8]
    assert ulaw_encode(np.array([0], dtype=np.int16)) == b"\xff"


def test_input_decoder_resamples_to_16k_and_refuses_half_samples():
    decoder = InputDecoder("audio/pcm")
    tone = (np.sin(np.arange(24000) / 10) * 8000).astype(np.int16)
    out = np.concatenate([decoder.decode(tone[i:i + 480].tobytes()) for i in range(0, 24000, 480)])
    assert abs(len(out) - 16000) < 100
    with pytest.raises(ValueError):
        decoder.decode(b"\x00\x01\x02")
    assert len(InputDecoder("audio/pcmu").decode(bytes(800))) == pytest.approx(1600, abs=40)


def test_output_encoder_makes_24k_pcm16_from_the_voice_rate():
    encoder = OutputEncoder("audio/pcm", 22050)
    data = encoder.encode(np.zeros(22050, dtype=np.int16)) + encoder.flush()
    assert abs(len(data) // 2 - 24000) < 100 and len(data) % 2 == 0


# --- client events ---

@pytest.mark.parametrize("raw, code, param", [
    ('{"type": "session.update"}', "missing_required_parameter", "session"),
    ('{"type": "session.update", "session": []}', "invalid_type", "session"),
    ('{"type": "conversation.item.truncate", "item_id": "i", "content_index": 0, "audio_end_ms": -5}',
     "invalid_value", "audio_end_ms"),
    ('{"type": "response.cancel", "response_id": 5}', "invalid_type", "response_id"),
    ('{"type": "input_audio_buffer.commit", "event_id": 7}', "invalid_type", "event_id"),
    ('{"event_id": "x"}', "missing_required_parameter", "type"),
    ("[1, 2]", "invalid_event", None),
    ('{"type": "response.create", "response": {}}' + " " * 100, "message_too_large", None),
])
def test_client_events_are_checked(raw, code, param):
    with pytest.raises(RealtimeError) as info:
        parse_client_event(raw, max_bytes=100)
    assert (info.value.code, info.value.param) == (code, param)


# --- the session object ---

def test_session_defaults_updates_and_refusals():
    config = SessionConfig.new("realtime", SETTINGS, model="gpt-realtime-mini")
    session = config.render("sess_1")
    check_shape({"type": "session.created", "event_id": "e", "session": session})
    assert session["model"] == "gpt-realtime-mini" and session["audio"]["input"]["format"] == {
        "type": "audio/pcm", "rate": 24000}
    agent = config.agent_config(SETTINGS)
    assert agent["turn_detection"] == "vad" and agent["browser_tool_calls"] == "end_response"
    manual = config.updated({"audio": {"input": {"turn_detection": None}}, "tool_choice": "none",
                             "max_output_tokens": 64})
    agent = manual.agent_config(SETTINGS)
    assert agent["turn_detection"] == "manual" and agent["tools"] is False and agent["max_tokens"] == 64
    assert config.data["audio"]["input"]["turn_detection"] is not None  # the original is unchanged
    native = manual.native_update(config, SETTINGS)
    assert native["config"] == {"turn_detection": "manual", "barge_in": False,
                                "tool_choice": "none", "tools": False, "max_tokens": 64,
                                "min_silence_ms": 400, "vad_threshold": SETTINGS.vad_threshold,
                                "prefix_padding_ms": 300}
    semantic = config.updated({"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}})
    assert semantic.agent_config(SETTINGS)["min_silence_ms"] == 400
    for update, param in (({"voice": "x"}, "session.voice"), ({"type": "transcription"}, "session.type"),
                          ({"prompt": {"id": "p"}}, "session.prompt"),
                          ({"tools": [{"type": "mcp", "server_label": "x"}]}, "session.tools[0].type"),
                          ({"audio": {"output": {"speed": 3}}}, "session.audio.output.speed"),
                          ({"audio": {"input": {"transcription": {"language": "xx"}}}},
                           "session.audio.input.transcription.language")):
        with pytest.raises(RealtimeError) as info:
            config.updated(update)
        assert info.value.param == param, update
    transcription = SessionConfig.new("transcription", SETTINGS, {"audio": {"input": {
        "transcription": {"language": "de"}}}})
    check_shape({"type": "session.created", "event_id": "e", "session": transcription.render("sess_2")})
    assert transcription.captions_config(SETTINGS)["language"] == "de"


# --- translation ---

def translate(adapter: RealtimeAdapter, *events: ev.ServerEvent) -> list[dict]:
    out = [check_shape(e) for event in events for e in adapter.server(event)]
    return out


def test_a_response_with_a_client_tool_call_and_a_hidden_server_tool():
    config = SessionConfig.new("realtime", SETTINGS, {"tools": [{"type": "function", "name": "lookup"}]})
    audio = {"resp_1": ["AAAA", "AAAA"]}
    adapter = RealtimeAdapter(config, session_id="sess_x", settings=SETTINGS, transport="websocket",
                              take_audio=lambda rid: audio.pop(rid, []))
    out = translate(
        adapter,
        ev.SpeechStarted(audio_start_ms=100, item_id="item_u"), ev.SpeechStopped(audio_end_ms=900, item_id="item_u"),
        ev.InputTranscriptionCompleted(item_id="item_u", transcript="look it up"),
        ev.ResponseCreated(response={"id": "resp_1", "output_modalities": ["audio"]}),
        ev.FunctionCallArgumentsDone(call_id="call_srv", name="get_current_time", arguments="{}",
                                     response_id="resp_1"),
        ev.ConversationItemCreated(item={"id": "item_t", "type": "function_call_output", "call_id": "call_srv",
                                         "output": "12:00", "name": "get_current_time", "ok": True}),
        ev.ResponseAudioTranscriptDelta(response_id="resp_1", item_id="item_a", delta="One moment. "),
        ev.FunctionCallArgumentsDone(call_id="call_1", name="lookup", arguments='{"q": 1}', response_id="resp_1"),
        ev.ResponseDone(response={"id": "resp_1", "status": "completed", "usage": {"input_tokens": 3,
                                                                                    "output_tokens": 4}}),
    )
    kinds = [e["type"] for e in out]
    assert kinds[:2] == ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped"]
    assert "conversation.item.input_audio_transcription.completed" not in kinds  # transcription is off
    assert kinds.count("response.output_audio.delta") == 2
    assert kinds.count("response.function_call_arguments.done") == 1  # the server tool is not shown
    done = out[-1]["response"]
    assert [o["type"] for o in done["output"]] == ["message", "function_call"]
    assert done["output"][0]["content"] == [{"type": "output_audio", "transcript": "One moment."}]
    assert done["usage"]["total_tokens"] == 7
    assert list(adapter.translator.items) == ["item_u", "item_a", done["output"][1]["id"]]
    retrieved = adapter.client(json.dumps({"type": "conversation.item.retrieve", "item_id": "item_u"})).replies
    assert check_shape(retrieved[0])["item"]["content"][0]["type"] == "input_audio"


def test_captions_become_transcription_items():
    config = SessionConfig.new("transcription", SETTINGS)
    adapter = RealtimeAdapter(config, session_id="sess_t", settings=SETTINGS, transport="websocket")
    out = translate(
        adapter, ev.SpeechStarted(audio_start_ms=0),
        ev.CaptionPartial(segment_id="seg_1", committed="hello", tentative="there", audio_start_ms=0,
                          audio_end_ms=500),
        ev.CaptionPartial(segment_id="seg_1", committed="hello there", tentative="", audio_start_ms=0,
                          audio_end_ms=900),
        ev.SpeechStopped(audio_end_ms=1200),
        ev.CaptionFinal(segment_id="seg_1", text="hello there friend", audio_start_ms=0, audio_end_ms=1200),
    )
    item = out[0]["item_id"]
    assert all(e.get("item_id", item) == item for e in out)
    deltas = [e["delta"] for e in out if e["type"] == "conversation.item.input_audio_transcription.delta"]
    assert deltas == ["hello", " there", " friend"]
    assert out[-2]["transcript"] == "hello there friend" and out[-2]["usage"]["seconds"] == 1.2
