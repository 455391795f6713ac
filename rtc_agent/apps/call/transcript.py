"""A room's speaker-labelled transcript: final captions with names, room-clock times and translations.

Times are ms since the room was created (``start_ms``/``end_ms``), so every speaker's lines share one clock;
``at`` is the wall-clock time (Unix seconds) of the line's start.

A transcript keeps its first ``max_lines`` lines (``room_transcript_max_lines``); later ones are counted
(``lines_dropped``), not kept. Every change is also handed, as one record (a JSON-able dict), to its ``journal``
when it has one: the meeting's log in the state store (:mod:`rtc_agent.apps.call.transcript_store`), from which
:meth:`Transcript.from_records` rebuilds the same transcript after a restart or on another server. The records:

- ``{"kind": "opened", "room", "meeting_id", "created_at"}``: first, before any other (the room clock's origin);
- ``{"kind": "line", <the TranscriptLine fields but translations>}``;
- ``{"kind": "translation", "participant_id", "segment_id", "language", "text"}``: text joined to that line's
  translation into ``language``;
- ``{"kind": "participant", "participant_id", ...}``: that participant's entry as it is now (joined, renamed, left);
- ``{"kind": "ended", "at"}``: the meeting emptied at ``at`` (Unix seconds), or resumed (``at`` null).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from rtc_agent.apps.call.transcript_vtt import render_vtt

MAX_LINES = 5000  # lines a transcript keeps by default (room_transcript_max_lines); later ones are dropped
TRANSLATION_WINDOW = 50  # a translation is joined to one of the last this many lines (its segment's)

#: Where a transcript hands each change (see the module docstring).
Journal = Callable[[dict[str, Any]], None]


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


class Transcript:
    """The transcript of one meeting (``meeting_id``) of ``room``."""

    def __init__(self, room: str, meeting_id: str = "", *, max_lines: int = MAX_LINES,
                 journal: Journal | None = None, created_at: float | None = None) -> None:
        self.room = room
        self.meeting_id = meeting_id
        self.created_at = time.time() if created_at is None else created_at
        self.ended_at: float | None = None
        self.lines: list[TranscriptLine] = []
        self.lines_dropped = 0
        self.max_lines = max(1, int(max_lines))
        self.participants: dict[str, dict[str, Any]] = {}  # everyone who was in the room
        self.journal = journal
        self._opened = False  # the "opened" record went to the journal

    def _record(self, record: dict[str, Any]) -> None:
        if self.journal is None:
            return
        if not self._opened:
            self._opened = True
            self.journal({"kind": "opened", "room": self.room, "meeting_id": self.meeting_id,
                          "created_at": self.created_at})
        self.journal(record)

    def add(self, line: TranscriptLine) -> bool:
        """Keep ``line`` (False, counted in ``lines_dropped``, once ``max_lines`` are kept)."""
        if len(self.lines) >= self.max_lines:
            self.lines_dropped += 1
            return False
        self.lines.append(line)
        fields = asdict(line)
        fields.pop("translations")
        self._record({"kind": "line", **fields})
        return True

    def add_translation(self, participant_id: str, segment_id: str, language: str, text: str) -> bool:
        """Join ``text`` to the translation into ``language`` of the speaker's line ``segment_id`` (one of the last
        :data:`TRANSLATION_WINDOW` lines); False when there is no such line."""
        if not self._join_translation(participant_id, segment_id, language, text):
            return False
        self._record({"kind": "translation", "participant_id": participant_id, "segment_id": segment_id,
                      "language": language, "text": text})
        return True

    def _join_translation(self, participant_id: str, segment_id: str, language: str, text: str) -> bool:
        for line in reversed(self.lines[-TRANSLATION_WINDOW:]):
            if line.participant_id == participant_id and line.segment_id == segment_id:
                line.translations[language] = (line.translations.get(language, "") + " " + text).strip()
                return True
        return False

    def note_participant(self, participant_id: str, **info: Any) -> None:
        """Add ``participant_id`` to the people of this meeting, or update its entry with ``info`` (``name``,
        ``language``, ``joined_at``, ``left_at``)."""
        entry = self.participants.setdefault(participant_id, {"participant_id": participant_id})
        entry.update(info)
        self._record({"kind": "participant", **entry})

    def mark_ended(self, at: float | None) -> None:
        """The meeting emptied at ``at`` (Unix seconds), or resumed (``None``)."""
        self.ended_at = at
        self._record({"kind": "ended", "at": at})

    @classmethod
    def from_records(cls, room: str, meeting_id: str, records: Iterable[dict[str, Any]], *,
                     max_lines: int = MAX_LINES) -> Transcript:
        """The transcript a journal's ``records`` describe (see the module; unknown kinds and malformed records
        are skipped), with no journal of its own yet."""
        out = cls(room, meeting_id, max_lines=max_lines)
        out._opened = True  # its "opened" record is already in the log
        names = {f.name for f in dataclasses.fields(TranscriptLine)} - {"translations"}
        for record in records:
            kind = record.get("kind")
            try:
                if kind == "opened":
                    out.created_at = float(record["created_at"])
                elif kind == "line":
                    line = TranscriptLine(**{k: record[k] for k in names})
                    if len(out.lines) < out.max_lines:
                        out.lines.append(line)
                    else:
                        out.lines_dropped += 1
                elif kind == "translation":
                    out._join_translation(str(record["participant_id"]), str(record["segment_id"]),
                                          str(record["language"]), str(record["text"]))
                elif kind == "participant":
                    out.participants[str(record["participant_id"])] = {k: v for k, v in record.items()
                                                                       if k != "kind"}
                elif kind == "ended":
                    out.ended_at = record.get("at")
            except (KeyError, TypeError, ValueError):
                continue
        return out

    def to_vtt(self, language: str | None = None) -> str:
        """WebVTT: each line's translations as extra cue lines, or with ``language`` one language only
        (:mod:`~rtc_agent.apps.call.transcript_vtt`)."""
        return render_vtt(self.room, self.lines, language)

    def to_json(self) -> dict[str, Any]:
        return {"room": self.room, "meeting_id": self.meeting_id, "created_at": self.created_at,
                "ended_at": self.ended_at, "lines_dropped": self.lines_dropped,
                "participants": list(self.participants.values()),
                "lines": [asdict(line) for line in sorted(self.lines, key=lambda x: x.start_ms)]}
