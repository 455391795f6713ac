"""One clip streamed into ``captions`` sessions through real aiortc peers, and the scores of what each got.

Used by ``rtc-agent bench captions`` (one file, or the speech set) and ``bench flood``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import numpy as np

from rtc_agent.bench.audio import resample, speech_segments_ms
from rtc_agent.bench.common import percentile_ms, wer
from rtc_agent.rtc.client import ClientPeer, SessionRefused
from rtc_agent.rtc.sources import PcmSourceTrack

__all__ = ["TARGETS", "asr_model", "score_session", "speech_ends", "stream_sessions", "synthesize_script"]

TARGETS = {"final_p50_s": 0.6, "partial_gap_s": 0.6, "wer_points_over_offline": 2.0, "sessions": 8}


def asr_model() -> str:
    """The ASR model the in-process server runs (``RTC_AGENT_ASR_MODEL``; empty: the packaged one)."""
    return os.environ.get("RTC_AGENT_ASR_MODEL", "")


def synthesize_script(script: str) -> np.ndarray:
    """The script spoken by the embedded Piper voice, sentence by sentence with pauses, at 48 kHz."""
    from rtc_agent.engines.tts.base import SynthesisRequest
    from rtc_agent.engines.tts.piper import PiperEngine

    engine = PiperEngine(noise=False)  # the same audio every run: runs stay comparable
    engine.load(lambda msg: None)
    parts = [np.zeros(24000, dtype=np.int16)]
    for line in [ln.strip() for ln in script.splitlines() if ln.strip()]:
        result = engine.synthesize(SynthesisRequest(text=line))
        parts.append(resample(result.pcm, result.sample_rate, 48000))
        parts.append(np.zeros(int(48000 * 1.2), dtype=np.int16))
    return np.concatenate(parts)


def speech_ends(audio16: np.ndarray) -> list[float]:
    """Seconds where speech ends: the last loud 10 ms frame of each Silero VAD segment."""
    spans = speech_segments_ms(audio16, min_silence_ms=250)
    frames = audio16[: len(audio16) // 160 * 160].reshape(-1, 160).astype(np.float64)
    loud = np.sqrt((frames ** 2).mean(axis=1)) > 10 ** (-45 / 20)
    ends = []
    for a, b in spans:
        idx = [i for i in range(a // 10, min(len(loud), b // 10 + 20)) if loud[i]]
        ends.append((idx[-1] + 1) / 100 if idx else b / 1000)
    return ends


async def stream_sessions(base_url: str, pcm48: np.ndarray, sessions: int, language: str,
                          prior: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """Stream the clip on ``sessions`` peers at once; per admitted session: events with arrival times and the send
    start. A peer the server refuses up front (503: at its measured capacity) is left out and counted in the
    returned ``refused``. ``prior``: the ``language_prior`` the page would send (the browser's language)."""
    config = {"language": language, **({"language_prior": prior} if prior else {})}
    peers = [ClientPeer(base_url, "captions", config=config,
                        audio=PcmSourceTrack(pcm48, 48000, tail="silence"), receive_audio=False)
             for _ in range(sessions)]
    results = await asyncio.gather(*(p.connect() for p in peers), return_exceptions=True)
    refused = sum(1 for r in results if isinstance(r, SessionRefused) and r.status == 503)
    failed = [r for r in results if isinstance(r, BaseException) and not (isinstance(r, SessionRefused)
                                                                          and r.status == 503)]
    # a refused peer still holds its HTTP session and peer connection
    await asyncio.gather(*(p.close(delete=False) for p, r in zip(peers, results, strict=True)
                           if isinstance(r, BaseException)), return_exceptions=True)
    peers = [p for p, r in zip(peers, results, strict=True) if not isinstance(r, BaseException)]
    if failed:
        await asyncio.gather(*(p.close() for p in peers), return_exceptions=True)
        raise failed[0]
    try:
        await asyncio.sleep(len(pcm48) / 48000 + 3.0)
        infos = await asyncio.gather(*(p.session_info() for p in peers))
    finally:
        await asyncio.gather(*(p.close() for p in peers), return_exceptions=True)
    return [{"events": list(zip(p.events, p.event_times, strict=True)), "sent_at": p.audio.pacer.started_at,
             "info": info} for p, info in zip(peers, infos, strict=True)], refused


def score_session(run: dict[str, Any], ends: list[float], reference: str | None) -> dict[str, Any]:
    """A session's finals scored: WER against ``reference``, final latency from the nearest speech end in
    ``ends``, and the gaps between caption events while speaking."""
    sent_at = run["sent_at"]
    finals = [(e, t) for e, t in run["events"] if e["type"] == "caption.final" and e["text"].strip()]
    latencies = []
    for event, arrived in finals:
        end_s = min(ends, key=lambda x: abs(x - event["audio_end_ms"] / 1000)) if ends else event["audio_end_ms"] / 1000
        latencies.append(arrived - (sent_at + end_s))
    gaps, last = [], None
    for event, arrived in run["events"]:
        kind = event["type"]
        if kind == "input_audio_buffer.speech_started":
            last = sent_at + event["audio_start_ms"] / 1000
        elif kind in ("caption.partial", "caption.final") and last is not None:
            gaps.append(arrived - last)
            last = None if kind == "caption.final" else arrived
        elif kind == "input_audio_buffer.speech_stopped":
            last = None
    text = " ".join(e["text"] for e, _ in finals)
    return {
        "text": text,
        "wer": round(wer(reference, text), 4) if reference else None,
        "finals": len(finals),
        "final_latency_ms": {"p50": percentile_ms(latencies, 50), "p90": percentile_ms(latencies, 90),
                             "max": percentile_ms(latencies, 100)},
        "partial_gap_ms": {"p50": percentile_ms(gaps, 50), "p90": percentile_ms(gaps, 90),
                           "max": percentile_ms(gaps, 100)},
        "latencies_s": [round(x, 3) for x in latencies],
        "app_stats": run["info"].get("app_stats"),
    }
