"""``rtc-agent bench captions --set``: live captions on the speech set of voices we did not make.

Every clip of the set (:mod:`rtc_agent.bench.speech_set`, built when missing) is streamed in a session of its own,
one after another, and scored against its reference next to the offline WER of the same model on the same clip,
per clip, per family (espeak, human, human-pypi, noise-20db, noise-10db) and overall, with the sentences lost,
the finals repeated and the caption events in another language than expected. Final latency is measured from the
nearest end of a run of speech in the clip (``Clip.speech_ends_s``). With ``sessions > 1`` the first ``load_s``
seconds of the set, as one stream, run on 1, 4, ... N sessions at once. The result records the CPU model and
the load average before and after (other work on the machine shows there).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.bench.audio import load_audio_48k, offline_whisper
from rtc_agent.bench.captions_scoring import SCORING, family_rows, finals_of, repeated_finals
from rtc_agent.bench.captions_sessions import TARGETS, asr_model, score_session, stream_sessions
from rtc_agent.bench.common import local_server, machine, percentile_ms, wer
from rtc_agent.bench.speech_set import build, default_dir, load_clip

__all__ = ["cpu_model", "load_runs", "run_set", "set_checks"]


def cpu_model() -> str | None:
    """The CPU's model name as lscpu shows it (``/proc/cpuinfo``; None elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


#: The captions session's own figures kept per clip (``app_stats``): how its finals were decoded.
DECODE_STATS = ("final_beam", "partial_interval_ms", "final_decodes", "hard_finals", "lost_finals", "splits",
                "repeats_dropped")


def _ends(clip: Any) -> list[float]:
    return clip.speech_ends_s or [s["end_s"] for s in clip.sentences]


def set_checks(run: dict[str, Any], spans: list[tuple[float, float]], expect_language: str | None,
               offset_s: float = 0.0, reference: str | None = None) -> dict[str, Any]:
    """Lost sentences (no non-empty final overlapping a reference sentence), finals repeated
    (:func:`repeated_finals` against ``reference``), caption events labelled with another language, and the
    session's own ``max_behind_ms`` and ``decodes`` (its ``DECODE_STATS``)."""
    stats = run["info"].get("app_stats") or {}
    finals = [e for e, _ in run["events"] if e["type"] == "caption.final" and e["text"].strip()]
    lost = 0
    for a, b in spans:
        if not any(f["audio_start_ms"] / 1000 - offset_s < b + 0.3 and f["audio_end_ms"] / 1000 - offset_s > a - 0.3
                   for f in finals):
            lost += 1
    other = [e.get("language") for e, _ in run["events"] if e["type"] in ("caption.partial", "caption.final")
             and (e.get("text") or e.get("committed") or e.get("tentative"))
             and expect_language and e.get("language") not in (None, expect_language)]
    return {"lost_sentences": lost, "repeated_finals": repeated_finals([f["text"] for f in finals], reference),
            "other_language_events": len(other), "other_languages": sorted(set(other)),
            "max_behind_ms": stats.get("max_behind_ms"), "decodes": {key: stats.get(key) for key in DECODE_STATS}}


async def run_set(set_dir: Path | None, sessions: int, language: str, expect_language: str | None,
                  realtime_limit_s: float, load_s: float, only: list[str] | None = None,
                  prior: str | None = None, note: str | None = None) -> dict[str, Any]:
    """The set (or the clips and families in ``only``) streamed clip by clip; ``note``: a free-text remark on
    the conditions, recorded in the result."""
    load_before = os.getloadavg()
    root = set_dir or default_dir()
    clips = [c for c in build(root) if not only or c.name in only or c.family in only]
    rows: list[dict[str, Any]] = []
    latencies: list[float] = []
    audio = {c.name: load_clip(root, c) for c in clips}
    offline_lang = None if language == "auto" else language
    for clip in clips:
        text, _ = offline_whisper(audio[clip.name].astype(np.float32) / 32768, offline_lang, model_name=asr_model())
        rows.append({"clip": clip.name, "family": clip.family, "voice": clip.voice, "reference": clip.reference,
                     "offline_text": text})
    async with local_server() as server:
        for clip, row in zip(clips, rows, strict=True):
            pcm16 = audio[clip.name]
            run_ = (await stream_sessions(server.base_url, load_audio_48k(pcm16), 1, language, prior))[0][0]
            score = score_session(run_, _ends(clip), clip.reference)
            checks = set_checks(run_, [(s["start_s"], s["end_s"]) for s in clip.sentences], expect_language,
                                reference=clip.reference)
            latencies += score["latencies_s"]
            row.update(text=score["text"], streaming_wer=score["wer"],
                       offline_wer=round(wer(clip.reference, row["offline_text"]), 4),
                       final_latency_ms=score["final_latency_ms"], partial_gap_ms=score["partial_gap_ms"], **checks,
                       finals=finals_of(run_, score["latencies_s"]))
        by_count: dict[str, Any] = {}
        if sessions > 1:
            by_count = await load_runs(server, clips, audio, sessions, language, expect_language, realtime_limit_s,
                                        load_s, prior)
    families = family_rows(rows, "family")
    return {
        "benchmark": "captions-set",
        "source": f"speech set {root} ({len(clips)} clips, {sum(c.duration_s for c in clips) / 60:.1f} min)",
        "language": language,
        "language_prior": prior,
        "asr_model": asr_model() or "packaged whisper base",
        "scoring": SCORING,
        "families": families,
        "voices": family_rows(rows, "clip"),
        "final_latency_ms": {"p50": percentile_ms(latencies, 50), "p90": percentile_ms(latencies, 90),
                             "max": percentile_ms(latencies, 100)},
        "lost_sentences": sum(r["lost_sentences"] for r in rows),
        "repeated_finals": sum(r["repeated_finals"] for r in rows),
        "other_language_events": sum(r["other_language_events"] for r in rows),
        "by_sessions": by_count,
        "clips": rows,
        "targets": TARGETS,
        "machine": {**machine(), "cpu_model": cpu_model(), "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()],
                    "cpu_isa_env": {k: v for k, v in os.environ.items()
                                    if k in ("CT2_FORCE_CPU_ISA", "CT2_USE_MKL", "ONEDNN_MAX_CPU_ISA",
                                             "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")}},
        "note": note,
    }


async def load_runs(server: Any, clips: list[Any], audio: dict[str, np.ndarray], sessions: int, language: str,
                     expect_language: str | None, realtime_limit_s: float, load_s: float,
                     prior: str | None = None) -> dict[str, Any]:
    """The first ``load_s`` seconds of the set (whole clips) as one stream on 1, 4, ... ``sessions`` peers."""
    parts, spans, ends, refs, at = [], [], [], [], 0.0
    for clip in clips:
        if at >= load_s:
            break
        parts.append(audio[clip.name])
        spans += [(s["start_s"] + at, s["end_s"] + at) for s in clip.sentences]
        ends += [e + at for e in _ends(clip)]
        refs.append(clip.reference)
        at += len(audio[clip.name]) / 16000
    pcm16 = np.concatenate(parts)
    reference = " ".join(refs)
    out: dict[str, Any] = {}
    for n in sorted({1, *(k for k in (4, 8, 16) if k < sessions), sessions}):
        runs, refused = await stream_sessions(server.base_url, load_audio_48k(pcm16), n, language, prior)
        scores = [score_session(r, ends, reference) for r in runs]
        checks = [set_checks(r, spans, expect_language, reference=reference) for r in runs]
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
