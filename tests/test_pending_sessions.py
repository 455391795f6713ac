"""The admission rule of :class:`~rtc_agent.server.registry.SessionRegistry` (issue 23), on a scripted clock.

The registry is real; its sessions are scripted stand-ins that start at a given time, connect when told and close
at once (the real path is in ``tests/test_pending_sessions_real.py``). Covered: connected sessions count against
``max_sessions`` and pending ones do not; the caps on pending sessions per credential, per IP and per network;
a full pending pool makes room by closing the oldest pending session past the grace (the network holding most
first) and refuses only when none is that old; the hard ceiling on objects; ``on_admit`` (the client token) runs
only for an admitted session; and, simulated, the attack of the issue's target against the default settings.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from rtc_agent.config import Settings
from rtc_agent.errors import AtCapacity, InvalidRequest
from rtc_agent.metrics import Metrics
from rtc_agent.rtc.candidates import CandidateFilter
from rtc_agent.rtc.offer import check_offer
from rtc_agent.server.registry import SessionRegistry, network_of, origin_keys
from tests.test_session_hardening import client_offer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Scripted:
    """A session as the registry sees it: started at the clock's time, connected when told, closed at once."""

    ids = itertools.count()

    def __init__(self, registry: SessionRegistry, *, connected: bool = False) -> None:
        self.registry = registry
        self.id = f"sess_{next(self.ids)}"
        self.app_name = "echo"
        self.client = ""
        self.started_at = registry.clock()
        self.connected_at: float | None = self.started_at if connected else None
        self.state = "connected" if connected else "connecting"
        self.close_reason: str | None = None

    def connect(self) -> None:
        self.connected_at = self.registry.clock()
        self.state = "connected"

    async def accept(self, offer_sdp: str) -> str:
        return "answer to " + offer_sdp

    async def close(self, reason: str = "deleted") -> None:
        if self.state == "closed":
            return
        self.state, self.close_reason = "closed", reason
        self.registry.closed(self)


def make_registry(clock: Clock, **limits: Any) -> SessionRegistry:
    options = {"connect_grace_s": 2.0, "max_pending_per_client": 4, "max_pending_per_network": 8,
               "max_pending": 16, **limits}
    max_sessions = options.pop("max_sessions", 16)
    return SessionRegistry(max_sessions, Metrics(), clock=clock, **options)


async def offer(registry: SessionRegistry, client: str, peer: str | None = None, **kwargs: Any) -> Scripted:
    session = Scripted(registry)
    assert await registry.start(session, "offer", client=client, peer=peer, **kwargs) == "answer to offer"
    return session


async def refused(registry: SessionRegistry, client: str, peer: str | None = None) -> AtCapacity:
    with pytest.raises(AtCapacity) as caught:
        registry.check_capacity(client, peer=peer)
    with pytest.raises(AtCapacity) as again:
        await registry.start(Scripted(registry), "offer", client=client, peer=peer)
    assert (again.value.status, again.value.code) == (caught.value.status, caught.value.code)
    assert caught.value.retry_after >= 1
    return caught.value


# --- keys ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("ip", "network"), [
    ("203.0.113.77", "net:203.0.113.0/24"),
    ("2001:db8:1:2:aaaa::1", "net:2001:db8:1:2::/64"),
    ("::ffff:203.0.113.9", "net:203.0.113.0/24"),
    ("::1", "net:::/64"),
    ("unknown", "net:unknown"),
])
def test_network_of(ip, network):
    assert network_of(ip) == network


def test_a_pending_session_counts_against_its_credential_its_ip_and_its_network():
    assert origin_keys("key:k1", "198.51.100.7") == ("key:k1", "ip:198.51.100.7", "net:198.51.100.0/24")
    assert origin_keys("ip:198.51.100.7", None) == ("ip:198.51.100.7", "net:198.51.100.0/24")
    assert origin_keys("ip:198.51.100.7", "198.51.100.7") == ("ip:198.51.100.7", "net:198.51.100.0/24")
    assert origin_keys("", None) == ()


# --- the ceiling counts connected sessions --------------------------------------------------------------------------

async def test_connected_sessions_fill_the_ceiling_and_pending_ones_do_not():
    clock = Clock()
    registry = make_registry(clock, max_sessions=2, max_pending=4)
    pending = [await offer(registry, f"ip:192.0.2.{i}") for i in range(3)]  # more than max_sessions
    pending[0].connect()
    pending[1].connect()
    error = await refused(registry, "ip:198.51.100.1")
    assert (error.status, error.code) == (503, "too_many_sessions")
    await pending[0].close()
    assert (await offer(registry, "ip:198.51.100.1")).connected_at is None


