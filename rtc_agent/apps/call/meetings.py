"""Meetings: the instances of a call room, what join links are bound to, and the transcripts of ended ones.

A room name is reused; each time people meet under it is a *meeting*, with its own id (``mtg_`` + 16 hex digits)
and transcript. A name has at most one *current* meeting, in one of three states:

- *pending*: made by the first join link (``POST /v1/rooms``) while the name had no current meeting; nobody
  joined yet. It ends (silently: no transcript) when its last link, and every client token exchanged from its
  links, has expired.
- *live*: someone is in it. The first participant of a name with no current meeting (no link: API key, page
  sign-in, open mode) makes a new live meeting; everyone who joins the name, with or without a link, joins the
  current one.
- *idle*: the last participant left. It is still the current meeting (anyone who joins the name, a reconnecting
  page included, resumes it with the same transcript) until ``room_rejoin_grace_s`` has passed since then
  **and** every client token exchanged from its links has expired; then it has *ended*.

Every join link is minted for the current meeting of its name (its token scope: ``{room, meeting}``); a link of
a meeting that is no longer current is refused with 410 ``meeting_ended`` when it is exchanged for a client token.
Because a meeting stays current while any client token exchanged from its links lives, such a token (whose session
only names the room) can only ever join its own meeting.

Ended meetings with transcript lines stay readable, by meeting id, for ``room_transcript_ttl_s`` and at most
``room_transcripts_kept`` of them (the oldest go first); then they answer 404 and are freed. Expiry is checked
whenever the book is used (:meth:`MeetingBook.sweep`), with the book's ``clock`` (scripted in tests).

With a state store (:meth:`MeetingBook.attach_store`, the server's ``state_url``), the book writes every change of a
meeting and every transcript record there as well (:mod:`rtc_agent.apps.call.meeting_store`; queued, in order), and
the async entry points read it before the book is used, so that a restarted server, or another one on the same
Redis, goes on with the same meetings: :meth:`MeetingBook.load` (the current meeting of a name, with its
transcript, before a join or a new link), :meth:`MeetingBook.load_link` (the meeting of a join link) and
:meth:`MeetingBook.read_transcript` (the store's transcript of a current or ended meeting). The store is the truth
for transcripts; the book's copies are its cache, used alone when the store fails (logged once, shown in
``/health``). A meeting that was live or idle when its server stopped is idle after the restart, its
``room_rejoin_grace_s`` counted from then: the downtime does not end it, and its pages reconnect to it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from rtc_agent.apps.call.meeting import (
    MAX_GONE_IDS,
    MEETING_ID,
    SESSION_SETUP_MARGIN_S,
    Meeting,
    MeetingEnded,
    check_meeting_id,
    new_meeting_id,
)
from rtc_agent.apps.call.meeting import number as _number
from rtc_agent.apps.call.meeting_store import MeetingStore, StoreDown
from rtc_agent.apps.call.store_journal import StoreJournal
from rtc_agent.apps.call.transcript import MAX_LINES, Transcript
from rtc_agent.errors import NotFound
from rtc_agent.state import StateStore

READ_FLUSH_S = 2.0  # a read of the store waits at most this long for this server's own queued writes

__all__ = ["MEETING_ID", "SESSION_SETUP_MARGIN_S", "Meeting", "MeetingBook", "MeetingEnded", "check_meeting_id",
           "new_meeting_id"]


class MeetingBook:
    """The current meeting of every room name of one server, and the transcripts of ended meetings."""

    def __init__(self, settings: Any, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.current: dict[str, Meeting] = {}
        self.ended: OrderedDict[str, tuple[str, Transcript, float]] = OrderedDict()  # id -> (name, transcript, expiry)
        # ids of the meetings that ended here, until their last link expires: never restored (see restore)
        self.gone: OrderedDict[str, float] = OrderedDict()
        self.persist: MeetingStore | None = None  # the state store's copy (attach_store); None: memory only

    def attach_store(self, store: StateStore) -> MeetingStore:
        """Keep every meeting and transcript in ``store`` too (see the module), written in order by one journal of
        at most ``room_store_queue`` waiting writes; call :meth:`close_store` before the store closes."""
        journal = StoreJournal(int(getattr(self.settings, "room_store_queue", 1000)))
        self.persist = MeetingStore(store, journal, retention_s=self.retention_s, max_lines=self.max_lines)
        return self.persist

    async def close_store(self, timeout: float = 5.0) -> None:
        """Write what is queued for the store (up to ``timeout`` seconds) and stop writing."""
        if self.persist is not None:
            await self.persist.journal.close(timeout)

    @property
    def grace_s(self) -> float:
        return float(self.settings.room_rejoin_grace_s)

    @property
    def ttl_s(self) -> float:
        return float(self.settings.room_transcript_ttl_s)

    @property
    def kept(self) -> int:
        return int(self.settings.room_transcripts_kept)

    @property
    def max_lines(self) -> int:
        return int(getattr(self.settings, "room_transcript_max_lines", MAX_LINES))

    @property
    def retention_s(self) -> float:
        """How long the store keeps a meeting's transcript log after its last record (an ended meeting's
        ``room_transcript_ttl_s``, at least the rejoin grace of an idle one)."""
        return max(self.ttl_s, self.grace_s + SESSION_SETUP_MARGIN_S, 60.0)

    def _new(self, meeting_id: str, name: str, transcript: Transcript | None = None, **fields: Any) -> Meeting:
        """A meeting whose transcript (``transcript``, else a new one) journals into the store, if any."""
        if transcript is None:
            transcript = Transcript(name, meeting_id, max_lines=self.max_lines)
        if self.persist is not None:
            persist = self.persist
            transcript.journal = lambda record: persist.log(meeting_id, record)
        return Meeting(id=meeting_id, name=name, transcript=transcript, **fields)

    def _save(self, meeting: Meeting) -> None:
        """The store's directory entry of ``meeting`` as it is now."""
        if self.persist is None:
            return
        until = max(meeting.links_until, meeting.tokens_until, meeting.emptied_at or 0.0, self.clock())
        self.persist.save_current(meeting.record(), until - self.clock() + self.grace_s + self.retention_s)

    # --- lifecycle --------------------------------------------------------------------------------------

    def _over(self, meeting: Meeting, now: float) -> bool:
        if not meeting.joined:
            return now >= max(meeting.links_until, meeting.tokens_until)
        if meeting.emptied_at is None or (meeting.room is not None and meeting.room.participants):
            return False
        return now >= max(meeting.emptied_at + self.grace_s, meeting.tokens_until)

    def sweep(self) -> None:
        """End the current meetings that are over; free the ended transcripts past their TTL."""
        now = self.clock()
        for meeting in [m for m in self.current.values() if self._over(m, now)]:
            self._end(meeting, now)
        for meeting_id in [k for k, (_, _, expiry) in self.ended.items() if expiry <= now]:
            del self.ended[meeting_id]
        for meeting_id in [k for k, until in self.gone.items() if until <= now]:
            del self.gone[meeting_id]

    def _end(self, meeting: Meeting, now: float) -> None:
        """``meeting`` has ended. One that people joined on another server only (adopted from the store, never
        hosted here) ends here alone: its links are not refused here, and the store records its end only if no
        server holds it live (its directory entry is idle); the server that hosts it decides."""
        if self.current.get(meeting.name) is meeting:
            del self.current[meeting.name]
        hosted = meeting.room is not None or not meeting.joined
        if meeting.links_until > now and hosted:
            self.gone[meeting.id] = meeting.links_until
            while len(self.gone) > MAX_GONE_IDS:
                self.gone.popitem(last=False)
        transcript = meeting.transcript
        listed = meeting.joined and bool(transcript.lines) and self.kept > 0 and self.ttl_s > 0
        if self.persist is not None:
            self.persist.save_ended(meeting.id, meeting.name, now, now + self.ttl_s, meeting.links_until,
                                    listed=listed, kept=self.kept, unless_live=not hosted)
        if not listed or not hosted:
            return
        if transcript.ended_at is None:
            transcript.mark_ended(now)
        self.ended[meeting.id] = (meeting.name, transcript, now + self.ttl_s)
        while len(self.ended) > self.kept:
            self.ended.popitem(last=False)

    def get(self, name: str) -> Meeting | None:
        """The current meeting of ``name`` (pending, live or idle), if any."""
        self.sweep()
        return self.current.get(name)

    def find(self, meeting_id: str) -> Meeting | None:
        """The meeting with this id if it is the current meeting of its name (how a join token, which names its
    meeting, finds it)."""
        self.sweep()
        return next((m for m in self.current.values() if m.id == meeting_id), None)

    def restore(self, meeting_id: str, name: str, links_until: float,
                transcript: Transcript | None = None) -> Meeting | None:
        """The meeting of a join link that this book has never seen (one minted before the server restarted,
        kept by the state store) made current again, pending, under its own id (with ``transcript``, what the
        store kept of it); None when ``name`` already has another current meeting or that meeting ended here (its
        links stay refused)."""
        if not MEETING_ID.match(meeting_id) or meeting_id in self.gone or meeting_id in self.ended:
            return None
        if self.get(name) is not None:
            return None
        meeting = self.current[name] = self._new(meeting_id, name, transcript, links_until=links_until,
                                                 joined=transcript is not None and bool(transcript.lines))
        if meeting.joined:
            meeting.emptied_at = self.clock()
        self._save(meeting)
        return meeting

    def _current_or_new(self, name: str) -> Meeting:
        meeting = self.get(name)
        if meeting is None:
            meeting = self.current[name] = self._new(new_meeting_id(), name)
            self._save(meeting)
        return meeting

    def for_link(self, name: str) -> Meeting:
        """The meeting a new join link of ``name`` is bound to (made pending if the name has none); call
        :meth:`linked` with the link's lifetime once it is minted."""
        return self._current_or_new(name)

    def linked(self, meeting: Meeting, ttl_s: float) -> None:
        """A join link of ``meeting`` valid for ``ttl_s`` more seconds was minted."""
        meeting.links_until = max(meeting.links_until, self.clock() + ttl_s)
        self._save(meeting)

    def bound(self, name: str, meeting_id: Any) -> Meeting:
        """The meeting a join link of ``name`` bound to ``meeting_id`` admits to: 410 once it is not current."""
        meeting = self.get(name)
        if meeting is None or meeting.id != meeting_id:
            raise MeetingEnded(f"the meeting of this join link (room {name!r}) has ended; ask for a new link")
        return meeting

    def exchanged(self, meeting: Meeting, ttl_s: float) -> None:
        """A client token that may join ``meeting`` for ``ttl_s`` more seconds is minted from one of its links:
        the meeting stays current until then (and :data:`SESSION_SETUP_MARGIN_S` more)."""
        meeting.tokens_until = max(meeting.tokens_until, self.clock() + ttl_s + SESSION_SETUP_MARGIN_S)
        self._save(meeting)

    def for_join(self, name: str) -> Meeting:
        """The meeting a participant joining ``name`` enters: the current one, else a new one."""
        meeting = self._current_or_new(name)
        changed = meeting.emptied_at is not None or not meeting.joined
        meeting.emptied_at = None
        meeting.joined = True
        if meeting.transcript.ended_at is not None:
            meeting.transcript.mark_ended(None)
        if changed:
            self._save(meeting)
        return meeting

    def emptied(self, meeting: Meeting) -> None:
        """The last participant of ``meeting`` left: it is idle from now."""
        meeting.emptied_at = self.clock()
        meeting.transcript.mark_ended(meeting.transcript.ended_at or time.time())
        self._save(meeting)

    # --- transcripts ------------------------------------------------------------------------------------

    def transcript(self, name: str, meeting_id: str | None = None) -> Transcript:
        """The transcript of meeting ``meeting_id`` of ``name`` (current or ended), or without an id the current
        meeting's (once someone joined), else the latest ended one's; 404 when there is none (or it expired)."""
        self.sweep()
        meeting = self.current.get(name)
        if meeting is not None and meeting.joined and meeting_id in (None, meeting.id):
            return meeting.transcript
        if meeting_id is not None:
            entry = self.ended.get(meeting_id)
            if entry is None or entry[0] != name:
                raise NotFound(f"no meeting {meeting_id!r} of room {name!r} (live or recently ended)",
                               code="meeting_not_found")
            return entry[1]
        for ended_name, transcript, _ in reversed(self.ended.values()):
            if ended_name == name:
                return transcript
        raise NotFound(f"no room {name!r} (live or recently ended)", code="room_not_found")


    # --- the state store (see the module) ---------------------------------------------------------------

    def _adopt(self, record: dict[str, Any], transcript: Transcript | None) -> Meeting | None:
        """The stored current meeting ``record`` made current here (idle if it had been joined, its rejoin grace
        counted from now: the time no server held it, a restart, does not end it), unless this book has a current
        meeting of that name or the meeting ended here."""
        meeting_id, name = record["id"], record["name"]
        if not MEETING_ID.match(meeting_id) or meeting_id in self.gone or meeting_id in self.ended:
            return None
        if self.get(name) is not None:
            return None
        if transcript is None:
            transcript = Transcript(name, meeting_id, max_lines=self.max_lines,
                                    created_at=_number(record.get("created_at")))
        joined = bool(record.get("joined"))
        emptied = _number(record.get("emptied_at"))
        meeting = self._new(meeting_id, name, transcript, links_until=_number(record.get("links_until")) or 0.0,
                            tokens_until=_number(record.get("tokens_until")) or 0.0, joined=joined,
                            emptied_at=max(emptied or 0.0, self.clock()) if joined else None)
        self.current[name] = meeting
        self.sweep()  # over already (its grace passed while no server held it): ended now
        return self.current.get(name)

    async def load(self, name: str) -> Meeting | None:
        """The current meeting of ``name`` as the state store knows it: this book's while people are in its room
        here; else the one the store names, made current here or, when it is this book's own meeting (another
        server hosted it meanwhile, or this one kept it idle), brought up to date with the store's transcript
        (unless the store holds fewer lines: a write failed). None when there is none; this book's meeting when
        the store cannot be read."""
        meeting = self.get(name)
        if self.persist is None or (meeting is not None and meeting.room is not None and meeting.room.participants):
            return meeting
        try:
            await self.persist.flush(READ_FLUSH_S)
            record = await self.persist.current(name)
            joined = record is not None and bool(record.get("joined"))
            transcript = await self.persist.transcript(name, record["id"]) if joined else None
        except StoreDown:
            return self.get(name)
        meeting = self.get(name)
        if record is None or (meeting is not None and meeting.room is not None and meeting.room.participants):
            return meeting
        if meeting is None:
            return self._adopt(record, transcript)
        if meeting.id == record["id"]:  # another id: this book's meeting stays (the room lease decides the host)
            self._refresh(meeting, record, transcript)
        return meeting

    def _refresh(self, meeting: Meeting, record: dict[str, Any], transcript: Transcript | None) -> None:
        """``meeting`` brought up to date with its stored ``record`` and ``transcript`` (see :meth:`load`)."""
        meeting.links_until = max(meeting.links_until, _number(record.get("links_until")) or 0.0)
        meeting.tokens_until = max(meeting.tokens_until, _number(record.get("tokens_until")) or 0.0)
        if record.get("joined") and not meeting.joined:
            meeting.joined = True
            meeting.emptied_at = _number(record.get("emptied_at")) or self.clock()
        if transcript is not None and len(transcript.lines) >= len(meeting.transcript.lines):
            meeting.transcript = self._new(meeting.id, meeting.name, transcript).transcript  # journaled
            if meeting.room is not None:
                meeting.room.transcript = meeting.transcript

    async def load_link(self, meeting_id: str, name: str, links_until: float) -> Meeting | None:
        """The current meeting a join link of ``name`` bound to ``meeting_id`` admits to: found here, in the store's
        directory, or (a link minted before a restart whose meeting nobody joined) restored under its own id;
        None when that meeting ended (here or on a server sharing the store) or ``name`` has another."""
        meeting = self.find(meeting_id)
        if meeting is not None or self.persist is None:
            return meeting if meeting is not None else self.restore(meeting_id, name, links_until)
        await self.load(name)
        meeting = self.find(meeting_id)
        if meeting is not None:
            return meeting
        try:
            if await self.persist.ended(meeting_id) is not None:
                self.gone[meeting_id] = links_until
                return None
            transcript = await self.persist.transcript(name, meeting_id)
        except StoreDown:
            transcript = None
        return self.restore(meeting_id, name, links_until, transcript)

    async def read_transcript(self, name: str, meeting_id: str | None = None) -> Transcript:
        """What :meth:`transcript` answers, read from the state store (this server's queued writes first): the
        current meeting's (once someone joined) or an ended one's within ``room_transcript_ttl_s`` and the
        ``room_transcripts_kept`` newest; this book's copy when the store cannot be read; 404 otherwise."""
        if self.persist is None:
            return self.transcript(name, meeting_id)
        meeting = await self.load(name)
        await self.persist.flush(READ_FLUSH_S)
        try:
            if meeting is not None and meeting.joined and meeting_id in (None, meeting.id):
                stored = await self.persist.transcript(name, meeting.id)
                # the store's, unless it holds fewer lines than this book (a write of this server failed)
                if stored is not None and len(stored.lines) >= len(meeting.transcript.lines):
                    return stored
                return meeting.transcript
            listed = await self.persist.listed(name, self.clock())
            target = meeting_id if meeting_id is not None else (listed[0] if listed else None)
            stored = await self.persist.transcript(name, target) if target in listed else None
        except StoreDown:
            return self.transcript(name, meeting_id)
        if stored is not None:
            return stored
        if meeting_id is not None:
            raise NotFound(f"no meeting {meeting_id!r} of room {name!r} (live or recently ended)",
                           code="meeting_not_found")
        raise NotFound(f"no room {name!r} (live or recently ended)", code="room_not_found")

