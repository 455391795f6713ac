"""Call rooms through the real server with in-process aiortc peers and the real engines (Silero VAD, Whisper,
Piper): three participants, one speaking Spanish (espeak-ng), each gets the others' captions with the right
``speaker``; the English listener gets the Spanish speaker interpreted (``translation.chunk`` and speech on its
track); leaving is announced and frees the pipelines; the seventh participant gets ``room_full``; bad
``room.signal`` messages get ``error`` events."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import numpy as np
import pytest

from rtc_agent.rtc.client import ClientPeer, SessionRefused
from rtc_agent.rtc.sources import PcmSourceTrack
from rtc_agent.server.keys import ROOMS, WORKER
from tests.conftest import rms
from tests.espeak import espeak_clip, have_espeak
from tests.speech import content_share, resample, speech_clip

pytestmark = pytest.mark.real_model  # loads real models: .ci/run runs these under cpu-profile avx2 too

SPANISH = ["El gobierno anunció ayer un nuevo plan para mejorar las escuelas públicas del país."]
ALAN = ["Please remember to bring your umbrella tomorrow morning."]
BEA = ["The library opens at nine on Saturday."]
#: Their content words: the captions must hold most of them (which ones Whisper gets differs between CPUs).
ALAN_WORDS = ["remember", "bring", "umbrella", "tomorrow", "morning"]
BEA_WORDS = ["library", "opens", {"nine", "9"}, "saturday"]
LEAD_S = 2.5  # everyone joins before anyone speaks


def spanish48() -> np.ndarray:
    return resample(espeak_clip(SPANISH, "es", lead_s=LEAD_S, tail_s=1.0), 16000, 48000)


def english48(sentences: list[str]) -> np.ndarray:
    return speech_clip(sentences, lead_s=LEAD_S, tail_s=1.0, sample_rate=48000)[0]


def finals_by(peer: ClientPeer, name: str) -> str:
    return " ".join(e["text"] for e in peer.events
                    if e["type"] == "caption.final" and (e.get("speaker") or {}).get("name") == name).lower()


@pytest.mark.skipif(not have_espeak(), reason="needs espeak-ng")
async def test_three_participants_captions_interpretation_and_leaving(server):
    for engine in ("vad", "asr", "tts"):  # loaded before the speech, as --preload does
        await server.app[WORKER].load(engine)
    room = "real-room"
    sofia = ClientPeer(server.url, "call", config={"room": room, "name": "Sofia", "language": "es",
                                                   "listen_language": "en"},
                       audio=PcmSourceTrack(spanish48(), 48000, tail="silence"))
    alan = ClientPeer(server.url, "call", config={"room": room, "name": "Alan", "language": "en"},
                      audio=PcmSourceTrack(english48(ALAN), 48000, tail="silence"))
    bea = ClientPeer(server.url, "call", config={"room": room, "name": "Bea", "language": "en",
                                                 "listen_language": "en", "interpret": True},
                     audio=PcmSourceTrack(english48(BEA), 48000, tail="silence"))
    peers = [bea, alan, sofia]
    try:
        for peer in peers:
            await peer.connect()
        joined = await sofia.wait_for("room.joined")
        assert [p["name"] for p in joined["participants"]] == ["Bea", "Alan", "Sofia"]
        assert joined["participant_id"] == sofia.session_id
        await bea.wait_for("room.participant.joined", lambda e: e["participant"]["name"] == "Sofia")
        registry = server.app[ROOMS]
        assert set(registry.rooms[room].pairs) == {(sofia.session_id, "en")}  # one pipeline for two listeners

        await bea.wait_for("caption.final",
                           lambda e: e["speaker"]["name"] == "Alan" and e["text"].strip(), timeout=60)
        await sofia.wait_for("caption.final", lambda e: e["speaker"]["name"] == "Bea", timeout=60)
        for listener in (alan, bea):  # every participant reads everyone else
            await listener.wait_for("caption.final", lambda e: e["speaker"]["name"] == "Sofia", timeout=60)
        emit = await bea.wait_for("translation.chunk", lambda e: e["action"] == "EMIT", timeout=60)
        assert emit["speaker"] == {"participant_id": sofia.session_id, "name": "Sofia"}
        await bea.wait_for("caption.translation", timeout=30)
        await bea.wait_for("output_audio_buffer.started", timeout=30)
        await asyncio.sleep(2.0)
        for listener in (bea, alan):
            assert rms(listener.received_audio()) > 0.01  # the interpretation was spoken on each listener's track
        heard_alan, heard_bea = finals_by(sofia, "Alan"), finals_by(alan, "Bea")
        assert content_share(heard_alan, ALAN_WORDS) >= 0.6 and content_share(heard_bea, BEA_WORDS) >= 0.5, (
            heard_alan, heard_bea)
        assert not [e for e in sofia.events if e["type"] in ("translation.chunk", "caption.translation")]
        assert rms(sofia.received_audio()) < 0.005  # Sofia reads English: nobody needs interpreting for her

        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/v1/rooms/{room}/transcript.json") as r:
            transcript = await r.json()
        assert {line["name"] for line in transcript["lines"]} >= {"Alan", "Bea"}
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/v1/rooms/{room}/transcript.vtt") as r:
            assert "<v Alan>" in await r.text()

        await alan.close()
        left = await sofia.wait_for("room.participant.left", timeout=10)
        assert left["participant_id"] == alan.session_id and left["name"] == "Alan"
        await bea.wait_for("room.participant.left", timeout=10)
        pair = registry.rooms[room].pairs[(sofia.session_id, "en")]
        assert set(pair.sink.sinks) == {bea.session_id}
        await bea.close()
        await sofia.wait_for("room.participant.left", lambda e: e["name"] == "Bea", timeout=10)
        assert registry.rooms[room].pairs == {}  # nobody to interpret for: the pipeline is gone
        await asyncio.sleep(0.2)
        assert all(t.done() for t in pair.tasks) or not pair.tasks
        await sofia.close()
        await asyncio.sleep(0.2)
        assert room not in registry.rooms and registry.transcript(room).lines  # the transcript stays
    finally:
        for peer in peers:
            await peer.close()


async def test_room_full_and_bad_signals(server):
    room = "full-room"
    peers = [ClientPeer(server.url, "call", config={"room": room, "name": f"P{i}"}) for i in range(7)]
    try:
        for peer in peers[:6]:
            await peer.connect()
        with pytest.raises(SessionRefused) as refused:
            await peers[6].connect()
        assert refused.value.status == 409 and refused.value.body["error"]["code"] == "room_full"

        a, b = peers[0], peers[1]
        a.send({"type": "room.signal", "to": b.session_id, "kind": "offer", "payload": {"type": "offer", "sdp": "v=0"}})
        relayed = await b.wait_for("room.signal")
        assert relayed["from"] == a.session_id and relayed["kind"] == "offer" and relayed["payload"]["sdp"] == "v=0"
        bad = [({"type": "room.signal", "to": b.session_id, "kind": "bogus"}, "invalid_event"),
               ({"type": "room.signal", "kind": "offer"}, "invalid_event"),
               ({"type": "room.signal", "to": "sess_nobody", "kind": "candidate", "payload": None},
                "unknown_participant"),
               ({"type": "room.signal", "to": b.session_id, "kind": "offer",
                 "payload": {"type": "offer", "sdp": "x" * 40_000}}, "signal_too_large"),
               ({"type": "room.signal", "to": b.session_id, "kind": "answer", "payload": "nope"}, "invalid_signal")]
        for event, code in bad:
            before = len(a.events)
            a.send(event)
            error = await a.wait_for("error", after=before)
            assert error["error"]["code"] == code, (event, error)
        a.send_raw(json.dumps({"type": "room.signal", "to": b.session_id, "kind": "offer",
                               "payload": {"sdp": "y" * 70_000}}))
        error = await a.wait_for("error", lambda e: e["error"]["code"] == "message_too_large")
        assert error
        assert len([e for e in b.events if e["type"] == "room.signal"]) == 1  # nothing bad was relayed
    finally:
        await asyncio.gather(*(peer.close() for peer in peers))
