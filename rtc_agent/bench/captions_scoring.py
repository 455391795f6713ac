"""Scoring of the captions set's results: WER per family, the finals repeated, each clip's finals, and
``--rescore``: a saved result scored again with today's normaliser, without running anything.

Every WER here goes through :func:`rtc_agent.words.wer` (numbers, contractions, casual forms, British/American
spellings and compounds folded alike on the reference, the streaming captions and the offline transcript), so
figures from before and after a change of the normaliser are compared by rescoring both files.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rtc_agent.bench.captions_sessions import TARGETS
from rtc_agent.words import scoring_text, scoring_words, wer

__all__ = ["SCORING", "family_rows", "finals_of", "repeated_finals", "rescore", "rescore_file"]

#: What the figures were scored with, recorded in every result (a rescored file says it too).
SCORING = ("rtc_agent.words.scoring: numbers, contractions, casual forms, British/American spellings, compounds "
           "and hesitations folded alike on every side")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def family_rows(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Streaming and offline WER per value of ``key`` (``family`` or ``clip``) and ``overall``: each group's
    references, captions and offline texts joined, and the points of streaming over offline against the target."""
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


def _occurrences(phrase: str, text: str) -> int:
    """How many times the words ``phrase`` occur in the words ``text`` (both scoring text), as whole words."""
    return len(re.findall(rf"(?<!\S){re.escape(phrase)}(?!\S)", text)) if phrase else 0


def _runs(words: list[str], max_n: int = 4) -> list[tuple[tuple[str, ...], int]]:
    """The runs of a phrase (1 to ``max_n`` words) said two or more times in a row in ``words``, with their copies
    (``thanks thanks thanks``: one run of 3); the shortest phrase first, runs do not overlap."""
    runs = []
    i = 0
    while i < len(words):
        for n in range(1, max_n + 1):
            phrase = words[i:i + n]
            copies = 1
            while len(phrase) == n and words[i + copies * n:i + (copies + 1) * n] == phrase:
                copies += 1
            if copies >= 2:
                runs.append((tuple(phrase), copies))
                i += n * copies
                break
        else:
            i += 1
    return runs


def repeated_finals(finals: list[str], reference: str | None) -> int:
    """Repeats in the finals that the reference does not say: (a) sentences of the finals (of any length: a
    third "Thanks." counts as much as a repeated clause), in scoring form, written more often than they occur in
    ``reference`` (at least once allowed: a misheard sentence is an error, not a repeat); (b) within a sentence of a
    final, a phrase of one to four words said more times in a row than the reference ever says it in a row ("Thanks
    Thanks Thanks" where the reference says "thanks" alone; "words words words words" where it says that is no
    repeat). Without a reference, every repeat counts."""
    said = scoring_text(reference) if reference else ""
    said_runs: dict[tuple[str, ...], int] = {}
    for phrase, copies in _runs(said.split()):
        said_runs[phrase] = max(copies, said_runs.get(phrase, 1))
    seen: dict[str, int] = {}
    repeats = 0
    for final in finals:
        for sentence in _SENTENCE_END.split(final.strip()):
            words = scoring_words(sentence)
            for phrase, copies in _runs(words):
                repeats += max(0, copies - said_runs.get(phrase, 1))
            if words:
                seen[" ".join(words)] = seen.get(" ".join(words), 0) + 1
    return repeats + sum(max(0, n - max(1, _occurrences(words, said))) for words, n in seen.items())


def finals_of(run: dict[str, Any], latencies_s: list[float]) -> list[dict[str, Any]]:
    """A session's non-empty finals, each with its audio span and its latency (``latencies_s``: the session's
    score, in the same order), for studying which finals were late or wrong."""
    finals = [e for e, _ in run["events"] if e["type"] == "caption.final" and e["text"].strip()]
    return [{"text": e["text"], "audio_start_ms": e["audio_start_ms"], "audio_end_ms": e["audio_end_ms"],
             "latency_ms": round(1000 * latency, 1)} for e, latency in zip(finals, latencies_s, strict=True)]


def rescore(result: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """A saved ``captions-set`` result scored again: each clip's streaming and offline WER from its texts, the
    families, voices and overall rows, and the finals repeated (for clips that kept their finals). Latencies are
    kept as measured. The result says how it was scored (``scoring``), where it came from (``rescored_from``) and
    keeps the families as first scored (``families_as_measured``). The ``by_sessions`` rows kept no texts: their
    WER stays as measured (``by_sessions_scoring``)."""
    if result.get("benchmark") != "captions-set" or not isinstance(result.get("clips"), list):
        raise ValueError("not a captions-set result (rtc-agent bench captions --set --out FILE)")
    rows = []
    for clip in result["clips"]:
        missing = [k for k in ("reference", "text", "offline_text", "family", "clip") if k not in clip]
        if missing:
            raise ValueError(f"clip {clip.get('clip')!r} lacks {', '.join(missing)}: cannot rescore")
        row = {**clip, "streaming_wer": round(wer(clip["reference"], clip["text"]), 4),
               "offline_wer": round(wer(clip["reference"], clip["offline_text"]), 4)}
        if isinstance(clip.get("finals"), list):
            row["repeated_finals"] = repeated_finals([f["text"] for f in clip["finals"]], clip["reference"])
        rows.append(row)
    out = {**result, "clips": rows, "families": family_rows(rows, "family"), "voices": family_rows(rows, "clip"),
           "scoring": SCORING, "rescored_from": source, "families_as_measured": result.get("families"),
           "scoring_as_measured": result.get("scoring", "rtc_agent.bench.common.normalize_text (before rescoring)")}
    out["repeated_finals"] = sum(r.get("repeated_finals", 0) for r in rows)
    if result.get("by_sessions"):
        out["by_sessions_scoring"] = "as measured (no texts kept)"
    return out


def rescore_file(path: str | Path) -> dict[str, Any]:
    """:func:`rescore` of the JSON file at ``path``."""
    return rescore(json.loads(Path(path).read_text()), source=str(path))
