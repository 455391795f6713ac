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

With ``--set [DIR]`` it runs on the speech set of voices we did not make (:mod:`rtc_agent.bench.speech_set`,
built when missing): every clip streamed in a session of its own, one after another, and scored against its
reference next to the offline WER of the same model on the same clip (faster-whisper ``transcribe`` over the
whole clip, beam 5), per clip, per family (espeak, human, noise-20db, noise-10db) and overall. It also counts
sentences of the reference without a final overlapping them (lost), finals that repeat a sentence, and caption
events in a language other than ``--expect-language`` (for ``--language auto``). With ``--sessions N`` the
first ``--load-s`` seconds of the set, as one stream, run on 1, 4, ... N sessions at once (WER, latency,
lost and repeated per count).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.bench.common import local_server, machine, percentile_ms, wer, write_json
from rtc_agent.rtc.client import ClientPeer, SessionRefused
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


_offline_models: dict[str, Any] = {}


def offline_text(audio16: np.ndarray, language: str | None, model_name: str = "") -> tuple[str, float]:
    """faster-whisper's offline transcription of the whole file (30 s windows, beam 5, conditioned on the
    previous text) with the server's model (``--asr-model``; the packaged base by default), and its run time."""
    from faster_whisper import WhisperModel

    from rtc_agent.config import Settings
    from rtc_agent.engines.asr.whisper import resolve_model

    if model_name not in _offline_models:
        path = resolve_model(model_name, Path(Settings().cache_dir), lambda msg: None)
        _offline_models[model_name] = WhisperModel(path, device="cpu", compute_type="int8")
    model = _offline_models[model_name]
    start = time.monotonic()
    segments, _ = model.transcribe(audio16, language=language, beam_size=5, vad_filter=False)
    text = " ".join(s.text.strip() for s in segments)
    return text, time.monotonic() - start


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
    offline, offline_s = offline_text(audio16, None if language == "auto" else language, _asr_model())
    counts = sorted({n for n in (1, 2, 4, 8, 16) if n < sessions} | {sessions})
    by_count: dict[str, Any] = {}
    first: dict[str, Any] | None = None
    async with local_server() as server:
        for n in counts:
            before = await server.engine_stats("asr")
            cpu0, wall0 = server.cpu_seconds(), time.monotonic()
            runs, refused = await stream_sessions(server.base_url, pcm48, n, language)
            cpu, wall = server.cpu_seconds() - cpu0, time.monotonic() - wall0
            after = await server.engine_stats("asr")
            scores = [score_session(r, ends, reference) for r in runs]
            busy_s = (_busy_ms(after) - _busy_ms(before)) / 1000
            worst = max(((s["final_latency_ms"]["max"] or 0) for s in scores), default=0) / 1000
            complete = all(s["finals"] >= len(ends) * 0.8 for s in scores)
            dropped = sum((s["app_stats"] or {}).get("vad_dropped_ms", 0) for s in scores)
            by_count[str(n)] = {
                "sessions": n, "admitted": len(runs), "refused": refused,
                "realtime": bool(complete and worst <= realtime_limit_s and dropped == 0),
                "final_latency_p50_ms": percentile_ms([x for s in scores for x in s["latencies_s"]], 50),
                "final_latency_p90_ms": percentile_ms([x for s in scores for x in s["latencies_s"]], 90),
                "final_latency_max_ms": round(worst * 1000, 1),
                "mean_wer": round(float(np.mean([s["wer"] for s in scores])), 4) if reference and scores else None,
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


def _asr_model() -> str:
    import os

    return os.environ.get("RTC_AGENT_ASR_MODEL", "")


def to48k(pcm16: np.ndarray) -> np.ndarray:
    """16 kHz int16 -> 48 kHz int16 (what the peer sends)."""
    import av

    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm16.reshape(1, -1)), format="s16", layout="mono")
    frame.sample_rate = 16000
    resampler = av.AudioResampler(format="s16", layout="mono", rate=48000)
    return np.concatenate([f.to_ndarray().reshape(-1) for f in [*resampler.resample(frame),
                                                                 *resampler.resample(None)]])


