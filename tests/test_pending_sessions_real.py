"""Pending sessions through the real server (issue 23): aiohttp clients bound to other loopback addresses (all of
127/8 is routed to lo), real aiortc offers and peers.

- Offers that never connect (real aiortc offers without candidates whose answers are never used, so ICE never
  completes) from rotating addresses, each in a /24 of its own, at about 5/s, while legitimate peers connect:
  every legitimate attempt succeeds and its session stays up; the pending pool and the hard ceiling hold.
- Offers from many addresses of one /24 hit the per-network cap (429); another /24 still gets in.
- A malformed offer with a client token gets 400 and leaves the token valid, as does an offer refused for
  capacity; the same token then creates a session, once.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import pytest

from rtc_agent.rtc.client import ClientPeer, SessionRefused
from tests.test_session_hardening import client_offer, wait_until
from tests.test_trust_edges import KEY, bearer, mint


def from_address(address: str) -> aiohttp.ClientSession:
    """An HTTP client whose connections come from ``address`` (a loopback address other than 127.0.0.1)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0)))


async def post_offer(server: Any, sdp: str, *, address: str, headers: dict[str, str] | None = None
                     ) -> tuple[int, dict[str, Any], dict[str, str]]:
    async with from_address(address) as http, http.post(f"{server.url}/v1/sessions", json={"app": "echo", "sdp": sdp},
                                                        headers=headers or {}) as resp:
        return resp.status, await resp.json(), dict(resp.headers)


async def test_offers_that_never_connect_do_not_keep_legitimate_peers_out(start_server):
    server = await start_server(max_sessions=4, max_pending_sessions=8, connect_grace_s=1.0, connect_timeout_s=30.0)
    registry = server.registry
    attacker, junk = await client_offer(strip_candidates=True)  # its answers are never applied
    peak = {"pending": 0, "objects": 0}

    async def watch() -> None:
        while True:
            peak["pending"] = max(peak["pending"], len(registry.pending()))
            peak["objects"] = max(peak["objects"], len(registry.active))
            await asyncio.sleep(0.01)

    async def attack() -> list[int]:
        async with asyncio.TaskGroup() as group:
            posts = []
            for i in range(20):  # 4 s at 5/s, every address in a /24 of its own
                posts.append(group.create_task(post_offer(server, junk, address=f"127.{10 + i}.0.1")))
                await asyncio.sleep(0.2)
        return [post.result()[0] for post in posts]

    async def legitimate(i: int) -> ClientPeer:
        await asyncio.sleep(1.0 + i)  # the first one once the pool is about full
        peer = ClientPeer(server.url, "echo", http=from_address(f"127.{200 + i}.0.1"))
        try:
            await peer.connect()
        except BaseException:
            await peer.close(delete=False)
            await peer.http.close()
            raise
        return peer

    watcher = asyncio.ensure_future(watch())
    legit = [asyncio.ensure_future(legitimate(i)) for i in range(3)]
    try:
        statuses = await attack()
        peers = await asyncio.gather(*legit)  # each would raise SessionRefused on a refusal
        assert set(statuses) <= {201, 503} and statuses.count(201) >= 10, statuses
        assert registry.evicted >= 5
        ended = [s for s in registry.recent.values() if s.id not in {p.session_id for p in peers}]
        assert ended and all(s.close_reason == "connect_timeout" for s in ended)
        for peer in peers:  # still up, and still answering
            session = registry.get(peer.session_id)
            assert (session.state, session.close_reason) == ("connected", None)
            peer.send({"type": "ping", "client_ts": 1})
            await peer.wait_for("pong")
        assert peak["pending"] <= 8 and peak["objects"] <= registry.hard_ceiling == 4 + 8
    finally:
        watcher.cancel()
        for task in legit:
            if not task.done():
                task.cancel()
            elif not task.cancelled() and task.exception() is None:
                await task.result().close()
                await task.result().http.close()
        await attacker.close()


async def test_many_addresses_of_one_network_hit_the_per_network_cap(start_server):
    server = await start_server(max_pending_sessions_per_network=3, connect_timeout_s=30.0)
    client, sdp = await client_offer(strip_candidates=True)
    try:
        for i in range(1, 4):  # one each: under the per-client cap
            status, body, _ = await post_offer(server, sdp, address=f"127.77.0.{i}")
            assert status == 201, body
        status, body, headers = await post_offer(server, sdp, address="127.77.0.4")
        assert (status, body["error"]["code"]) == (429, "too_many_pending_sessions")
        assert "network" in body["error"]["message"] and int(headers["Retry-After"]) >= 1
        status, body, _ = await post_offer(server, sdp, address="127.78.0.1")
        assert status == 201, body
    finally:
        await client.close()


async def test_a_client_token_is_spent_only_by_a_valid_admitted_offer(start_server):
    server = await start_server(api_keys=[KEY], max_sessions=1)
    client, sdp = await client_offer()
    no_ice = "\r\n".join(ln for ln in sdp.splitlines() if not ln.startswith("a=ice-")) + "\r\n"
    async with aiohttp.ClientSession() as http:
        token = await mint(http, server.url, "echo")
    try:
        for bad in ("v=0\r\nblah\r\n", no_ice):  # the second passes the structure check, aiortc would refuse it
            status, body, _ = await post_offer(server, bad, address="127.0.0.1", headers=bearer(token))
            assert (status, body["error"]["code"]) == (400, "invalid_sdp"), body
        async with ClientPeer(server.url, "echo", credential=KEY):  # the one slot taken
            status, body, _ = await post_offer(server, sdp, address="127.0.0.1", headers=bearer(token))
            assert (status, body["error"]["code"]) == (503, "too_many_sessions"), body
        await wait_until(lambda: not server.registry.active)
        async with ClientPeer(server.url, "echo", credential=token) as peer:
            await peer.wait_for("session.created")
            again = ClientPeer(server.url, "echo", credential=token)
            with pytest.raises(SessionRefused) as refused:
                await again.connect()
            assert refused.value.status == 401
            with contextlib.suppress(Exception):
                await again.close(delete=False)
    finally:
        await client.close()
