"""The event catalog: decoding client events, encoding server events."""

from __future__ import annotations

import json

import pytest

from rtc_agent.errors import AtCapacity
from rtc_agent.protocol import (
    CLIENT_EVENTS,
    SERVER_EVENTS,
    EventIds,
    ProtocolError,
    decode,
    encode,
    error_event,
)
from rtc_agent.protocol import events as ev


def test_catalog_has_the_design_names():
    for name in ("session.created", "session.updated", "error", "pong", "metrics", "caption.partial",
                 "caption.final", "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                 "vision.round.started", "vision.text.delta", "vision.silence", "vision.round.ended",
                 "vision.frame.dropped", "translation.chunk", "translation.flush", "translation.reset",
                 "conversation.item.input_audio_transcription.completed", "response.created",
                 "response.output_audio_transcript.delta", "response.function_call_arguments.done",
                 "response.done", "conversation.item.truncated"):
        assert name in SERVER_EVENTS, name
    for name in ("session.update", "vision.prompt", "conversation.item.create", "response.create",
                 "response.cancel", "ping", "pong"):
        assert name in CLIENT_EVENTS, name


@pytest.mark.parametrize("raw, code", [
    ("{", "invalid_json"),
    (b"\xff\xfe", "invalid_json"),
    ("42", "invalid_event"),
    ('{"type": 5}', "invalid_event"),
    ('{"event_id": "x"}', "invalid_event"),
    ('{"type": "teleport"}', "unknown_event"),
    ('{"type": "vision.prompt"}', "invalid_event"),
    ('{"type": "session.update", "session": "all"}', "invalid_event"),
    ('{"type": "conversation.item.create"}', "invalid_event"),
    ('{"type": "ping", "x": "' + "a" * 200 + '"}', "message_too_large"),
])
def test_bad_client_messages(raw, code):
    with pytest.raises(ProtocolError) as err:
        decode(raw, max_bytes=128)
    assert err.value.code == code


def test_decode_keeps_the_client_event_id():
    with pytest.raises(ProtocolError) as err:
        decode('{"type": "nope", "event_id": "c7"}', max_bytes=1000)
    assert err.value.event_id == "c7"
    event = decode('{"type": "vision.prompt", "text": "what is this?", "event_id": "c8"}', max_bytes=1000)
    assert isinstance(event, ev.VisionPrompt) and event.text == "what is this?" and event.event_id == "c8"


def test_encode_adds_id_and_clock():
    ids = EventIds()
    a = encode(ev.CaptionFinal(segment_id="s1", text="hi", audio_start_ms=0, audio_end_ms=900),
               event_id=ids.next(), session_ms=1000)
    b = encode(ev.VisionSilence(frame_ts=1.0), event_id=ids.next(), session_ms=1001)
    assert a["type"] == "caption.final" and a["session_ms"] == 1000 and a["text"] == "hi"
    assert a["event_id"] != b["event_id"]
    json.dumps(a)


def test_server_events_are_validated():
    with pytest.raises(ValueError):
        ev.TranslationChunk(index=0, action="MAYBE", text="", audio_start_ms=0, audio_end_ms=1)
    with pytest.raises(ValueError):
        ev.CaptionPartial(segment_id="s", committed="a", tentative="b", audio_start_ms=0, audio_end_ms=1, extra=1)


def test_error_event_from_an_exception():
    event = error_event(AtCapacity("full", code="engine_capacity"), event_id="c1")
    data = encode(event, event_id="e", session_ms=0)
    assert data["error"] == {"type": "capacity_error", "code": "engine_capacity", "message": "full",
                             "event_id": "c1"}