def set_checks(run: dict[str, Any], spans: list[tuple[float, float]], expect_language: str | None,
               offset_s: float = 0.0) -> dict[str, Any]:
    """Lost sentences (no non-empty final overlapping a reference sentence), finals repeating a sentence (their
    own or the one before), and caption events labelled with another language."""
    from rtc_agent.apps.captions.local_agreement import drop_repeated_sentences
    from rtc_agent.bench.common import normalize_text

    finals = [e for e, _ in run["events"] if e["type"] == "caption.final" and e["text"].strip()]
    lost = 0
    for a, b in spans:
        if not any(f["audio_start_ms"] / 1000 - offset_s < b + 0.3 and f["audio_end_ms"] / 1000 - offset_s > a - 0.3
                   for f in finals):
            lost += 1
    norm = [normalize_text(f["text"]) for f in finals]
    repeated = sum(1 for f, n in zip(finals, norm, strict=True)
                   if normalize_text(drop_repeated_sentences(f["text"])) != n)
    repeated += sum(1 for x, y in itertools.pairwise(norm) if len(y.split()) >= 4 and x == y)
    other = [e.get("language") for e, _ in run["events"] if e["type"] in ("caption.partial", "caption.final")
             and (e.get("text") or e.get("committed") or e.get("tentative"))
             and expect_language and e.get("language") not in (None, expect_language)]
    return {"lost_sentences": lost, "repeated_finals": repeated, "other_language_events": len(other),
            "other_languages": sorted(set(other)), "max_behind_ms": (run["info"].get("app_stats") or {}).get(
                "max_behind_ms")}


def _family_rows(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row[key], []).append(row)
    groups["overall"] = rows
    out = {}
    for name, members in groups.items():
        ref = " ".join(r["reference"] for r in members)
        streaming = wer(ref, " ".join(r["text"] for r in members))
        offline = wer(ref, " ".join(r["offline_text"] for r in members))
        out[name] = {"clips": len(members), "streaming_wer": round(streaming, 4), "offline_wer": round(offline, 4),
                     "points_over_offline": round(100 * (streaming - offline), 2),
                     "target_met": bool(100 * (streaming - offline) <= TARGETS["wer_points_over_offline"])}
    return out


async def run_set(set_dir: Path | None, sessions: int, language: str, expect_language: str | None,
                  realtime_limit_s: float, load_s: float, only: list[str] | None = None,
                  prior: str | None = None) -> dict[str, Any]:
    from rtc_agent.bench.speech_set import build, default_dir, load_clip

    root = set_dir or default_dir()
    clips = [c for c in build(root) if not only or c.name in only or c.family in only]
    rows: list[dict[str, Any]] = []
    latencies: list[float] = []
    audio = {c.name: load_clip(root, c) for c in clips}
    offline_lang = None if language == "auto" else language
    for clip in clips:
        text, _ = offline_text(audio[clip.name].astype(np.float32) / 32768, offline_lang, _asr_model())
        rows.append({"clip": clip.name, "family": clip.family, "voice": clip.voice, "reference": clip.reference,
                     "offline_text": text})
    async with local_server() as server:
        for clip, row in zip(clips, rows, strict=True):
            pcm16 = audio[clip.name]
            run_ = (await stream_sessions(server.base_url, to48k(pcm16), 1, language, prior))[0][0]
            ends = [s["end_s"] for s in clip.sentences]
            score = score_session(run_, ends, clip.reference)
            checks = set_checks(run_, [(s["start_s"], s["end_s"]) for s in clip.sentences], expect_language)
            latencies += score["latencies_s"]
            row.update(text=score["text"], streaming_wer=score["wer"],
                       offline_wer=round(wer(clip.reference, row["offline_text"]), 4),
                       final_latency_ms=score["final_latency_ms"], partial_gap_ms=score["partial_gap_ms"], **checks)
        by_count: dict[str, Any] = {}
        if sessions > 1:
            by_count = await _load_runs(server, clips, audio, sessions, language, expect_language, realtime_limit_s,
                                        load_s, prior)
    families = _family_rows(rows, "family")
    return {
        "benchmark": "captions-set",
        "source": f"speech set {root} ({len(clips)} clips, {sum(c.duration_s for c in clips) / 60:.1f} min)",
        "language": language,
        "language_prior": prior,
        "asr_model": _asr_model() or "packaged whisper base",
        "families": families,
        "voices": _family_rows(rows, "clip"),
        "final_latency_ms": {"p50": percentile_ms(latencies, 50), "p90": percentile_ms(latencies, 90),
                             "max": percentile_ms(latencies, 100)},
        "lost_sentences": sum(r["lost_sentences"] for r in rows),
        "repeated_finals": sum(r["repeated_finals"] for r in rows),
        "other_language_events": sum(r["other_language_events"] for r in rows),
        "by_sessions": by_count,
        "clips": rows,
        "targets": TARGETS,
        "machine": machine(),
    }


