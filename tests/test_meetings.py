"""Meetings without a server: a room name's meetings (pending, live, idle, ended) and what join links are bound
to, the rejoin grace, transcripts of ended meetings by id with their TTL and count (scripted clock), and display
names unique among a room's live participants."""

from __future__ import annotations

import dataclasses

import pytest

from rtc_agent.apps.call.meetings import MEETING_ID, SESSION_SETUP_MARGIN_S, check_meeting_id
from rtc_agent.apps.call.names import MAX_NAME, unique_name
from rtc_agent.apps.call.room_registry import RoomRegistry
from rtc_agent.config import Settings
from rtc_agent.errors import AgentError
from rtc_agent.protocol.events import CaptionFinal
from tests.test_rooms import ParticipantContext, person


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def settings() -> Settings:
    return dataclasses.replace(Settings(), max_room_participants=4, room_transcripts_kept=2,
                               room_transcript_ttl_s=3600)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def say(room, p, text: str, segment: str = "s1") -> None:
    room.on_caption(p, CaptionFinal(segment_id=segment, text=text, audio_start_ms=0, audio_end_ms=500))


def test_links_and_participants_share_the_current_meeting_until_it_ends(settings, clock):
    registry = RoomRegistry(settings, clock)
    book = registry.meetings
    pending = book.for_link("m")
    book.linked(pending, 600)
    assert MEETING_ID.match(pending.id) and pending.state == "pending"
    assert book.for_link("m") is pending  # a second link before anyone joined: the same meeting
    a = person("a", settings)
    room = registry.join("m", a)  # the link's meeting starts with its first participant
    assert room.meeting_id == pending.id and pending.state == "live"
    assert book.bound("m", pending.id) is pending and book.find(pending.id) is pending
    say(room, a, "first meeting")
    room.leave("a")
    assert "m" not in registry.rooms and pending.state == "idle"
    clock.now += book.grace_s - 1  # a reconnect within the grace resumes the meeting, transcript and all
    again = registry.join("m", person("a", settings))
    assert again is room and room.transcript.ended_at is None and len(room.transcript.lines) == 1
    room.leave("a")
    clock.now += book.grace_s
    with pytest.raises(AgentError) as ended:
        book.bound("m", pending.id)
    assert ended.value.status == 410 and ended.value.code == "meeting_ended"
    assert book.find(pending.id) is None
    second = registry.join("m", person("b", settings))  # without a link: a new meeting of the same name
    assert second.meeting_id != pending.id and book.for_link("m").id == second.meeting_id
    with pytest.raises(AgentError):
        book.bound("m", pending.id)
    with pytest.raises(AgentError):
        book.bound("other", second.meeting_id)


def test_a_meeting_stays_current_while_client_tokens_of_its_links_live(settings, clock):
    registry = RoomRegistry(settings, clock)
    book = registry.meetings
    meeting = book.for_link("m")
    book.linked(meeting, 3600)
    room = registry.join("m", person("a", settings))
    book.exchanged(meeting, 300)  # a client token from the link, usable for 300 s, not used yet
    room.leave("a")
    clock.now += book.grace_s + 1
    assert book.bound("m", meeting.id) is meeting  # that token could still join: nobody may start another
    clock.now += 300 + SESSION_SETUP_MARGIN_S
    with pytest.raises(AgentError):
        book.bound("m", meeting.id)
    # a pending meeting nobody joined ends with its links (and the tokens exchanged from them)
    pending = book.for_link("p")
    book.linked(pending, 100)
    book.exchanged(pending, 100)
    clock.now += 99 + SESSION_SETUP_MARGIN_S
    assert book.get("p") is pending
    clock.now += 2
    assert book.get("p") is None and "p" not in book.current


def test_ended_transcripts_by_meeting_expire_and_are_bounded(settings, clock):
    registry = RoomRegistry(settings, clock)
    book = registry.meetings
    ids = []
    for text in ("one", "two", "three"):
        p = person("a", settings)
        room = registry.join("m", p)
        say(room, p, text)
        ids.append(room.meeting_id)
        assert registry.transcript("m").lines[0].text == text  # the live meeting's
        room.leave("a")
        clock.now += book.grace_s + 1
    assert registry.transcript("m").meeting_id == ids[2]  # no live meeting: the latest ended one
    assert registry.transcript("m", ids[1]).lines[0].text == "two"
    assert registry.transcript("m", ids[1]).to_json()["meeting_id"] == ids[1]
    with pytest.raises(AgentError) as evicted:  # room_transcripts_kept=2: the oldest went first
        registry.transcript("m", ids[0])
    assert evicted.value.status == 404 and evicted.value.code == "meeting_not_found"
    with pytest.raises(AgentError):
        registry.transcript("other", ids[1])  # a meeting of another room
    clock.now += 3600 - 1
    assert registry.transcript("m", ids[2]).lines  # just under room_transcript_ttl_s after it ended: still there
    clock.now += 1
    with pytest.raises(AgentError) as expired:
        registry.transcript("m", ids[2])
    assert expired.value.status == 404
    with pytest.raises(AgentError) as gone:
        registry.transcript("m")
    assert gone.value.code == "room_not_found" and not book.ended  # freed
    silent = registry.join("s", person("q", settings))
    silent.leave("q")
    clock.now += book.grace_s + 1
    book.sweep()
    assert not book.ended and not book.current  # a meeting nobody spoke in leaves nothing
    for bad in ("mtg_1", "MTG_0123456789abcdef", 5, "mtg_0123456789abcdeg"):
        with pytest.raises(AgentError) as invalid:
            check_meeting_id(bad)
        assert invalid.value.status == 400 and invalid.value.code == "invalid_meeting"


