"""Caption files: WebVTT and SubRip from final captions (times on the session clock)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Cue(Protocol):
    text: str
    start_ms: int
    end_ms: int


def _stamp(ms: int, sep: str) -> str:
    ms = max(0, int(ms))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, frac = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{frac:03d}"


def _clean(text: str) -> str:
    # A blank line or "-->" inside a cue would end or corrupt it.
    return " ".join(text.replace("-->", "->").split())


def to_vtt(cues: Iterable[Cue]) -> str:
    lines = ["WEBVTT", ""]
    for i, cue in enumerate(cues, 1):
        end = max(cue.end_ms, cue.start_ms + 1)
        lines += [str(i), f"{_stamp(cue.start_ms, '.')} --> {_stamp(end, '.')}", _clean(cue.text), ""]
    return "\n".join(lines)


def to_srt(cues: Iterable[Cue]) -> str:
    lines: list[str] = []
    for i, cue in enumerate(cues, 1):
        end = max(cue.end_ms, cue.start_ms + 1)
        lines += [str(i), f"{_stamp(cue.start_ms, ',')} --> {_stamp(end, ',')}", _clean(cue.text), ""]
    return "\n".join(lines)
