"""Meetings and transcripts in the state store (issue 24, item 1-2), on every backend: memory, SQLite and a real
Redis server (the fixture of tests/test_state_store.py).

A "restart" here is a second :class:`RoomRegistry` on the same store (a new server's book: it never saw the
meetings of the first): it re-opens the same meeting with its whole transcript, the late joiner's replay included;
ended meetings stay readable within ``room_transcript_ttl_s`` and ``room_transcripts_kept`` and their links stay
refused; a store that fails never stops the call (the book's copy answers, ``stats`` says so); the write queue is
bounded."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rtc_agent.apps.call.room_registry import RoomRegistry
from rtc_agent.apps.call.store_journal import StoreJournal
from rtc_agent.apps.call.transcript import Transcript, TranscriptLine
from rtc_agent.apps.call.transcript_store import TranscriptStore
from rtc_agent.config import Settings
from rtc_agent.errors import AgentError
from rtc_agent.protocol.events import CaptionFinal, CaptionTranslation
from rtc_agent.state import Limits, MemoryStore, StateLimitError, StateStore, StateUnavailable
from tests.test_rooms import person
from tests.test_state_store import (
    BACKENDS,
    open_backend,
    redis_url,  # noqa: F401  (the Redis server fixture)
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    made = await open_backend(request, tmp_path, Limits(max_list_items=200))
    yield made
    await made.close()


@pytest.fixture
def settings() -> Settings:
    return dataclasses.replace(Settings(), max_room_participants=4, room_transcripts_kept=2,
                               room_transcript_ttl_s=3600, room_transcript_max_lines=6)


def server(settings: Settings, store: StateStore, clock: Clock) -> RoomRegistry:
    """One server's rooms on ``store`` (a second call on the same store is that server restarted)."""
    registry = RoomRegistry(settings, clock)
    registry.meetings.attach_store(store)
    return registry


def say(room: Any, pid: str, text: str, segment: str) -> None:
    room.on_caption(room.participants[pid], CaptionFinal(segment_id=segment, text=text, audio_start_ms=0,
                                                         audio_end_ms=400, language="en"))


def texts(transcript: Transcript) -> list[str]:
    return [line.text for line in transcript.lines]


async def test_transcript_records_round_trip_with_translations_participants_and_limits(store):
    transcripts = TranscriptStore(store, ttl_s=600, max_lines=3)
    mid = "mtg_" + "1" * 16
    assert await transcripts.load("r", mid) is None  # nothing stored
    await transcripts.append(mid, {"kind": "opened", "room": "r", "meeting_id": mid, "created_at": 123.0})
    await transcripts.append(mid, {"kind": "participant", "participant_id": "a", "name": "Ana", "language": "en"})
    for i in range(4):
        await transcripts.append_line(mid, TranscriptLine(segment_id=f"s{i}", participant_id="a", name="Ana",
                                                          language="en", text=f"line {i}", start_ms=i * 1000,
                                                          end_ms=i * 1000 + 500, at=123.0 + i))
    await transcripts.append_translation(mid, "a", "s1", "es", "linea")
    await transcripts.append_translation(mid, "a", "s1", "es", "uno")
    await transcripts.append_translation(mid, "a", "nope", "es", "ignored")  # no such line: nothing joined
    await transcripts.append(mid, {"kind": "ended", "at": 130.0})
    loaded = await transcripts.load("r", mid)
    assert loaded is not None and loaded.created_at == 123.0 and loaded.ended_at == 130.0
    assert texts(loaded) == ["line 0", "line 1", "line 2"] and loaded.lines_dropped == 1  # max_lines=3
    assert loaded.lines[1].translations == {"es": "linea uno"}
    assert loaded.participants == {"a": {"participant_id": "a", "name": "Ana", "language": "en"}}
    body = loaded.to_json()
    assert body["meeting_id"] == mid and body["lines_dropped"] == 1 and len(body["lines"]) == 3
    with pytest.raises(ValueError):
        await transcripts.append(mid, {"text": "no kind"})
    other = "mtg_" + "2" * 16
    for i in range(200):  # the store's list limit (state_max_list_items) bounds a log
        await transcripts.append(other, {"kind": "participant", "participant_id": str(i)})
    with pytest.raises(StateLimitError):
        await transcripts.append(other, {"kind": "participant", "participant_id": "one more"})


