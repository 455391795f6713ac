"""Which node hosts each call room, when several nodes share one state store: a lease per room.

A room ``R`` is hosted by the node holding the lease ``room:R`` in the store (one slot; the holder is the node's
``node_url``, so a node restarted under the same address resumes its own leases). :meth:`RoomLeases.claim` is asked
for every offer of a participant of ``R``: the first node asking takes the lease (``room_lease_ttl_s``) and hosts
the room; every other node learns the owner's ``node_url`` and forwards the offer there
(:mod:`rtc_agent.server.forwarding`).

While this node holds a lease, :meth:`RoomLeases.run` renews it every third of its time to live, as long as the
room is live here (``live()`` names it) or was claimed within :data:`CLAIM_HOLD_S` (an offer that claimed it is
still being set up). Then the lease is released, at the next turn or at once after :meth:`RoomLeases.wake` (the
room ended). A node that dies stops renewing: its leases run out within ``room_lease_ttl_s`` and the next offer
for the room, at any node, takes it there.

A renewal that finds the lease gone (the store was unreachable for longer than its time to live, or this node's
loop stalled) takes it again if nobody else did; if another node did, ``on_lost(name)`` is called, so that the
participants here reconnect to the new owner instead of living on in a second room of the same name.

Contract: :meth:`claim` raises only what the store raises (:class:`~rtc_agent.state.StateUnavailable`, 503); the
renewal loop never raises (a store that fails is tried again at the next turn), and ends when cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable

from rtc_agent.errors import AgentError
from rtc_agent.state import StateStore

log = logging.getLogger(__name__)

LEASE_PREFIX = "room:"
# An offer claims its room some seconds before its session joins it (the offer is applied and candidates gathered
# first, up to 10 s each): a claimed room keeps its lease this long even while nobody is in it yet.
CLAIM_HOLD_S = 30.0


def lease_key(room: str) -> str:
    """The store key of room ``room``'s lease."""
    return LEASE_PREFIX + room


class RoomLeases:
    """The room leases of one node (``node_url``) in ``store``. ``live()`` names the rooms that have participants on
    this node; ``on_lost(name)`` hears of a room another node took while this one still hosted it."""

    def __init__(self, store: StateStore, node_url: str, ttl_s: float, *, live: Callable[[], Iterable[str]],
                 on_lost: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if not node_url:
            raise ValueError("room leases need this node's node_url")
        if not (math.isfinite(ttl_s) and ttl_s > 0):
            raise ValueError("room_lease_ttl_s must be > 0")
        self.store = store
        self.node_url = node_url
        self.ttl_s = float(ttl_s)
        self.live = live
        self.on_lost = on_lost
        self.clock = clock
        self.held: dict[str, float] = {}  # room -> when it was last claimed (clock), for the rooms leased here
        self._wake = asyncio.Event()

    @property
    def renew_every_s(self) -> float:
        return self.ttl_s / 3

    async def claim(self, name: str) -> str | None:
        """Host room ``name`` here if nobody else does: None when this node holds its lease now (taken or kept),
        else the ``node_url`` of the node that holds it."""
        for _ in range(3):  # the other holder's lease may end between the two steps
            if await self.store.acquire(lease_key(name), self.node_url, self.ttl_s) == 0.0:
                self.held[name] = self.clock()
                return None
            holders = await self.store.holders(lease_key(name))
            owner = next((url for url in holders if url != self.node_url), None)
            if owner is not None:
                return owner
        raise AgentError(f"the lease of room {name!r} keeps changing hands; try again", code="room_moving",
                         status=503, retry_after=1)

    async def owner(self, name: str) -> tuple[str | None, float]:
        """The node that holds room ``name``'s lease now and the seconds its lease has left (``(None, 0.0)``: none)."""
        holders = await self.store.holders(lease_key(name))
        if not holders:
            return None, 0.0
        url, left = max(holders.items(), key=lambda item: item[1])
        return url, left

    def wake(self) -> None:
        """Run the next renewal turn now (a room ended here: its lease is released without waiting)."""
        self._wake.set()

    async def run(self) -> None:
        """Renew, release and re-take this node's leases every :attr:`renew_every_s` (or on :meth:`wake`), until
        cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.renew_every_s)
            self._wake.clear()
            await self.turn()

    async def turn(self) -> None:
        """One renewal turn (see the module docstring); a store failure is logged and tried at the next turn."""
        live = set(self.live())
        now = self.clock()
        for name in live - set(self.held):  # a room that joined without a claim (none should) is leased too
            self.held[name] = now
        for name, claimed in list(self.held.items()):
            try:
                if name not in live and now - claimed >= CLAIM_HOLD_S:
                    await self.store.release(lease_key(name), self.node_url)
                    self.held.pop(name, None)
                elif not await self.store.renew(lease_key(name), self.node_url, self.ttl_s):
                    await self._retake(name)
            except AgentError as exc:
                log.warning("room %s: lease renewal failed (%s); retrying in %.1f s", name, exc, self.renew_every_s)

    async def _retake(self, name: str) -> None:
        if await self.store.acquire(lease_key(name), self.node_url, self.ttl_s) == 0.0:
            log.warning("room %s: its lease had run out (the store or this node stalled); taken again", name)
            return
        self.held.pop(name, None)
        owner, _ = await self.owner(name)
        log.warning("room %s: another node (%s) took its lease; its participants here reconnect there", name, owner)
        if self.on_lost is not None:
            self.on_lost(name)

    async def release_all(self) -> None:
        """Give every lease of this node up (shutdown): its rooms can re-form elsewhere at once."""
        for name in list(self.held):
            try:
                await self.store.release(lease_key(name), self.node_url)
            except AgentError as exc:
                log.warning("room %s: releasing its lease failed (%s); it runs out by itself", name, exc)
        self.held.clear()
