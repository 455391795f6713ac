"""A ``type: transcription`` OpenAI Realtime session (the captions pipeline) through the official SDK:
multi-utterance speech streamed at real time gives one item per utterance, with ``.delta`` events while the user
speaks and a ``.completed`` transcript at the end of each utterance."""

from __future__ import annotations

import pytest

from tests.realtime_helpers import Events, client, overlap, spoken, stream_audio

FIRST = "The quick brown fox jumps over the lazy dog."
SECOND = "Please call me back tomorrow morning at nine."


@pytest.mark.real_model
async def test_transcription_session_streams_deltas_and_completes_each_utterance(start_server):
    server = await start_server()
    async with client(server).realtime.connect(extra_query={"intent": "transcription"}) as conn:
        events = Events(conn)
        created = await events.wait_for("session.created")
        assert created["session"]["type"] == "transcription"
        await conn.session.update(session={"type": "transcription", "audio": {"input": {
            "transcription": {"model": "whisper-1", "language": "en"},
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 600}}}})
        updated = await events.wait_for("session.updated")
        assert updated["session"]["audio"]["input"]["transcription"]["language"] == "en"
        await stream_audio(conn, spoken(0.4, FIRST, 1.6, SECOND, 2.0))
        first = await events.wait_for("conversation.item.input_audio_transcription.completed", timeout=30)
        second = await events.wait_for("conversation.item.input_audio_transcription.completed",
                                       lambda e: e["item_id"] != first["item_id"], timeout=30)
        for done, expected in ((first, FIRST), (second, SECOND)):
            assert overlap(expected, done["transcript"]) >= 0.7, done["transcript"]
            deltas = [e["delta"] for e in events.of("conversation.item.input_audio_transcription.delta")
                      if e["item_id"] == done["item_id"]]
            assert deltas, f"no delta for {done['item_id']}"
            # deltas stream the caption's committed words; the final decode of the whole utterance may revise them
            assert overlap("".join(deltas), done["transcript"]) >= 0.5, (deltas, done["transcript"])
            assert done["usage"]["type"] == "duration" and done["usage"]["seconds"] > 1
        started = [e["item_id"] for e in events.of("input_audio_buffer.speech_started")]
        stopped = [e["item_id"] for e in events.of("input_audio_buffer.speech_stopped")]
        assert started[:2] == stopped[:2] == [first["item_id"], second["item_id"]]
        committed = [e["item_id"] for e in events.of("input_audio_buffer.committed")]
        assert committed[:2] == [first["item_id"], second["item_id"]]
        kinds = events.types()
        assert kinds.index("input_audio_buffer.committed") < kinds.index(
            "conversation.item.input_audio_transcription.delta")
        assert "response.created" not in kinds  # transcription sessions never answer
        await conn.response.create()
        refused = await events.wait_for("error")
        assert refused["error"]["code"] == "unsupported_parameter"
        await events.close()
