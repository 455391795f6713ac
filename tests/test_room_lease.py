"""Room ownership by lease (rtc_agent.apps.call.room_lease), the signed node-to-node requests
(rtc_agent.server.node_link) and the replica settings (rtc_agent.config.replicas), without servers: the memory
store on a scripted clock, so expiry is exact and nothing waits."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from rtc_agent.apps.call.room_lease import CLAIM_HOLD_S, RoomLeases, lease_key
from rtc_agent.config import Settings, SettingsError, node_id_of, replica_warnings, validate
from rtc_agent.errors import AgentError
from rtc_agent.server.node_link import (
    CLIENT_IP,
    FORWARDED_AT,
    FORWARDED_BY,
    SIGNATURE,
    NodeLink,
    NodeSignatureError,
    signature,
)
from rtc_agent.state import MemoryStore, StateUnavailable
from tests.nodes import NODE_SECRET, REPO

A, B = "http://10.0.0.1:8080", "http://10.0.0.2:8080"
TTL = 6.0


class Clock:
    """One scripted clock for the store (lease expiry) and the leases (claim holds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemoryStore:
    return MemoryStore(clock=clock)


def node(store: Any, url: str, clock: Clock, live: set[str], lost: list[str] | None = None) -> RoomLeases:
    return RoomLeases(store, url, TTL, live=lambda: live,
                      on_lost=(lost.append if lost is not None else None), clock=clock)


async def test_the_first_node_to_ask_hosts_the_room_and_the_others_learn_where(store, clock):
    a, b = node(store, A, clock, set()), node(store, B, clock, set())
    assert await a.claim("standup") is None  # taken
    assert await b.claim("standup") == A  # held by a: b forwards there
    assert await a.claim("standup") is None  # a keeps it
    assert await b.claim("retro") is None  # another room, another owner
    assert await a.claim("retro") == B
    owner, left = await b.owner("standup")
    assert owner == A and left == pytest.approx(TTL)
    assert await b.owner("nobody") == (None, 0.0)


async def test_a_live_room_keeps_its_lease_and_an_ended_one_gives_it_up(store, clock):
    live: set[str] = set()
    a, b = node(store, A, clock, live), node(store, B, clock, set())
    await a.claim("standup")
    live.add("standup")
    for _ in range(20):  # a minute of renewal turns: the lease never lapses while the room lives
        clock.now += a.renew_every_s
        await a.turn()
        assert await b.claim("standup") == A
    live.clear()  # the room ended here; the claim is older than the hold
    await a.turn()
    assert await store.holders(lease_key("standup")) == {}
    assert "standup" not in a.held
    assert await b.claim("standup") is None  # the room can re-form on b at once


async def test_a_claimed_room_keeps_its_lease_while_its_session_is_set_up(store, clock):
    a, b = node(store, A, clock, set()), node(store, B, clock, set())
    await a.claim("standup")  # an offer claimed it; nobody has joined yet
    for _ in range(int(CLAIM_HOLD_S // a.renew_every_s) - 1):
        clock.now += a.renew_every_s
        await a.turn()
        assert await b.claim("standup") == A
    clock.now += 2 * a.renew_every_s  # past the hold, still nobody in it: released
    await a.turn()
    assert await b.claim("standup") is None


async def test_a_dead_owners_lease_runs_out_within_its_ttl(store, clock):
    a, b = node(store, A, clock, {"standup"}), node(store, B, clock, set())
    await a.claim("standup")
    await a.turn()  # renewed now; then a dies (no more turns)
    clock.now += TTL - 0.01
    assert await b.claim("standup") == A
    clock.now += 0.02
    assert await b.claim("standup") is None  # b hosts it


async def test_a_node_that_lost_its_room_to_another_is_told(store, clock):
    lost: list[str] = []
    a, b = node(store, A, clock, {"standup"}, lost), node(store, B, clock, set())
    await a.claim("standup")
    clock.now += TTL + 1  # a stalled past its lease
    assert await b.claim("standup") is None  # b took the room
    await a.turn()
    assert lost == ["standup"] and "standup" not in a.held
    assert await a.claim("standup") == B


async def test_a_lapsed_lease_nobody_took_is_taken_again(store, clock):
    lost: list[str] = []
    a = node(store, A, clock, {"standup"}, lost)
    await a.claim("standup")
    clock.now += TTL + 1
    await a.turn()
    assert lost == [] and list(await store.holders(lease_key("standup"))) == [A]


async def test_release_all_frees_every_room_at_shutdown(store, clock):
    a, b = node(store, A, clock, {"r1", "r2"}), node(store, B, clock, set())
    await a.claim("r1")
    await a.claim("r2")
    await a.release_all()
    assert a.held == {}
    assert await b.claim("r1") is None and await b.claim("r2") is None


class FailingStore(MemoryStore):
    """A store whose renewals fail (a Redis server restarting)."""

    async def renew(self, key: str, owner: str, ttl_s: float) -> bool:
        raise StateUnavailable("the state store did not answer", retry_after=5)


async def test_a_failing_store_is_retried_and_never_ends_the_renewal_loop(clock, caplog):
    store = FailingStore(clock=clock)
    a = node(store, A, clock, {"standup"})
    await a.claim("standup")
    await a.turn()  # does not raise
    assert "lease renewal failed" in caplog.text and "standup" in a.held


def test_leases_refuse_what_cannot_work(store):
    with pytest.raises(ValueError, match="node_url"):
        RoomLeases(store, "", TTL, live=set)
    with pytest.raises(ValueError, match="room_lease_ttl_s"):
        RoomLeases(store, A, 0.0, live=set)


async def test_claim_gives_up_with_503_when_the_lease_keeps_changing_hands(clock):
    class Flapping(MemoryStore):
        async def acquire(self, key: str, owner: str, ttl_s: float, slots: int = 1) -> float:
            return 1.0  # held by someone ...

        async def holders(self, key: str) -> dict[str, float]:
            return {}  # ... who is gone when asked

    with pytest.raises(AgentError) as refused:
        await node(Flapping(clock=clock), A, clock, set()).claim("standup")
    assert (refused.value.status, refused.value.code) == (503, "room_moving") and refused.value.retry_after


# --- signed node-to-node requests ------------------------------------------------------------------------------

def signed_request(secret: str, *, at: float, node_id: str = "alpha", ip: str = "203.0.113.7",
                   path: str = "/v1/sessions?app=call", signed_path: str | None = None, method: str = "POST",
                   **changes: str) -> Any:
    """A request to ``path`` as a node forwards it, signed for ``signed_path`` (default: ``path``)."""
    headers = {FORWARDED_BY: node_id, FORWARDED_AT: str(int(at)), CLIENT_IP: ip,
               SIGNATURE: signature(secret, node_id, str(int(at)), method, signed_path or path, ip)}
    headers.update(changes)
    return make_mocked_request(method, path, headers=headers)


def test_a_signed_request_checks_and_names_its_node_and_client():
    link = NodeLink("beta", NODE_SECRET, 5.0, clock=lambda: 5000.0)
    assert link.verify(signed_request(NODE_SECRET, at=5000)) == ("alpha", "203.0.113.7")
    assert link.verify(signed_request(NODE_SECRET, at=4980)) == ("alpha", "203.0.113.7")  # clocks a little apart


@pytest.mark.parametrize("case", ["other secret", "stale", "future", "forged address", "other path", "no time",
                                  "no signature"])
def test_anything_but_a_fresh_signature_of_this_secret_is_refused(case: str):
    link = NodeLink("beta", NODE_SECRET, 5.0, clock=lambda: 5000.0)
    request = {
        "other secret": lambda: signed_request("another-secret-0123456789", at=5000),
        "stale": lambda: signed_request(NODE_SECRET, at=5000 - 31),
        "future": lambda: signed_request(NODE_SECRET, at=5000 + 31),
        "forged address": lambda: signed_request(NODE_SECRET, at=5000, **{CLIENT_IP: "198.51.100.1"}),
        "other path": lambda: signed_request(NODE_SECRET, at=5000, signed_path="/v1/sessions?app=echo"),
        "no time": lambda: signed_request(NODE_SECRET, at=5000, **{FORWARDED_AT: "soon"}),
        "no signature": lambda: signed_request(NODE_SECRET, at=5000, **{SIGNATURE: ""}),
    }[case]()
    with pytest.raises(NodeSignatureError) as refused:
        link.verify(request)
    assert refused.value.status == 403 and refused.value.code == "invalid_node_signature"
    assert NODE_SECRET not in refused.value.message


def test_a_node_without_a_secret_takes_no_forwarded_request():
    with pytest.raises(NodeSignatureError, match="no node_secret"):
        NodeLink("single", "", 5.0, clock=lambda: 5000.0).verify(signed_request(NODE_SECRET, at=5000))


# --- settings --------------------------------------------------------------------------------------------------

def replica(**changes: Any) -> Settings:
    return dataclasses.replace(Settings(), **changes)


@pytest.mark.parametrize(("changes", "message"), [
    ({"node_url": "http://10.0.0.1:8080"}, "node_url needs node_secret"),
    ({"node_url": "10.0.0.1:8080", "node_secret": NODE_SECRET}, "node_url must be"),
    ({"node_url": "http://10.0.0.1:8080/rtc", "node_secret": NODE_SECRET}, "node_url must be"),
    ({"node_url": "http://user:pw@10.0.0.1:8080", "node_secret": NODE_SECRET}, "node_url must be"),
    ({"node_secret": "short"}, "at least 16"),
    ({"room_lease_ttl_s": 0.5}, "room_lease_ttl_s"),
    ({"node_forward_timeout_s": 0}, "node_forward_timeout_s"),
    ({"node_id": "bad id!"}, "node_id"),
])
def test_replica_settings_that_cannot_work_are_refused(changes: dict[str, Any], message: str):
    with pytest.raises(SettingsError, match=message):
        validate(replica(**changes))


def test_replica_settings_that_work():
    validate(replica(node_url="http://10.0.0.1:8080", node_secret=NODE_SECRET, state_url="redis://r:6379/0"))
    assert node_id_of(replica(node_id="alpha")) == "alpha"
    derived = node_id_of(replica(node_url="http://10.0.0.1:8080"))
    assert derived.startswith("node-") and derived == node_id_of(replica(node_url="http://10.0.0.1:8080"))
    assert node_id_of(replica()) == "single"
    assert replica_warnings(replica(state_url="redis://r:6379/0"))[0].startswith("state_url is a shared Redis")
    assert replica_warnings(replica(state_url="redis://r:6379/0", node_url="http://10.0.0.1:8080")) == []
    assert replica_warnings(replica()) == []  # one node on its embedded store


def test_check_config_warns_of_a_redis_state_without_node_url_and_never_prints_the_secret():
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "RTC_AGENT_STATE_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run([sys.executable, "-m", "rtc_agent", "check-config"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0 and "warning: state_url is a shared Redis store but node_url is empty" in done.stderr
    env.update(RTC_AGENT_NODE_URL="http://127.0.0.1:8080", RTC_AGENT_NODE_SECRET=NODE_SECRET)
    done = subprocess.run([sys.executable, "-m", "rtc_agent", "check-config"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
    assert NODE_SECRET not in done.stdout + done.stderr
    help_text = subprocess.run([sys.executable, "-m", "rtc_agent", "serve", "--help"], cwd=REPO, capture_output=True,
                               text=True, timeout=120, env=env).stdout
    for flag in ("--node-url", "--node-secret", "--node-id", "--room-lease-ttl-s", "--node-forward-timeout-s"):
        assert flag in help_text