async def test_a_restarted_server_reopens_the_meeting_with_its_whole_transcript(settings, store):
    clock = Clock()
    first = server(settings, store, clock)
    link = first.meetings.for_link("standup")
    first.meetings.linked(link, 3600)
    room = first.join("standup", person("a", settings))
    say(room, "a", "before the restart", "s1")
    room.on_translation(room.participants["a"], CaptionTranslation(
        segment_id="s1", speaker={"participant_id": "a", "name": "A"}, language="es", text="antes del reinicio",
        audio_start_ms=0, audio_end_ms=400))
    first.join("standup", person("b", settings))
    say(room, "b", "me too", "s1")
    await first.meetings.close_store()  # the server stops: its queued writes are in the store

    second = server(settings, store, clock)  # a new process: it never saw this meeting
    assert second.meetings.get("standup") is None
    restored = await second.meetings.load_link(link.id, "standup", clock.now + 3600)
    assert restored is not None and restored.id == link.id and restored.state == "idle"  # was live: idle now
    assert texts(restored.transcript) == ["before the restart", "me too"]
    newcomer = person("c", settings, listen="es")
    again = second.join("standup", newcomer)
    assert again.meeting_id == link.id
    replayed = [(e["type"], e["text"]) for e in newcomer.ctx.events if e.get("replayed") or e["type"] ==
                "caption.final"]
    assert ("caption.final", "before the restart") in replayed and ("caption.final", "me too") in replayed
    assert ("caption.translation", "antes del reinicio") in replayed  # in the newcomer's language
    say(again, "c", "after the restart", "s9")
    read = await second.meetings.read_transcript("standup")
    assert texts(read) == ["before the restart", "me too", "after the restart"]
    assert read.lines[0].translations == {"es": "antes del reinicio"}
    assert {p["participant_id"] for p in read.to_json()["participants"]} == {"a", "b", "c"}
    assert read.lines[2].start_ms >= read.lines[0].start_ms  # the room clock went on from the first server's
    assert second.meetings.persist.journal.stats()["ok"]
    await second.meetings.close_store()


async def test_a_room_re_formed_on_another_server_replays_the_lines_spoken_on_the_first(settings, store):
    clock = Clock()
    a, b = server(settings, store, clock), server(settings, store, clock)  # two nodes on one store
    link = b.meetings.for_link("team")  # b minted the link; a hosted the room
    b.meetings.linked(link, 3600)
    await b.meetings.persist.flush()
    assert (await a.meetings.load_link(link.id, "team", clock.now + 3600)).id == link.id
    room = a.join("team", person("x", settings))
    say(room, "x", "spoken on a", "s1")
    await a.meetings.persist.flush()  # a dies now; b's book holds the meeting as it was: pending, no lines
    late = person("y", settings)
    await b.meetings.load("team")  # what a join does first
    again = b.join("team", late)
    assert again.meeting_id == link.id
    assert [e["text"] for e in late.ctx.events if e["type"] == "caption.final"] == ["spoken on a"]
    say(again, "y", "spoken on b", "s2")
    assert texts(await b.meetings.read_transcript("team")) == ["spoken on a", "spoken on b"]
    assert texts(await a.meetings.read_transcript("team")) == ["spoken on a", "spoken on b"]  # the store's
    await a.meetings.close_store()
    await b.meetings.close_store()


async def test_who_records_the_end_of_a_meeting_adopted_from_the_store(settings, store):
    clock = Clock()
    first = server(settings, store, clock)
    left = first.join("left", person("a", settings))  # emptied before its server stopped: idle in the store
    say(left, "a", "bye", "s1")
    left.leave("a")
    crashed = first.join("crashed", person("b", settings))  # its server died with people in it: live in the store
    say(crashed, "b", "hello", "s1")
    await first.meetings.persist.flush()

    second = server(settings, store, clock)
    idle, live = await second.meetings.load("left"), await second.meetings.load("crashed")
    assert (idle.state, live.state) == ("idle", "idle")  # nobody is in them here; the downtime ended neither
    clock.now += second.meetings.grace_s + 1
    second.meetings.sweep()  # both end here; only the idle one's end is recorded (no server holds it live)
    await second.meetings.persist.flush()

    third = server(settings, store, clock)
    assert await third.meetings.load("left") is None
    assert texts(await third.meetings.read_transcript("left", idle.id)) == ["bye"]  # ended, readable
    again = await third.meetings.load("crashed")  # for all the store knows, another server hosts it
    assert again is not None and again.id == live.id and texts(again.transcript) == ["hello"]
    assert await second.meetings.load_link(live.id, "crashed", clock.now + 600) is not None  # not refused
    for registry in (first, second, third):
        await registry.meetings.close_store()


