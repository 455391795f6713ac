"""TURN for real, without a browser: a coturn on loopback (tests/coturn.py) with use-auth-secret, and aiortc peers
that get their ICE servers from rtc_agent.server.ice, the server's own peers' code path (server_ice_servers).

- Two relay-only aiortc peers reach each other through the relay with the minted credentials.
- coturn refuses credentials past their TTL: no relay candidate is gathered with them.
- A relay-only client reaches a real server session (the echo app) whose peer got its ICE servers from settings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import aiohttp
import pytest
from aiortc import RTCConfiguration, RTCIceServer, RTCIceTransportPolicy, RTCPeerConnection, RTCSessionDescription

from rtc_agent.config import Settings
from rtc_agent.server.ice import server_ice_servers, turn_rest_credentials
from tests.coturn import requires_coturn, run_coturn

pytestmark = requires_coturn


def relay_only(servers: list[RTCIceServer]) -> RTCPeerConnection:
    return RTCPeerConnection(RTCConfiguration(iceServers=servers, iceTransportPolicy=RTCIceTransportPolicy.RELAY))


def candidate_types(sdp: str) -> list[str]:
    return [line.split(" typ ")[1].split()[0] for line in sdp.splitlines()
            if line.startswith("a=candidate:") and " typ " in line]


def turn_settings(turn, **overrides) -> Settings:
    return dataclasses.replace(Settings(), turn_urls=[turn.url], turn_secret=turn.secret, **overrides)


async def exchange(offerer: RTCPeerConnection, answerer: RTCPeerConnection) -> tuple[str, str]:
    await offerer.setLocalDescription(await offerer.createOffer())  # aiortc gathers every candidate here
    await answerer.setRemoteDescription(offerer.localDescription)
    await answerer.setLocalDescription(await answerer.createAnswer())
    await offerer.setRemoteDescription(answerer.localDescription)
    return offerer.localDescription.sdp, answerer.localDescription.sdp


async def test_two_relay_only_peers_talk_through_coturn(tmp_path) -> None:
    with run_coturn(tmp_path) as turn:
        settings = turn_settings(turn)
        a, b = relay_only(server_ice_servers(settings)), relay_only(server_ice_servers(settings, user="sess_b"))
        try:
            channel = a.createDataChannel("events")
            got: asyncio.Queue[str] = asyncio.Queue(maxsize=4)

            @b.on("datachannel")
            def on_channel(remote) -> None:
                remote.on("message", lambda m: remote.send(f"pong:{m}"))

            channel.on("message", lambda m: got.put_nowait(m))
            opened = asyncio.Event()
            channel.on("open", opened.set)
            offer_sdp, answer_sdp = await exchange(a, b)
            for sdp in (offer_sdp, answer_sdp):
                types = candidate_types(sdp)
                assert types and set(types) == {"relay"}, (types, turn.log_text())
            await asyncio.wait_for(opened.wait(), 20)
            for n in range(3):
                channel.send(f"ping{n}")
                assert await asyncio.wait_for(got.get(), 10) == f"pong:ping{n}"
        finally:
            await a.close()
            await b.close()
    log = turn.log_text()
    assert "sess_b" in log, "coturn saw the session-named username"


@pytest.mark.parametrize("age_s", [0, 120])
async def test_coturn_refuses_credentials_past_their_ttl(tmp_path, age_s: int) -> None:
    """Minted ``age_s`` seconds ago with a 60 s TTL: fresh ones open a relay, expired ones do not."""
    with run_coturn(tmp_path) as turn:
        username, credential = turn_rest_credentials(turn.secret, 60, "sess_old", now=time.time() - age_s)
        pc = relay_only([RTCIceServer(urls=[turn.url], username=username, credential=credential)])
        try:
            pc.createDataChannel("events")
            await pc.setLocalDescription(await pc.createOffer())
            types = candidate_types(pc.localDescription.sdp)
        finally:
            await pc.close()
    if age_s < 60:
        assert types == ["relay"], turn.log_text()
    else:
        assert types == [], turn.log_text()


async def test_relay_only_client_reaches_a_server_session(tmp_path, start_server) -> None:
    """The server's own peer gets settings' TURN servers (its relay candidates are in the answer), and a
    relay-only client connects to it: the session's data channel opens and answers a ping."""
    with run_coturn(tmp_path) as turn:
        # the relay sits on 127.0.0.1 here: the server must accept loopback candidates (a deployment's is public)
        server = await start_server(turn_urls=[turn.url], turn_secret=turn.secret, ice_allow_loopback_candidates=True)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{server.url}/v1/ice-servers") as resp:
                body = await resp.json()
            servers = [RTCIceServer(urls=s["urls"], username=s.get("username"), credential=s.get("credential"))
                       for s in body["ice_servers"]]
            pc = relay_only(servers)
            try:
                channel = pc.createDataChannel("events")
                pc.addTransceiver("audio", direction="recvonly")
                opened = asyncio.Event()
                channel.on("open", opened.set)
                await pc.setLocalDescription(await pc.createOffer())
                assert set(candidate_types(pc.localDescription.sdp)) == {"relay"}, turn.log_text()
                async with http.post(f"{server.url}/v1/sessions",
                                     json={"app": "echo", "sdp": pc.localDescription.sdp}) as resp:
                    assert resp.status == 201, await resp.text()
                    answer = await resp.json()
                assert "relay" in candidate_types(answer["sdp"]), answer["sdp"]
                await pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type="answer"))
                await asyncio.wait_for(opened.wait(), 20)
                assert pc.connectionState == "connected"  # with relay candidates only: through coturn
            finally:
                await pc.close()