async def _load_runs(server: Any, clips: list[Any], audio: dict[str, np.ndarray], sessions: int, language: str,
                     expect_language: str | None, realtime_limit_s: float, load_s: float,
                     prior: str | None = None) -> dict[str, Any]:
    """The first ``load_s`` seconds of the set (whole clips) as one stream on 1, 4, ... ``sessions`` peers."""
    parts, spans, refs, at = [], [], [], 0.0
    for clip in clips:
        if at >= load_s:
            break
        parts.append(audio[clip.name])
        spans += [(s["start_s"] + at, s["end_s"] + at) for s in clip.sentences]
        refs.append(clip.reference)
        at += len(audio[clip.name]) / 16000
    pcm16 = np.concatenate(parts)
    reference = " ".join(refs)
    ends = [b for _, b in spans]
    out: dict[str, Any] = {}
    for n in sorted({1, *(k for k in (4, 8, 16) if k < sessions), sessions}):
        runs, refused = await stream_sessions(server.base_url, to48k(pcm16), n, language, prior)
        scores = [score_session(r, ends, reference) for r in runs]
        checks = [set_checks(r, spans, expect_language) for r in runs]
        lat = [x for sc in scores for x in sc["latencies_s"]]
        worst = max(lat) if lat else 0.0
        lost = sum(c["lost_sentences"] for c in checks)
        out[str(n)] = {
            "sessions": n, "admitted": len(runs), "refused": refused, "audio_s": round(len(pcm16) / 16000, 1),
            "mean_wer": round(float(np.mean([sc["wer"] for sc in scores])), 4) if scores else None,
            "final_latency_p50_ms": percentile_ms(lat, 50), "final_latency_p90_ms": percentile_ms(lat, 90),
            "final_latency_max_ms": round(worst * 1000, 1),
            "realtime": bool(worst <= realtime_limit_s and lost == 0),
            "lost_sentences": lost, "repeated_finals": sum(c["repeated_finals"] for c in checks),
            "other_language_events": sum(c["other_language_events"] for c in checks),
            "max_behind_ms": max((c["max_behind_ms"] or 0) for c in checks),
        }
    return out


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
    parser.add_argument("--set", nargs="?", const="", default=None, metavar="DIR",
                        help="run on the speech set of voices we did not make (built into DIR, default "
                             "~/.cache/rtc-agent/speech-set-v1, when missing)")
    parser.add_argument("--only", help="with --set: comma-separated clip names or families")
    parser.add_argument("--expect-language", default="en",
                        help="with --set: caption events labelled otherwise count as wrong (default en)")
    parser.add_argument("--language-prior", default=None,
                        help="with --language auto: the language_prior the page sends (the browser's language)")
    parser.add_argument("--load-s", type=float, default=90.0,
                        help="with --set and --sessions: seconds of the set streamed per session (default 90)")
    parser.add_argument("--out", help="write the JSON results here")


def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.set is not None:
        only = [x.strip() for x in args.only.split(",")] if args.only else None
        result = asyncio.run(run_set(Path(args.set) if args.set else None, args.sessions, args.language,
                                     args.expect_language, args.realtime_limit, args.load_s, only,
                                     args.language_prior))
        return write_json(result, args.out)
    reference = args.ref
    if reference and reference.startswith("@"):
        reference = Path(reference[1:]).read_text()
    script = args.script.read_text() if args.script else None
    result = asyncio.run(run(args.audio, script, reference, args.sessions, args.language, args.realtime_limit))
    return write_json(result, args.out)
