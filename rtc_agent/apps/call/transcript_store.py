"""``TranscriptStore``: the transcripts of call meetings in the state store, keyed by meeting id.

A meeting's transcript is one bounded list in the store (``transcript:<meeting id>``) of JSON records, appended as
things happen (the records of :mod:`rtc_agent.apps.call.transcript`: ``opened``, ``line``, ``translation``,
``participant``, ``ended``). Reading the list back and folding it (:meth:`TranscriptStore.load`) gives the same
:class:`~rtc_agent.apps.call.transcript.Transcript` on any server that shares the store, or on this one after a
restart (SQLite).

Limits: the list holds at most ``state_max_list_items`` records (the store's own limit; an append past it raises
:class:`~rtc_agent.state.StateLimitError`) and each record at most ``state_max_value_bytes``; a transcript keeps at
most ``room_transcript_max_lines`` lines (the :class:`Transcript` stops journaling lines past it). The list lives
``ttl_s`` seconds after its last append (each append renews it; the ``ended`` record of a meeting that emptied
starts its retention, ``room_transcript_ttl_s``).

The API takes one meeting id per call and never blocks the event loop (the store's own pattern: SQLite runs on its
thread, Redis is async):

- :meth:`append` (one record), :meth:`append_line` and :meth:`append_translation` (typed helpers);
- :meth:`records` (the raw records, oldest first) and :meth:`load` (the folded transcript, None when nothing was
  stored).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any

from rtc_agent.apps.call.transcript import MAX_LINES, Transcript, TranscriptLine
from rtc_agent.state import StateStore

log = logging.getLogger(__name__)

KEY_PREFIX = "transcript:"


def transcript_key(meeting_id: str) -> str:
    """The store key of meeting ``meeting_id``'s transcript log."""
    return KEY_PREFIX + meeting_id


class TranscriptStore:
    """Meeting transcripts in ``store`` (see the module). ``ttl_s``: how long a log lives after its last append;
    ``max_lines``: lines a loaded transcript keeps."""

    def __init__(self, store: StateStore, *, ttl_s: float, max_lines: int = MAX_LINES) -> None:
        if not ttl_s > 0:
            raise ValueError("a transcript's time to live must be > 0 seconds")
        self.store = store
        self.ttl_s = float(ttl_s)
        self.max_lines = int(max_lines)

    async def append(self, meeting_id: str, record: dict[str, Any], ttl_s: float | None = None) -> int:
        """Append one record to ``meeting_id``'s log, which then lives ``ttl_s`` (default: the store's ``ttl_s``)
        more seconds; the log's length now. Raises the store's errors (``StateLimitError`` when full)."""
        if not isinstance(record.get("kind"), str):
            raise ValueError("a transcript record needs a 'kind'")
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        return await self.store.append(transcript_key(meeting_id), text, ttl_s or self.ttl_s)

    async def append_line(self, meeting_id: str, line: TranscriptLine) -> int:
        """Append one final caption line (its translations go separately, :meth:`append_translation`)."""
        fields = asdict(line)
        fields.pop("translations")
        return await self.append(meeting_id, {"kind": "line", **fields})

    async def append_translation(self, meeting_id: str, participant_id: str, segment_id: str, language: str,
                                 text: str) -> int:
        """Append text of the translation into ``language`` of ``participant_id``'s line ``segment_id``."""
        return await self.append(meeting_id, {"kind": "translation", "participant_id": participant_id,
                                              "segment_id": segment_id, "language": language, "text": text})

    async def records(self, meeting_id: str) -> list[dict[str, Any]]:
        """The live log of ``meeting_id``, oldest first (records that are not JSON objects are skipped)."""
        out = []
        for item in await self.store.items(transcript_key(meeting_id)):
            try:
                record = json.loads(item)
            except ValueError:
                log.warning("transcript of %s: a stored record is not JSON; skipped", meeting_id)
                continue
            if isinstance(record, dict):
                out.append(record)
        return out

    async def load(self, room: str, meeting_id: str) -> Transcript | None:
        """The transcript of ``meeting_id`` (of room ``room``) as stored, None when its log is empty or expired."""
        records = await self.records(meeting_id)
        if not records:
            return None
        return Transcript.from_records(room, meeting_id, records, max_lines=self.max_lines)
