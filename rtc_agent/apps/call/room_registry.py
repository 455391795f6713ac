"""The call rooms of one server: its live rooms and its meetings.

One :class:`RoomRegistry` per server, made by the composition root and shared by the ``call`` app (through its
session context, :attr:`~rtc_agent.apps.base.AppContext.rooms`) and the room routes (``/v1/rooms``).
``rooms`` holds the live rooms; each :class:`~rtc_agent.apps.call.room.Room` is one meeting
(:mod:`rtc_agent.apps.call.meetings`: what join links are bound to, when a meeting ends, how long ended
meetings' transcripts stay).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rtc_agent.apps.call.interpretation import PairInterpreter
from rtc_agent.apps.call.meetings import Meeting, MeetingBook
from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.room import PairFactory, Room, RoomFull
from rtc_agent.apps.call.transcript import Transcript
from rtc_agent.engines import st
from rtc_agent.errors import AgentError


class RoomRegistry:
    """The live rooms of one server (``rooms``) and its meetings (``meetings``: current and ended, on ``clock``).
    Its rooms interpret with pairs made by ``pair_factory``."""

    def __init__(self, settings: Any, clock: Callable[[], float] = time.time, *,
                 pair_factory: PairFactory = PairInterpreter) -> None:
        self.settings = settings
        self.rooms: dict[str, Room] = {}
        self.meetings = MeetingBook(settings, clock)
        self.pair_factory = pair_factory

    @property
    def max_participants(self) -> int:
        return int(getattr(self.settings, "max_room_participants", 6))

    def can_translate(self, target: str) -> bool:
        return target == "en" or not st.english_only(self.settings)

    def check_room(self, name: str) -> None:
        """Raise :class:`RoomFull` when ``name`` has no free place (checked again at join)."""
        room = self.rooms.get(name)
        if room is not None and len(room.participants) >= self.max_participants:
            raise RoomFull(f"room {name!r} is full ({self.max_participants} participants)")

    def join(self, name: str, participant: Participant) -> Room:
        """Add ``participant`` to the current meeting of ``name`` (a new one if there is none)."""
        meeting: Meeting = self.meetings.for_join(name)
        room = meeting.room
        if room is None:
            room = meeting.room = Room(name, self, meeting.id, pair_factory=self.pair_factory)
        room.transcript.ended_at = None
        self.rooms[name] = room
        try:
            room.join(participant)
        except AgentError:
            if not room.participants:
                self.ended(room)
            raise
        return room

    def ended(self, room: Room) -> None:
        """``room`` has no participants left: its pipelines stop and its meeting is idle."""
        if self.rooms.get(room.name) is room:
            del self.rooms[room.name]
        room.close_pairs()
        room.transcript.ended_at = time.time()
        meeting = self.meetings.current.get(room.name)
        if meeting is not None and meeting.room is room:
            self.meetings.emptied(meeting)

    def transcript(self, name: str, meeting_id: str | None = None) -> Transcript:
        """See :meth:`MeetingBook.transcript`."""
        return self.meetings.transcript(name, meeting_id)