async def test_a_websocket_session_needs_a_slot_not_the_pending_pool():
    clock = Clock()
    registry = make_registry(clock, max_sessions=4, max_pending=2)
    for i in range(2):
        await offer(registry, f"ip:192.0.2.{i}")
    assert (await refused(registry, "ip:198.51.100.1")).code == "too_many_sessions"  # the pool is full, all young
    registry.check_capacity("ip:198.51.100.1", pending=False)
    registry.add(Scripted(registry, connected=True), client="ip:198.51.100.1")
    assert registry.counted() == 1


# --- caps on pending sessions ----------------------------------------------------------------------------------

async def test_pending_sessions_are_capped_per_credential_per_ip_and_per_network():
    clock = Clock()
    registry = make_registry(clock, max_pending_per_client=2, max_pending_per_network=3)
    await offer(registry, "key:k1", "192.0.2.1")
    await offer(registry, "key:k1", "198.51.100.1")
    error = await refused(registry, "key:k1", "203.0.113.1")  # one credential from anywhere
    assert (error.status, error.code) == (429, "too_many_pending_sessions") and "this client" in error.message
    await offer(registry, "key:k2", "192.0.2.1")  # another credential, the same IP: two from 192.0.2.1 now
    error = await refused(registry, "ip:192.0.2.1")
    assert error.status == 429 and "this client" in error.message
    error = await refused(registry, "key:k3", "192.0.2.1")
    assert error.status == 429 and "this address" in error.message
    await offer(registry, "ip:192.0.2.2")  # a third in 192.0.2.0/24
    error = await refused(registry, "ip:192.0.2.3")
    assert error.status == 429 and "this network" in error.message
    await offer(registry, "ip:192.0.3.3")  # the next /24 is another network


async def test_connected_and_ended_sessions_free_their_pending_place():
    clock = Clock()
    registry = make_registry(clock, max_pending_per_client=1)
    first = await offer(registry, "ip:192.0.2.1")
    assert (await refused(registry, "ip:192.0.2.1")).status == 429
    first.connect()
    second = await offer(registry, "ip:192.0.2.1")
    await second.close()
    await offer(registry, "ip:192.0.2.1")


# --- a full pool makes room -------------------------------------------------------------------------------------

async def test_a_full_pool_closes_the_oldest_pending_session_past_the_grace():
    clock = Clock()
    registry = make_registry(clock, max_pending=3, connect_grace_s=2.0)
    sessions = []
    for i in range(3):
        sessions.append(await offer(registry, f"ip:192.0.{i}.1"))
        clock.now += 0.5
    error = await refused(registry, "ip:198.51.100.1")  # the oldest is 1.5 s old: within the grace
    assert (error.status, error.code) == (503, "too_many_sessions")
    assert all(s.state == "connecting" for s in sessions)
    clock.now += 0.5
    newcomer = await offer(registry, "ip:198.51.100.1")
    assert sessions[0].close_reason == "connect_timeout" and sessions[0].id not in registry.active
    assert [s.state for s in sessions[1:]] == ["connecting", "connecting"]
    assert newcomer.id in registry.active and len(registry.pending()) == 3 and registry.evicted == 1


async def test_the_network_holding_the_most_pending_sessions_makes_room_first():
    clock = Clock()
    registry = make_registry(clock, max_pending=4)
    lone = await offer(registry, "ip:192.0.2.1")  # the oldest
    clock.now += 0.1
    crowd = [await offer(registry, f"ip:198.51.100.{i}") for i in range(3)]
    clock.now += 3.0
    await offer(registry, "ip:203.0.113.1")
    assert lone.state == "connecting" and crowd[0].close_reason == "connect_timeout"
    clock.now += 0.1
    await offer(registry, "ip:203.0.113.2")  # the crowd still holds 2, the others 1 each
    assert lone.state == "connecting" and crowd[1].close_reason == "connect_timeout"


async def test_a_refused_or_failed_check_makes_no_room():
    clock = Clock()
    registry = make_registry(clock, max_pending=2, max_pending_per_client=1)
    old = [await offer(registry, f"ip:192.0.2.{i}") for i in range(2)]
    clock.now += 5.0
    registry.check_capacity("ip:198.51.100.1")  # passes: start() could make room, but a check closes nothing
    assert all(s.state == "connecting" for s in old)
    assert (await refused(registry, "ip:192.0.2.0")).status == 429  # the per-client cap comes before any room
    assert all(s.state == "connecting" for s in old)


# --- the hard ceiling ---------------------------------------------------------------------------------------------

