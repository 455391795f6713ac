"""``MeetingStore``: the meeting directory and ended meetings in the state store, with their transcripts.

What :class:`~rtc_agent.apps.call.meetings.MeetingBook` keeps in memory, kept in the store as well, so that after
a restart (SQLite) or on another server sharing a Redis the same meetings go on:

- ``meeting:room:<name>``: the room name's *current* meeting (JSON: ``id``, ``name``, ``joined``, ``links_until``,
  ``tokens_until``, ``emptied_at``, ``created_at``; times on the book's clock, Unix seconds);
- ``meeting:ended:<id>``: a meeting that ended (``id``, ``name``, ``ended_at``, ``expires_at``): its links stay
  refused (410) and, when it has lines, its transcript readable until ``expires_at``;
- ``meeting:ended``: the ended meetings whose transcripts are readable, newest last, at most
  ``room_transcripts_kept`` (``[id, name, expires_at]`` each; read, changed and written back under the lease
  ``meeting:ended:lock``, so servers sharing a Redis that end meetings in the same instant each add theirs);
- ``transcript:<id>``: the transcript log (:mod:`rtc_agent.apps.call.transcript_store`).

Writes go through the book's :class:`~rtc_agent.apps.call.store_journal.StoreJournal` (ordered, off the caller's
path; a failure is logged once and shown in ``/health``). Reads are awaited by the async routes before the book
is used; a read that fails raises :class:`StoreDown`, and the caller goes on with what it has in memory. Every
expiry decision is the book's (on its clock); the store's own times to live (the same spans plus a margin) only
free the space.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

from rtc_agent.apps.call.store_journal import StoreJournal
from rtc_agent.apps.call.transcript import Transcript
from rtc_agent.apps.call.transcript_store import TranscriptStore
from rtc_agent.state import StateStore

T = TypeVar("T")
DIRECTORY = "meeting:room:"
ENDED = "meeting:ended:"
ENDED_INDEX = "meeting:ended"
INDEX_LOCK = "meeting:ended:lock"
TTL_MARGIN_S = 3600.0  # the store keeps an entry this much longer than the book needs it (clock skew, sweeps)
LOCK_TTL_S = 10.0  # a server that dies holding the index lease holds it this long at most
LOCK_WAIT_S = 15.0  # the longest an index update waits for another server's (then it fails, and is logged)


class StoreDown(Exception):
    """A read of the state store failed (already counted and logged by the journal)."""


class MeetingStore:
    """Meetings and transcripts of one server's :class:`MeetingBook` in ``store`` (see the module)."""

    def __init__(self, store: StateStore, journal: StoreJournal, *, retention_s: float, max_lines: int) -> None:
        self.store = store
        self.journal = journal
        self.owner = f"meetings-{uuid.uuid4().hex}"  # this server's name on the index lease
        self.transcripts = TranscriptStore(store, ttl_s=retention_s + TTL_MARGIN_S, max_lines=max_lines)

    # --- writes (queued) -------------------------------------------------------------------------------------

    def save_current(self, record: dict[str, Any], ttl_s: float) -> None:
        """``record`` is now the current meeting of its name, for ``ttl_s`` seconds at least."""
        key, text = DIRECTORY + record["name"], json.dumps(record)
        self.journal.submit("meeting directory", lambda: self.store.put(key, text, ttl_s + TTL_MARGIN_S))

    def log(self, meeting_id: str, record: dict[str, Any]) -> None:
        """Append ``record`` to ``meeting_id``'s transcript log."""
        self.journal.submit("transcript", lambda: self.transcripts.append(meeting_id, record))

    def save_ended(self, meeting_id: str, name: str, ended_at: float, until: float, refused_until: float, *,
                   listed: bool, kept: int, unless_live: bool = False) -> None:
        """Meeting ``meeting_id`` of ``name`` ended at ``ended_at``: its transcript readable until ``until`` when
        ``listed`` (among the ``kept`` newest), its links refused until ``refused_until`` (the later of the two
        is how long it is remembered); the name's directory entry goes if it still names it. ``unless_live``:
        nothing is written when the directory says the meeting is live (on another server)."""
        record = json.dumps({"id": meeting_id, "name": name, "ended_at": ended_at, "expires_at": until})
        ttl = max(1.0, until - ended_at, refused_until - ended_at) + TTL_MARGIN_S

        async def write() -> None:
            current = _loads(await self.store.get(DIRECTORY + name))
            ours = current.get("id") == meeting_id
            if unless_live and ours and current.get("joined") and current.get("emptied_at") is None:
                return
            await self.store.put(ENDED + meeting_id, record, ttl)
            if ours:
                await self.store.delete(DIRECTORY + name)
            if listed and kept > 0:
                await self._add_to_index([meeting_id, name, until], ended_at, kept)

        self.journal.submit("ended meeting", write)

    async def _add_to_index(self, entry: list[Any], now: float, kept: int) -> None:
        """Add ``entry`` (``[id, name, expires_at]``) to the ended meetings' index, keeping the ``kept`` newest
        that have not expired at ``now``: read, changed and written while holding the index lease."""
        deadline = time.monotonic() + LOCK_WAIT_S
        while (wait := await self.store.acquire(INDEX_LOCK, self.owner, LOCK_TTL_S)) > 0:
            if time.monotonic() + min(wait, 0.05) > deadline:
                raise TimeoutError(f"the ended meetings' index stayed locked for {LOCK_WAIT_S:.0f} s")
            await asyncio.sleep(min(wait, 0.05))
        try:
            index = [e for e in await self._index() if e[0] != entry[0] and e[2] > now]
            index = [*index, entry][-kept:]
            await self.store.put(ENDED_INDEX, json.dumps(index), max(e[2] for e in index) - now + TTL_MARGIN_S)
        finally:
            await self.store.release(INDEX_LOCK, self.owner)

    # --- reads -----------------------------------------------------------------------------------------------

    async def _read(self, label: str, read: Awaitable[T]) -> T:
        try:
            return await read
        except Exception as exc:
            self.journal.failure(label, exc)
            raise StoreDown(label) from exc

    async def _index(self) -> list[list[Any]]:
        raw = await self.store.get(ENDED_INDEX)
        entries = _loads(raw, [])
        return [e for e in entries if isinstance(e, list) and len(e) == 3 and isinstance(e[2], int | float)]

    async def flush(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until this server's queued writes are in the store."""
        return await self.journal.flush(timeout)

    async def current(self, name: str) -> dict[str, Any] | None:
        """The stored current meeting of ``name``, or None."""
        raw = await self._read("meeting directory read", self.store.get(DIRECTORY + name))
        record = _loads(raw)
        return record if isinstance(record.get("id"), str) and record.get("name") == name else None

    async def ended(self, meeting_id: str) -> dict[str, Any] | None:
        """The stored record of ``meeting_id`` if it ended, or None."""
        record = _loads(await self._read("ended meeting read", self.store.get(ENDED + meeting_id)))
        return record if record.get("id") == meeting_id else None

    async def listed(self, name: str, now: float) -> list[str]:
        """The ids of ``name``'s ended meetings whose transcripts are readable at ``now``, newest first."""
        index = await self._read("ended meetings read", self._index())
        return [e[0] for e in reversed(index) if e[1] == name and e[2] > now]

    async def transcript(self, name: str, meeting_id: str) -> Transcript | None:
        """The stored transcript of ``meeting_id``, None when nothing was stored."""
        return await self._read("transcript read", self.transcripts.load(name, meeting_id))


def _loads(raw: str | None, default: Any = None) -> Any:
    """``raw`` parsed as JSON (``default``, or an empty dict, when it is None or not JSON of that type)."""
    empty = {} if default is None else default
    if raw is None:
        return empty
    try:
        value = json.loads(raw)
    except ValueError:
        return empty
    return value if isinstance(value, type(empty)) else empty
