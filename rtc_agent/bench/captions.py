"""``rtc-agent bench captions``: live captions measured at a real aiortc peer.

The audio file is streamed in real time through a real peer connection into the ``captions`` app of an
in-process server with the configured engines. Measured at the peer:

- WER of the final captions against the reference, and the offline WER of the same model on the same file
  (faster-whisper's ``transcribe`` over the whole file: 30 s windows, beam search);
- final-caption latency: arrival of each ``caption.final`` minus the moment the end of its speech was sent
  (speech ends found offline from the file's energy inside Silero VAD segments);
- partial cadence: gaps between caption events while speaking (from the speech start to the first partial too);
- real-time factor (ASR engine busy time / audio time) and process CPU use;
- with ``--sessions N``: the same file on 1, 2, 4, ... N concurrent sessions, and the largest count that stays
  real-time (every final within ``--realtime-limit`` seconds of its speech end, no VAD backlog dropped).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.bench.common import local_server, machine, percentile_ms, wer, write_json
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PcmSourceTrack, load_audio

TARGETS = {"final_p50_s": 0.6, "partial_gap_s": 0.6, "wer_points_over_offline": 2.0, "sessions": 8}


def synthesize_script(script: str) -> np.ndarray:
    """The script spoken by the embedded Piper voice, sentence by sentence with pauses, at 48 kHz."""
    import av

    from rtc_agent.engines.tts.base import SynthesisRequest
    from rtc_agent.engines.tts.piper import PiperEngine

    engine = PiperEngine(noise=False)  # the same audio every run: runs stay comparable
    engine.load(lambda msg: None)
    parts = [np.zeros(24000, dtype=np.int16)]
    for line in [ln.strip() for ln in script.splitlines() if ln.strip()]:
        result = engine.synthesize(SynthesisRequest(text=line))
        frame = av.AudioFrame.from_ndarray(result.pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = result.sample_rate
        resampler = av.AudioResampler(format="s16", layout="mono", rate=48000)
        parts += [f.to_ndarray().reshape(-1) for f in [*resampler.resample(frame), *resampler.resample(None)]]
        parts.append(np.zeros(int(48000 * 1.2), dtype=np.int16))
    return np.concatenate(parts)


def speech_ends(audio16: np.ndarray) -> list[float]:
    """Seconds where speech ends: the last loud 10 ms frame of each Silero VAD segment."""
    from rtc_agent.apps.captions.speech_segmenter import SpeechSegmenter
    from rtc_agent.engines.vad.silero import SileroVad, speech_probabilities

    vad = SileroVad()
    vad.load(lambda msg: None)
    probs = speech_probabilities(vad, audio16)
    segmenter = SpeechSegmenter(min_silence_ms=250)
    spans: list[tuple[int, int]] = []
    start = 0
    for i, p in enumerate(probs):
        for event in segmenter.feed(float(p), i * 32, (i + 1) * 32):
            if event.kind == "start":
                start = event.ms
            elif event.kind == "end":
                spans.append((start, event.ms))
    spans += [(start, e.ms) for e in segmenter.flush(len(probs) * 32)]
    frames = audio16[: len(audio16) // 160 * 160].reshape(-1, 160).astype(np.float64)
    loud = np.sqrt((frames ** 2).mean(axis=1)) > 10 ** (-45 / 20)
    ends = []
    for a, b in spans:
        idx = [i for i in range(a // 10, min(len(loud), b // 10 + 20)) if loud[i]]
        ends.append((idx[-1] + 1) / 100 if idx else b / 1000)
    return ends


def offline_text(audio16: np.ndarray, language: str | None) -> tuple[str, float]:
    """faster-whisper's offline transcription of the whole file with the packaged model (and its run time)."""
    from faster_whisper import WhisperModel

    from rtc_agent.config import Settings
    from rtc_agent.engines.asr.whisper import resolve_model

    path = resolve_model("", Path(Settings().cache_dir), lambda msg: None)
    model = WhisperModel(path, device="cpu", compute_type="int8")
    start = time.monotonic()
    segments, _ = model.transcribe(audio16, language=language, vad_filter=False)
    text = " ".join(s.text.strip() for s in segments)
    return text, time.monotonic() - start


async def stream_sessions(base_url: str, pcm48: np.ndarray, sessions: int, language: str) -> list[dict[str, Any]]:
    """Stream the clip on ``sessions`` peers at once; per session: events with arrival times and the send start."""
    peers = [ClientPeer(base_url, "captions", config={"language": language},
                        audio=PcmSourceTrack(pcm48, 48000, tail="silence"), receive_audio=False)
             for _ in range(sessions)]
    await asyncio.gather(*(p.connect() for p in peers))
    try:
        await asyncio.sleep(len(pcm48) / 48000 + 3.0)
        infos = await asyncio.gather(*(p.session_info() for p in peers))
    finally:
        await asyncio.gather(*(p.close() for p in peers), return_exceptions=True)
    return [{"events": list(zip(p.events, p.event_times, strict=True)), "sent_at": p.audio.pacer.started_at,
             "info": info} for p, info in zip(peers, infos, strict=True)]


def score_session(run: dict[str, Any], ends: list[float], reference: str | None) -> dict[str, Any]:
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


