"""Captions through the real path: a real aiortc peer, the real server, Silero VAD and Whisper base from the
packages, speech synthesized by the Piper voice."""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
import numpy as np

from rtc_agent.bench.common import wer
from rtc_agent.engines.asr.base import TranscribeRequest
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PcmSourceTrack
from tests.conftest import shared_worker
from tests.speech import speech_clip, synthesize

SENTENCES = [
    "The weather today is sunny with a light breeze from the west.",
    "Please remember to bring your umbrella tomorrow morning.",
    "She walked along the river and watched the boats drift slowly by.",
]


async def stream(server, pcm48: np.ndarray, extra_s: float = 2.5, config: dict | None = None) -> ClientPeer:
    peer = ClientPeer(server.url, "captions", config=config or {"language": "en"},
                      audio=PcmSourceTrack(pcm48, 48000, tail="silence"), receive_audio=False)
    await peer.connect()
    await asyncio.sleep(len(pcm48) / 48000 + extra_s)
    return peer


async def test_spoken_sentences_become_final_captions(server):
    clip, spans = speech_clip(SENTENCES, gap_s=1.0, sample_rate=48000)
    peer = await stream(server, clip)
    try:
        finals = [e for e in peer.events if e["type"] == "caption.final"]
        partials = [e for e in peer.events if e["type"] == "caption.partial"]
        text = " ".join(e["text"] for e in finals)
        assert wer(" ".join(SENTENCES), text) <= 0.15, text
        assert len(finals) >= len(SENTENCES)
        assert len(partials) >= 2 * len(SENTENCES)
        # committed text of a segment never changes once sent
        by_segment: dict[str, list[str]] = {}
        for p in partials:
            by_segment.setdefault(p["segment_id"], []).append(p["committed"])
        for committed in by_segment.values():
            for a, b in itertools.pairwise(committed):
                assert b.startswith(a)
        # positions are on the session clock and match where the sentences are in the clip
        for (start_s, end_s), final in zip(spans, finals, strict=False):
            assert abs(final["audio_start_ms"] / 1000 - start_s) < 0.6
            assert abs(final["audio_end_ms"] / 1000 - end_s) < 0.6
        info = await peer.session_info()
        assert info["app_stats"]["language"] == "en"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{server.url}/v1/sessions/{peer.session_id}/captions.vtt") as resp:
                vtt = await resp.text()
                assert resp.status == 200 and resp.content_type == "text/vtt"
            async with http.get(f"{server.url}/v1/sessions/{peer.session_id}/captions.srt") as resp:
                srt = await resp.text()
            async with http.get(f"{server.url}/metrics") as resp:
                metrics = await resp.text()
        assert 'rtc_agent_stage_latency_seconds_count{stage="captions_decode"}' in metrics
        assert vtt.startswith("WEBVTT") and "umbrella" in vtt and " --> " in vtt
        assert srt.startswith("1\n00:00:0") and "," in srt.splitlines()[1]
    finally:
        await peer.close()


async def test_silence_and_noise_produce_no_captions(server):
    rng = np.random.default_rng(7)
    silence = np.zeros(48000 * 3, dtype=np.int16)
    noise = (rng.normal(0, 0.05, 48000 * 3) * 32767).astype(np.int16)
    hum = (0.1 * np.sin(2 * np.pi * 60 * np.arange(48000 * 2) / 48000) * 32767).astype(np.int16)
    peer = await stream(server, np.concatenate([silence, noise, hum]), extra_s=1.5)
    try:
        captions = [e for e in peer.events if e["type"] in ("caption.partial", "caption.final") and
                    (e.get("text") or e.get("committed") or e.get("tentative"))]
        assert captions == []
    finally:
        await peer.close()


async def test_unknown_language_and_bad_config_are_refused(server):
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.url}/v1/sessions", json={"app": "captions", "sdp": "v=0", "config": {"language": "klingon"}}
    ) as resp:
        assert resp.status == 400 and (await resp.json())["error"]["code"] == "invalid_config"


async def test_short_window_matches_the_full_window(start_server):
    """The encoder window padded to the audio (not to 30 s) gives the same text on clean speech, up to the odd
    article Whisper base is unsure about in any window, and is no less accurate against the script."""
    from rtc_agent.config import Settings

    script = [*SENTENCES, "Our team meeting starts in the large conference room after lunch.",
              "We ordered fresh bread, soft cheese and a bowl of ripe cherries.",
              "My brother is learning to play the piano after work every evening."]
    worker = shared_worker(Settings())
    shorts, fulls = [], []
    try:
        for sentence in script:
            audio = synthesize(sentence, 16000).astype(np.float32) / 32768
            short = await worker.call("asr", TranscribeRequest(audio, language="en"))
            full = await worker.call("asr", TranscribeRequest(audio, language="en", full_window=True))
            assert short.window_s < 8 and full.window_s == 30
            assert wer(full.text, short.text) <= 0.1, (short.text, full.text)
            shorts.append(short.text)
            fulls.append(full.text)
    finally:
        await worker.close()
    assert wer(" ".join(fulls), " ".join(shorts)) <= 0.04
    assert wer(" ".join(script), " ".join(shorts)) <= wer(" ".join(script), " ".join(fulls)) + 0.05


async def test_concurrent_sessions_are_batched(server):
    clip, _ = speech_clip(SENTENCES[:1], sample_rate=48000)
    peers = [ClientPeer(server.url, "captions", config={"language": "en"},
                        audio=PcmSourceTrack(clip, 48000, tail="silence"), receive_audio=False) for _ in range(3)]
    await asyncio.gather(*(p.connect() for p in peers))
    try:
        finals = await asyncio.gather(*(p.wait_for("caption.final", lambda e: bool(e["text"]), timeout=30)
                                        for p in peers))
        for final in finals:
            assert wer(SENTENCES[0], final["text"]) <= 0.2, final["text"]
    finally:
        await asyncio.gather(*(p.close() for p in peers))
    from rtc_agent.server.keys import WORKER

    assert server.app[WORKER].stats()["asr"]["mean_batch_size"] > 1.0
