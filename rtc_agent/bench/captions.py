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

Every WER is scored by :func:`rtc_agent.words.wer` (numbers, contractions, spellings and compounds folded alike
on every side). ``--rescore FILE`` scores a saved ``--set`` result again without running anything, so figures from
before and after a change of the normaliser compare.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.bench.audio import load_audio_array, offline_whisper
from rtc_agent.bench.captions_scoring import rescore_file
from rtc_agent.bench.captions_sessions import (
    TARGETS,
    asr_model,
    score_session,
    speech_ends,
    stream_sessions,
    synthesize_script,
)
from rtc_agent.bench.captions_set import run_set
from rtc_agent.bench.common import local_server, machine, percentile_ms, wer, write_json
from rtc_agent.rtc.sources import load_audio


async def run(audio: str | None, script: str | None, reference: str | None, sessions: int, language: str,
              realtime_limit_s: float) -> dict[str, Any]:
    """The one-file benchmark: ``audio`` (a file) or ``script`` (spoken by Piper) on 1, 2, 4, ... ``sessions``."""
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
    offline, offline_s = offline_whisper(audio16, None if language == "auto" else language, model_name=asr_model())
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
                             "~/.cache/rtc-agent/speech-set-v2, when missing)")
    parser.add_argument("--only", help="with --set: comma-separated clip names or families")
    parser.add_argument("--expect-language", default="en",
                        help="with --set: caption events labelled otherwise count as wrong (default en)")
    parser.add_argument("--language-prior", default=None,
                        help="with --language auto: the language_prior the page sends (the browser's language)")
    parser.add_argument("--load-s", type=float, default=90.0,
                        help="with --set and --sessions: seconds of the set streamed per session (default 90)")
    parser.add_argument("--note", help="with --set: a remark on the conditions (e.g. a shared machine), kept in "
                                       "the JSON")
    parser.add_argument("--rescore", metavar="FILE",
                        help="score a saved --set result (its clips' reference, streaming and offline texts) again "
                             "with today's normaliser, without running anything; with --out, write it there")
    parser.add_argument("--out", help="write the JSON results here")


def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.rescore:
        try:
            return write_json(rescore_file(args.rescore), args.out)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"--rescore {args.rescore}: {exc}") from exc
    if args.set is not None:
        only = [x.strip() for x in args.only.split(",")] if args.only else None
        result = asyncio.run(run_set(Path(args.set) if args.set else None, args.sessions, args.language,
                                     args.expect_language, args.realtime_limit, args.load_s, only,
                                     args.language_prior, args.note))
        return write_json(result, args.out)
    reference = args.ref
    if reference and reference.startswith("@"):
        reference = Path(reference[1:]).read_text()
    script = args.script.read_text() if args.script else None
    result = asyncio.run(run(args.audio, script, reference, args.sessions, args.language, args.realtime_limit))
    return write_json(result, args.out)