async def test_the_hard_ceiling_counts_every_object_and_a_full_one_makes_room_too():
    clock = Clock()
    registry = make_registry(clock, max_sessions=2, max_pending=2)  # hard ceiling: 2 + 2 objects
    assert registry.hard_ceiling == 4
    connected = [await offer(registry, f"ip:192.0.2.{i}") for i in range(2)]
    for session in connected:
        session.connect()
        session.state = "closing"  # ending, but its close hangs: still an object, no longer counted
    live = await offer(registry, "ip:198.51.100.2")
    live.connect()
    pending = await offer(registry, "ip:198.51.100.3")
    assert registry.counted() == 1 and len(registry.pending()) == 1 and len(registry.active) == 4
    error = await refused(registry, "ip:203.0.113.1")  # room in the pool, none under the ceiling
    assert error.code == "too_many_sessions"
    with pytest.raises(AtCapacity):
        registry.add(Scripted(registry, connected=True), client="ip:203.0.113.9")  # nor for a WebSocket
    clock.now += 3.0
    await offer(registry, "ip:203.0.113.1")
    assert len(registry.active) == 4 and pending.close_reason == "connect_timeout"
    clock.now += 3.0
    with pytest.raises(AtCapacity):  # add() makes no room
        registry.add(Scripted(registry), client="ip:203.0.113.2")
    assert len(registry.active) == 4


# --- the client token -------------------------------------------------------------------------------------------

async def test_on_admit_runs_only_for_an_admitted_session_and_can_refuse_it():
    clock = Clock()
    registry = make_registry(clock, max_pending=1)
    used: list[str] = []
    await offer(registry, "ip:192.0.2.1", on_admit=lambda: used.append("first"))
    with pytest.raises(AtCapacity):
        await registry.start(Scripted(registry), "offer", client="ip:192.0.2.2",
                             on_admit=lambda: used.append("refused"))
    assert used == ["first"]

    def spent() -> None:
        raise PermissionError("the token was used already")

    clock.now += 5.0
    with pytest.raises(PermissionError):
        await registry.start(Scripted(registry), "offer", client="ip:192.0.2.3", on_admit=spent)
    assert not registry.active and registry.total == 1  # not registered (the old one still made room)


async def test_the_offer_check_refuses_what_aiortc_would_refuse_later():
    """Checked before the token is used, so it must catch what setRemoteDescription refuses."""
    client, sdp = await client_offer()
    await client.close()
    assert "a=ice-ufrag" in check_offer(sdp, CandidateFilter(), max_candidates=100)
    lines = sdp.splitlines()
    broken = {
        "no ICE credentials": [ln for ln in lines if not ln.startswith("a=ice-pwd")],
        "no RTCP mux": [ln for ln in lines if ln != "a=rtcp-mux"],
        "no codec in common": [ln.replace("opus/48000", "speex/48000").replace("PCMU/8000", "x-u/8000")
                               .replace("PCMA/8000", "x-a/8000").replace("G722/8000", "x-g/8000") for ln in lines],
    }
    for name, case in broken.items():
        with pytest.raises(InvalidRequest) as caught:
            check_offer("\r\n".join(case) + "\r\n", CandidateFilter(), max_candidates=100)
        assert caught.value.code == "invalid_sdp", name


# --- the attack of the target, simulated ----------------------------------------------------------------------

async def test_offers_that_never_connect_at_5_per_s_do_not_refuse_or_close_legitimate_ones():
    """The issue's target against the default limits: offers that never connect arrive at 5/s from rotating
    addresses (every one in a /24 of its own, the hardest case for the per-network cap) and are closed by their
    watchdog at connect_timeout_s; a legitimate offer every 0.7 s connects 1.5 s after it arrived."""
    defaults = Settings()
    clock = Clock()
    registry = SessionRegistry(defaults.max_sessions, Metrics(), clock=clock,
                               connect_grace_s=defaults.connect_grace_s,
                               max_pending_per_client=defaults.max_pending_sessions_per_client,
                               max_pending_per_network=defaults.max_pending_sessions_per_network,
                               max_pending=defaults.max_pending_sessions)
    legit: list[Scripted] = []
    attack_refused = 0
    step = 0.1
    for tick in range(600):  # 60 s
        clock.now += step
        for session in list(registry.active.values()):
            if session.connected_at is None and clock.now - session.started_at > defaults.connect_timeout_s:
                await session.close("connect_timeout")  # the session's own watchdog
        for session in legit:
            if session.connected_at is None and session.state != "closed" and clock.now - session.started_at >= 1.5:
                session.connect()
        if tick % 2 == 0:
            try:
                await offer(registry, f"ip:10.{tick // 256 % 256}.{tick % 256}.1")
            except AtCapacity:
                attack_refused += 1
        if tick % 7 == 0:
            legit.append(await offer(registry, f"ip:172.16.{tick % 256}.1"))  # never refused
        connected = [s for s in legit if s.connected_at is not None]
        for session in connected[:-8]:  # legitimate sessions end too, so the ceiling is never the limit
            await session.close("deleted")
        assert len(registry.pending()) <= defaults.max_pending_sessions
        assert len(registry.active) <= 2 * defaults.max_sessions
    assert legit and all(s.close_reason in (None, "deleted") for s in legit)
    assert registry.evicted > 100 and attack_refused == 0
