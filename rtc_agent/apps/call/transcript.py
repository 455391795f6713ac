"""A room's speaker-labelled transcript: final captions with names, room-clock times and translations.

Times are ms since the room was created (``start_ms``/``end_ms``), so every speaker's lines share one clock;
``at`` is the wall-clock time (Unix seconds) of the line's start.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any


def _stamp(ms: int) -> str:
    ms = max(0, int(ms))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, frac = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}.{frac:03d}"

MAX_LINES = 5000  # a room's transcript keeps at most this many lines (the oldest go first)


@dataclass
class TranscriptLine:
    segment_id: str
    participant_id: str
    name: str
    language: str | None
    text: str
    start_ms: int
    end_ms: int
    at: float
    translations: dict[str, str] = field(default_factory=dict)


def _clean(text: str) -> str:
    """One line of cue text: WebVTT escapes (so ``-->`` and tags in speech cannot break the file)."""
    return " ".join(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").split())


class Transcript:
    """The transcript of one meeting (``meeting_id``) of ``room``."""

    def __init__(self, room: str, meeting_id: str = "") -> None:
        self.room = room
        self.meeting_id = meeting_id
        self.created_at = time.time()
        self.ended_at: float | None = None
        self.lines: list[TranscriptLine] = []
        self.participants: dict[str, dict[str, Any]] = {}  # everyone who was in the room

    def add(self, line: TranscriptLine) -> None:
        self.lines.append(line)
        if len(self.lines) > MAX_LINES:
            del self.lines[: len(self.lines) - MAX_LINES]

    def add_translation(self, participant_id: str, segment_id: str, language: str, text: str) -> None:
        for line in reversed(self.lines[-50:]):
            if line.participant_id == participant_id and line.segment_id == segment_id:
                joined = (line.translations.get(language, "") + " " + text).strip()
                line.translations[language] = joined
                return

    def to_vtt(self) -> str:
        out = ["WEBVTT", f"NOTE room {_clean(self.room)}", ""]
        for i, line in enumerate(sorted(self.lines, key=lambda x: x.start_ms), 1):
            end = max(line.end_ms, line.start_ms + 1)
            out += [str(i), f"{_stamp(line.start_ms)} --> {_stamp(end)}",
                    f"<v {_clean(line.name)}>{_clean(line.text)}", ""]
        return "\n".join(out)

    def to_json(self) -> dict[str, Any]:
        return {"room": self.room, "meeting_id": self.meeting_id, "created_at": self.created_at,
                "ended_at": self.ended_at,
                "participants": list(self.participants.values()),
                "lines": [asdict(line) for line in sorted(self.lines, key=lambda x: x.start_ms)]}
