"""Caption files: WebVTT and SubRip from final captions (times on the session clock). :func:`stamp` and
:func:`timing` also time the call rooms' transcripts (:mod:`rtc_agent.apps.call.transcript_vtt`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Cue(Protocol):
    text: str
    start_ms: int
    end_ms: int


def stamp(ms: int, sep: str = ".") -> str:
    """Milliseconds as a cue timestamp ``hh:mm:ss.mmm`` (WebVTT; ``sep=","``: SubRip's); negative times are 0."""
    ms = max(0, int(ms))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, frac = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{frac:03d}"


def timing(start_ms: int, end_ms: int, sep: str = ".") -> str:
    """A cue's timing line ``start --> end``; the cue lasts at least 1 ms."""
    return f"{stamp(start_ms, sep)} --> {stamp(max(end_ms, start_ms + 1), sep)}"


def _clean(text: str) -> str:
    # A blank line or "-->" inside a cue would end or corrupt it.
    return " ".join(text.replace("-->", "->").split())


def to_vtt(cues: Iterable[Cue]) -> str:
    lines = ["WEBVTT", ""]
    for i, cue in enumerate(cues, 1):
        lines += [str(i), timing(cue.start_ms, cue.end_ms), _clean(cue.text), ""]
    return "\n".join(lines)


def to_srt(cues: Iterable[Cue]) -> str:
    lines: list[str] = []
    for i, cue in enumerate(cues, 1):
        lines += [str(i), timing(cue.start_ms, cue.end_ms, ","), _clean(cue.text), ""]
    return "\n".join(lines)