def test_unique_name_suffixes():
    assert unique_name("Ana", []) == "Ana"
    assert unique_name("Ana", ["Bo"]) == "Ana"
    assert unique_name("Ana", ["ana"]) == "Ana (2)"  # case does not make another name
    assert unique_name("Ana", ["Ana", "Ana (2)"]) == "Ana (3)"
    assert unique_name("Ana (2)", ["Ana (2)"]) == "Ana (2) (2)"
    long = "x" * MAX_NAME
    suffixed = unique_name(long, [long])
    assert len(suffixed) == MAX_NAME and suffixed.endswith(" (2)")


def test_a_taken_name_is_suffixed_for_everyone_and_in_the_transcript(settings):
    from rtc_agent.apps.call.app import CallApp

    registry = RoomRegistry(settings)
    ana1, ana2, bo = (dataclasses.replace(person(pid, settings), name=name)
                      for pid, name in (("p1", "Ana"), ("p2", "Ana"), ("p3", "Bo")))
    room = registry.join("n", ana1)
    registry.join("n", ana2)
    registry.join("n", bo)
    assert ana2.name == "Ana (2)"
    assert [e["name"] for e in bo.ctx.events[0]["participants"]] == ["Ana", "Ana (2)", "Bo"]
    own = [e for e in ana2.ctx.events[0]["participants"] if e["participant_id"] == "p2"]
    assert own[0]["name"] == "Ana (2)"  # the newcomer learns its name from its room.joined
    assert ana1.ctx.events[-2]["participant"]["name"] == "Ana (2)"  # room.participant.joined, as the others see it
    say(room, ana2, "hello")
    assert room.transcript.lines[0].name == "Ana (2)" and room.transcript.participants["p2"]["name"] == "Ana (2)"
    assert bo.ctx.events[-1]["speaker"]["name"] == "Ana (2)"
    room.leave("p1")
    third = dataclasses.replace(person("p4", settings), name="Ana")
    registry.join("n", third)
    assert third.name == "Ana"  # the first Ana left: her name is free again

    # a rename to a taken name is suffixed too, and the session's config says so
    ctx = ParticipantContext("p5", settings)
    app = CallApp(ctx, CallApp.validate_config({"room": "n", "name": "Cy"}, settings))
    app.room = registry.join("n", app.participant)
    app._update({"name": "bo"})
    assert app.participant.name == "bo (2)" and app.config["name"] == "bo (2)"
    assert ctx.events[-2]["type"] == "session.updated" and ctx.events[-2]["session"]["config"]["name"] == "bo (2)"
    assert bo.ctx.events[-1]["participant"]["name"] == "bo (2)"
    app._update({"name": "Cy"})
    assert app.participant.name == "Cy"  # its own name is not taken by itself
    for pid in list(room.participants):
        room.leave(pid)


def test_a_link_from_before_a_restart_restores_its_meeting_but_an_ended_one_stays_ended(settings, clock):
    registry = RoomRegistry(settings, clock)
    book = registry.meetings
    unseen = "mtg_" + "a" * 16  # minted by the previous process: this book never saw it
    restored = book.restore(unseen, "m", links_until=clock.now + 600)
    assert restored is not None and restored.id == unseen and restored.state == "pending"
    assert book.find(unseen) is restored and book.restore(unseen, "m", clock.now + 600) is None  # once
    room = registry.join("m", person("a", settings))
    assert room.meeting_id == unseen  # the first participant enters the link's meeting
    assert book.restore("mtg_" + "b" * 16, "m", clock.now + 600) is None  # the name has another current meeting
    room.leave("a")
    clock.now += book.grace_s + SESSION_SETUP_MARGIN_S + 1
    book.sweep()
    assert book.find(unseen) is None
    assert book.restore(unseen, "m", clock.now + 600) is None  # ended here: its links stay refused
    assert book.restore("not-a-meeting-id", "n", clock.now + 600) is None
