"""The call rooms of one server: its live rooms and its meetings.

One :class:`RoomRegistry` per server, made by the composition root and shared by the ``call`` app (through its
session context, :attr:`~rtc_agent.apps.base.AppContext.rooms`) and the room routes (``/v1/rooms``).
``rooms`` holds the live rooms; each :class:`~rtc_agent.apps.call.room.Room` is one meeting
(:mod:`rtc_agent.apps.call.meetings`: what join links are bound to, when a meeting ends, how long ended
meetings' transcripts stay).

Interpretation pairs are admitted within capacity (:meth:`RoomRegistry.admit_pair`): at most ``room_max_pairs`` per
room, and speech-route pairs (each a speech-translation pipeline) at most ``pair_capacity()`` over all rooms when
the composition root wires it to the machine's measured capacity (``None``: no machine limit).

With several nodes on one state store, ``leases`` (:class:`~rtc_agent.apps.call.room_lease.RoomLeases`, set by
the server) says which node hosts each room: the rooms here are those whose lease this node holds, renewed while
they are in ``rooms`` and released once they end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rtc_agent.apps.call.meetings import Meeting, MeetingBook
from rtc_agent.apps.call.pairs import InterpretationUnavailable, make_pair
from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.room import PairFactory, Room, RoomFull
from rtc_agent.apps.call.room_lease import RoomLeases
from rtc_agent.apps.call.transcript import Transcript
from rtc_agent.apps.interpret.deliverable import ROUTE_SPEECH, route_for
from rtc_agent.errors import AgentError


class RoomRegistry:
    """The live rooms of one server (``rooms``) and its meetings (``meetings``: current and ended, on ``clock``).
    Its rooms interpret with pairs made by ``pair_factory``."""

    def __init__(self, settings: Any, clock: Callable[[], float] = time.time, *,
                 pair_factory: PairFactory = make_pair,
                 pair_capacity: Callable[[], int | None] | None = None) -> None:
        self.settings = settings
        self.rooms: dict[str, Room] = {}
        self.meetings = MeetingBook(settings, clock)
        self.pair_factory = pair_factory
        self.pair_capacity = pair_capacity
        #: which node hosts each room when several share the state store (set by the server; None: one node)
        self.leases: RoomLeases | None = None
        #: the SFU rooms (:class:`~rtc_agent.apps.call.sfu.SfuRooms`) when the server has an SFU (set by the server)
        self.sfu: Any = None

    @property
    def max_participants(self) -> int:
        return int(getattr(self.settings, "max_room_participants", 6))

    @property
    def mt_backlog(self) -> int:
        return int(getattr(self.settings, "room_mt_backlog", 8))

    @property
    def replay_lines(self) -> int:
        return int(getattr(self.settings, "room_replay_lines", 20))

    def can_translate(self, target: str) -> bool:
        return route_for(self.settings, target) is not None

    def admit_pair(self, room: Room, target: str) -> None:
        """Raise :class:`InterpretationUnavailable` when ``room`` may not start one more pair into ``target``."""
        limit = int(getattr(self.settings, "room_max_pairs", 12))
        if len(room.pairs) >= limit:
            raise InterpretationUnavailable(f"room {room.name!r} already runs {limit} interpretations (room_max_pairs)")
        route = route_for(self.settings, target)
        capacity = self.pair_capacity() if self.pair_capacity is not None else None
        if route is not None and route[0] == ROUTE_SPEECH and capacity is not None:
            running = sum(1 for r in self.rooms.values() for pair in r.pairs.values()
                          if getattr(pair, "route", None) == ROUTE_SPEECH)
            if running >= capacity:
                raise InterpretationUnavailable(f"this server runs {running} speech interpretations, all it holds "
                                                "in real time; try again when one ends")

    def check_room(self, name: str) -> None:
        """Raise :class:`RoomFull` when ``name`` has no free place (checked again at join)."""
        room = self.rooms.get(name)
        if room is not None and len(room.participants) >= room.max_participants:
            raise RoomFull(f"room {name!r} is full ({room.max_participants} participants)")

    def join(self, name: str, participant: Participant) -> Room:
        """Add ``participant`` to the current meeting of ``name`` (a new one if there is none)."""
        meeting: Meeting = self.meetings.for_join(name)
        room = meeting.room
        if room is None:
            room = meeting.room = Room(name, self, meeting.id, pair_factory=self.pair_factory,
                                       transcript=meeting.transcript)
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
        if self.leases is not None:
            self.leases.wake()  # its lease is released now, so the room can re-form on any node

    def transcript(self, name: str, meeting_id: str | None = None) -> Transcript:
        """See :meth:`MeetingBook.transcript`."""
        return self.meetings.transcript(name, meeting_id)