async def test_ended_meetings_stay_readable_within_ttl_and_kept_and_their_links_refused(settings, store):
    clock = Clock()
    first = server(settings, store, clock)
    ids = []
    for text in ("one", "two", "three"):
        room = first.join("m", person("a", settings))
        say(room, "a", text, "s1")
        ids.append(room.meeting_id)
        room.leave("a")
        clock.now += first.meetings.grace_s + 1
        first.meetings.sweep()  # ended: written to the store
    silent = first.meetings.for_link("quiet")
    first.meetings.linked(silent, 600)
    await first.meetings.close_store()

    second = server(settings, store, clock)
    assert texts(await second.meetings.read_transcript("m")) == ["three"]  # the latest ended meeting
    assert texts(await second.meetings.read_transcript("m", ids[1])) == ["two"]
    with pytest.raises(AgentError) as evicted:  # room_transcripts_kept=2: the oldest is gone
        await second.meetings.read_transcript("m", ids[0])
    assert (evicted.value.status, evicted.value.code) == (404, "meeting_not_found")
    with pytest.raises(AgentError):
        await second.meetings.read_transcript("other", ids[1])  # not a meeting of that room
    assert await second.meetings.load_link(ids[2], "m", clock.now + 600) is None  # ended: its link is refused
    pending = await second.meetings.load_link(silent.id, "quiet", clock.now + 600)
    assert pending is not None and pending.id == silent.id and pending.state == "pending"  # nobody joined yet
    clock.now += 3600
    with pytest.raises(AgentError) as expired:
        await second.meetings.read_transcript("m", ids[2])
    assert expired.value.status == 404
    with pytest.raises(AgentError) as gone:
        await second.meetings.read_transcript("m")
    assert gone.value.code == "room_not_found"
    await second.meetings.close_store()


async def test_servers_ending_meetings_in_the_same_instant_each_list_theirs(settings, store, monkeypatch):
    """The ended meetings' index is read, changed and written back; two servers doing so at once (the reads
    slowed here so that they overlap) each add their meeting, under the index lease."""
    from rtc_agent.apps.call.meeting_store import ENDED_INDEX

    real_get = store.get

    async def slow_get(key: str) -> str | None:
        value = await real_get(key)
        if key == ENDED_INDEX:
            await asyncio.sleep(0.05)  # the other server reads the same index meanwhile
        return value

    monkeypatch.setattr(store, "get", slow_get)
    clock = Clock()
    servers = [server(settings, store, clock) for _ in range(2)]
    for name, registry in zip(("left", "right"), servers, strict=True):
        room = registry.join(name, person("a", settings))
        say(room, "a", f"said in {name}", "s1")
        room.leave("a")
    clock.now += servers[0].meetings.grace_s + 1
    for registry in servers:
        registry.meetings.sweep()  # both end now: two index updates in flight at once
    await asyncio.gather(*(registry.meetings.close_store() for registry in servers))
    reader = server(settings, store, clock)
    assert texts(await reader.meetings.read_transcript("left")) == ["said in left"]
    assert texts(await reader.meetings.read_transcript("right")) == ["said in right"]
    await reader.meetings.close_store()


class BrokenStore(MemoryStore):
    """A store whose lists fail (a Redis server gone)."""

    async def append(self, key: str, item: str, ttl_s: float, max_items: int | None = None) -> int:
        raise StateUnavailable("the state store (redis://gone) did not answer")

    async def items(self, key: str) -> list[str]:
        raise StateUnavailable("the state store (redis://gone) did not answer")


async def test_a_failing_store_never_stops_the_call(settings):
    registry = server(settings, BrokenStore(), Clock())
    room = registry.join("r", person("a", settings))
    for i in range(8):  # past room_transcript_max_lines=6: the later lines are counted, not kept
        say(room, "a", f"line {i}", f"s{i}")
    late = person("b", settings)
    registry.join("r", late)  # the replay comes from the book's copy
    assert [e["text"] for e in late.ctx.events if e["type"] == "caption.final"] == [f"line {i}" for i in range(6)]
    read = await registry.meetings.read_transcript("r")  # the store cannot be read: the book's copy
    assert texts(read) == [f"line {i}" for i in range(6)] and read.lines_dropped == 2
    stats = registry.meetings.persist.journal.stats()
    assert not stats["ok"] and stats["failed"] >= 1 and "did not answer" in stats["last_error"]
    await registry.meetings.close_store()


class SlowStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def append(self, key: str, item: str, ttl_s: float, max_items: int | None = None) -> int:
        await self.gate.wait()
        return await super().append(key, item, ttl_s, max_items)


async def test_the_write_queue_is_bounded_and_flushes_in_order():
    store = SlowStore()
    journal = StoreJournal(max_queued=3)
    transcripts = TranscriptStore(store, ttl_s=60)
    def write(i: int) -> bool:
        return journal.submit("transcript", lambda: transcripts.append("m", {"kind": "n", "i": i}))

    accepted = [write(0)]
    await asyncio.sleep(0.05)  # the writer took the first one and waits on the store
    accepted += [write(i) for i in range(1, 6)]
    assert accepted == [True, True, True, True, False, False]  # one being written, three waiting
    assert not await journal.flush(timeout=0.1)  # still waiting
    store.gate.set()
    assert await journal.flush(timeout=5)
    assert [r["i"] for r in await transcripts.records("m")] == [0, 1, 2, 3]  # in submission order
    stats = journal.stats()
    assert (stats["dropped"], stats["written"], stats["queued"], stats["ok"]) == (2, 4, 0, False)
    await journal.close()
    assert not journal.submit("transcript", lambda: transcripts.append("m", {"kind": "late"}))