async def run(audio: str | None, script: str | None, reference: str | None, sessions: int, language: str,
              realtime_limit_s: float) -> dict[str, Any]:
    if audio:
        pcm48 = load_audio(audio, 48000)
        source = audio
    elif script:
        pcm48 = synthesize_script(script)
        source = "script synthesized with the embedded Piper voice"
        reference = reference or " ".join(script.split())
    else:
        raise SystemExit("give --audio FILE or --script FILE")
    audio16 = load_audio_array(pcm48)
    ends = speech_ends(audio16)
    offline, offline_s = offline_text(audio16, None if language == "auto" else language)
    counts = sorted({n for n in (1, 2, 4, 8, 16) if n < sessions} | {sessions})
    by_count: dict[str, Any] = {}
    first: dict[str, Any] | None = None
    async with local_server() as server:
        for n in counts:
            before = await server.engine_stats("asr")
            cpu0, wall0 = server.cpu_seconds(), time.monotonic()
            runs = await stream_sessions(server.base_url, pcm48, n, language)
            cpu, wall = server.cpu_seconds() - cpu0, time.monotonic() - wall0
            after = await server.engine_stats("asr")
            scores = [score_session(r, ends, reference) for r in runs]
            busy_s = (_busy_ms(after) - _busy_ms(before)) / 1000
            worst = max((s["final_latency_ms"]["max"] or 0) for s in scores) / 1000
            complete = all(s["finals"] >= len(ends) * 0.8 for s in scores)
            dropped = sum((s["app_stats"] or {}).get("vad_dropped_ms", 0) for s in scores)
            by_count[str(n)] = {
                "sessions": n,
                "realtime": bool(complete and worst <= realtime_limit_s and dropped == 0),
                "final_latency_p50_ms": percentile_ms([x for s in scores for x in s["latencies_s"]], 50),
                "final_latency_p90_ms": percentile_ms([x for s in scores for x in s["latencies_s"]], 90),
                "final_latency_max_ms": round(worst * 1000, 1),
                "mean_wer": round(float(np.mean([s["wer"] for s in scores])), 4) if reference else None,
                "asr_busy_s": round(busy_s, 2),
                "rtf": round(busy_s / (n * len(audio16) / 16000), 3),
                "cpu_cores_used": round(cpu / wall, 2),
                "mean_batch_size": after.get("mean_batch_size"),
            }
            if first is None:
                first = scores[0]
    assert first is not None
    realtime_counts = [int(k) for k, v in by_count.items() if v["realtime"]]
    offline_wer = round(wer(reference, offline), 4) if reference else None
    single = by_count[str(counts[0])]
    return {
        "benchmark": "captions",
        "source": source,
        "audio_s": round(len(audio16) / 16000, 2),
        "utterances": len(ends),
        "language": language,
        "wer": first["wer"],
        "offline_wer": offline_wer,
        "wer_points_over_offline": round(100 * (first["wer"] - offline_wer), 2) if reference else None,
        "final_latency_ms": first["final_latency_ms"],
        "partial_gap_ms": first["partial_gap_ms"],
        "rtf": single["rtf"],
        "cpu_cores_used": single["cpu_cores_used"],
        "offline_transcribe_s": round(offline_s, 2),
        "max_realtime_sessions": max(realtime_counts) if realtime_counts else 0,
        "by_sessions": by_count,
        "targets": TARGETS,
        "text": first["text"],
        "offline_text": offline,
        "reference": reference,
        "machine": machine(),
    }


def load_audio_array(pcm48: np.ndarray) -> np.ndarray:
    """48 kHz int16 -> 16 kHz float32 (the rate the server's apps see)."""
    import av

    frame = av.AudioFrame.from_ndarray(pcm48.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = 48000
    resampler = av.AudioResampler(format="flt", layout="mono", rate=16000)
    parts = [f.to_ndarray().reshape(-1) for f in [*resampler.resample(frame), *resampler.resample(None)]]
    return np.concatenate(parts).astype(np.float32)


def _busy_ms(stats: dict[str, Any]) -> float:
    return (stats["mean_run_ms"] or 0) * stats["batches"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--audio", help="audio file to stream (any format ffmpeg reads)")
    parser.add_argument("--script", type=Path, help="text file, one sentence a line, spoken by the embedded voice "
                                                    "(used when --audio is not given; also the reference)")
    parser.add_argument("--ref", help="reference transcript: the text itself or @FILE")
    parser.add_argument("--sessions", type=int, default=1, help="largest number of concurrent sessions to try "
                                                                 "(runs 1, 2, 4, ... up to it; default 1)")
    parser.add_argument("--language", default="en", help="spoken language code, or auto (default en)")
    parser.add_argument("--realtime-limit", type=float, default=2.0,
                        help="a session count is real-time when every final arrives within this many seconds of "
                             "its speech end (default 2)")
    parser.add_argument("--out", help="write the JSON results here")


def main(args: argparse.Namespace) -> dict[str, Any]:
    reference = args.ref
    if reference and reference.startswith("@"):
        reference = Path(reference[1:]).read_text()
    script = args.script.read_text() if args.script else None
    result = asyncio.run(run(args.audio, script, reference, args.sessions, args.language, args.realtime_limit))
    return write_json(result, args.out)
