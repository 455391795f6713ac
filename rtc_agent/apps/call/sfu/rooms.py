"""The SFU rooms of one server: which call rooms go through Janus, and a participant's way in and out.

One :class:`SfuRooms` per server when ``sfu_url`` is set (``RoomRegistry.sfu``, made by the composition root).
A room is an SFU room when

- it was planned so: ``POST /v1/rooms {"mode": "sfu"}``, or ``{"size": N}`` above ``max_room_participants``
  (:meth:`SfuRooms.plan`; the plan lasts as long as the join link, at most ``MAX_PLANS`` names at once), or
- the session that opens it says ``{"mode": "sfu"}`` in its config.

A live room keeps the mode it started with (a mesh room is never switched mid-call): a later config that says
otherwise joins it as it is. A ``listener`` (config ``role``) needs an SFU room (400 ``invalid_config`` in a mesh).

:func:`admit` runs before the participant joins the rtc-agent room (it opens the Janus room for the first one and
gives the participant its token); :func:`joined` after (the bridge learns its room, pages learn the counts);
:func:`leave` after it left (its token goes; the Janus room is destroyed with the last member).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.sfu.bridge import SfuBridge
from rtc_agent.errors import AgentError, InvalidRequest

MAX_PLANS = 4096  # planned SFU room names kept at once (the oldest plan goes first)
MODES = ("mesh", "sfu")
ROLES = ("speaker", "listener")


def sfu_unavailable() -> InvalidRequest:
    return InvalidRequest("this server has no SFU (sfu_url is not set): rooms are meshes of at most "
                          "max_room_participants", code="sfu_unavailable")


class SfuRooms:
    """The SFU bridges of one server's rooms (by room name) and the names planned as SFU rooms."""

    def __init__(self, settings: Any, clock: Any = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.bridges: dict[str, SfuBridge] = {}
        self.plans: OrderedDict[str, float] = OrderedDict()  # room name -> until when

    def plan(self, name: str, seconds: float) -> None:
        """``name`` opens as an SFU room (for the next ``seconds``)."""
        self.plans.pop(name, None)
        self.plans[name] = self.clock() + seconds
        while len(self.plans) > MAX_PLANS:
            self.plans.popitem(last=False)

    def planned(self, name: str) -> bool:
        until = self.plans.get(name)
        if until is not None and until < self.clock():
            del self.plans[name]
            return False
        return until is not None

    def bridge_for(self, name: str, live_room: Any, mode: str | None) -> SfuBridge | None:
        """The bridge a joiner of ``name`` uses (None: a mesh room); made when the room opens as an SFU room."""
        if live_room is not None and getattr(live_room, "sfu", None) is None:
            return None  # a live mesh room stays a mesh
        bridge = self.bridges.get(name)
        if bridge is not None and not bridge.closed:
            return bridge
        if mode == "sfu" or (mode is None and self.planned(name)):
            bridge = self.bridges[name] = SfuBridge(name, self.settings)
            return bridge
        return None

    def forget(self, bridge: SfuBridge) -> None:
        if self.bridges.get(bridge.name) is bridge:
            del self.bridges[bridge.name]

    async def close(self) -> None:
        """Destroy every Janus room still open (server shutdown)."""
        for bridge in list(self.bridges.values()):
            await bridge.close()
        self.bridges.clear()

    def stats(self) -> dict[str, Any]:
        return {name: bridge.stats() for name, bridge in self.bridges.items()}


def link_mode(rooms: Any, data: dict[str, Any], name: str, seconds: float) -> str:
    """The mode of a join link's room from ``POST /v1/rooms {mode?, size?}`` (planning an SFU room for
    ``seconds`` when it is one): ``sfu`` when asked, or when ``size`` is above ``max_room_participants`` and an SFU
    is configured (400 ``sfu_unavailable`` without one); else the live room's mode (``mesh`` by default). 409
    ``room_mode_conflict`` for an SFU link to a live mesh room (a room keeps its mode while it is live)."""
    mode, size = data.get("mode"), data.get("size")
    if mode is not None and mode not in MODES:
        raise InvalidRequest("'mode' must be 'mesh' or 'sfu'", code="invalid_mode")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= 100_000):
        raise InvalidRequest("'size' must be a whole number of participants (1-100000)", code="invalid_size")
    sfu: SfuRooms | None = getattr(rooms, "sfu", None)
    big = size is not None and size > rooms.max_participants
    live = rooms.rooms.get(name)
    if mode == "sfu" or (mode is None and big):
        if sfu is None:
            raise sfu_unavailable()
        if live is not None and getattr(live, "sfu", None) is None:
            raise AgentError(f"room {name!r} is a live mesh call; an SFU room needs another name or its end",
                             code="room_mode_conflict", status=409)
        sfu.plan(name, seconds)
        return "sfu"
    if big:
        raise InvalidRequest(f"a mesh room holds at most {rooms.max_participants} participants; ask for mode 'sfu'",
                             code="invalid_size")
    if live is not None:
        return "mesh" if getattr(live, "sfu", None) is None else "sfu"
    return "sfu" if sfu is not None and sfu.planned(name) else "mesh"


def check_mode(config: dict[str, Any]) -> tuple[str | None, str]:
    """The ``mode`` (None: as the room is) and ``role`` of a call config; 400 ``invalid_config`` otherwise."""
    mode, role = config.get("mode"), config.get("role", "speaker")
    if mode is not None and mode not in MODES:
        raise InvalidRequest("mode must be 'mesh' or 'sfu'", code="invalid_config")
    if role not in ROLES:
        raise InvalidRequest("role must be 'speaker' or 'listener'", code="invalid_config")
    return mode, role


async def admit(rooms: Any, name: str, mode: str | None, p: Participant) -> SfuBridge | None:
    """Before ``p`` joins room ``name``: its SFU bridge (None: a mesh room), with ``p`` admitted to it."""
    sfu: SfuRooms | None = getattr(rooms, "sfu", None)
    if sfu is None:
        if mode == "sfu":
            raise sfu_unavailable()
        bridge = None
    else:
        bridge = sfu.bridge_for(name, rooms.rooms.get(name), mode)
    if bridge is None:
        if p.role == "listener":
            raise InvalidRequest("role 'listener' is for SFU rooms (mode 'sfu')", code="invalid_config")
        return None
    try:
        await bridge.add(p)
    except Exception:
        if not bridge.members:
            await bridge.close()
            if sfu is not None:
                sfu.forget(bridge)
        raise
    p.sfu = bridge
    return bridge


def joined(bridge: SfuBridge | None, room: Any) -> None:
    """After a member joined ``room``: the bridge knows its room; everyone hears the new counts."""
    if bridge is None:
        return
    bridge.room = room
    bridge.announce()


async def leave(rooms: Any, p: Participant) -> None:
    """After ``p`` left its room: out of the SFU room too (the bridge ends with its last member)."""
    bridge: SfuBridge | None = getattr(p, "sfu", None)
    if bridge is None:
        return
    p.sfu = None
    await bridge.remove(p)
    sfu: SfuRooms | None = getattr(rooms, "sfu", None)
    if bridge.closed and sfu is not None:
        sfu.forget(bridge)
