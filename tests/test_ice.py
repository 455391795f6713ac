"""ICE servers and coturn-compatible TURN REST credentials."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import time

import aiohttp

from rtc_agent.config import Settings
from rtc_agent.server.ice import ice_servers, ice_servers_response, server_ice_servers, turn_rest_credentials


def test_turn_rest_credentials_match_coturn():
    username, credential = turn_rest_credentials("north", 3600, "alice", now=1_700_000_000)
    assert username == "1700003600:alice"
    expected = base64.b64encode(hmac.new(b"north", b"1700003600:alice", hashlib.sha1).digest()).decode()
    assert credential == expected


def test_no_ice_servers_by_default():
    assert ice_servers(Settings()) == [] and server_ice_servers(Settings()) == []


def test_static_turn_credentials():
    s = dataclasses.replace(Settings(), turn_urls=["turn:t:3478"], turn_username="u", turn_credential="p")
    assert ice_servers(s) == [{"urls": ["turn:t:3478"], "username": "u", "credential": "p"}]


async def test_ice_servers_route(start_server):
    server = await start_server(stun_urls=["stun:s:3478"], turn_urls=["turn:t:3478?transport=udp"],
                                turn_secret="s3cret", turn_ttl_s=600)
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/v1/ice-servers") as resp:
        data = await resp.json()
    stun, turn = data["ice_servers"]
    assert stun == {"urls": ["stun:s:3478"]}
    expiry, user = turn["username"].split(":")
    assert abs(int(expiry) - (time.time() + 600)) < 5 and user
    assert turn["credential"] == base64.b64encode(
        hmac.new(b"s3cret", turn["username"].encode(), hashlib.sha1).digest()).decode()
    assert data["ttl_s"] == 600 and data["ice_transport_policy"] == "all"


def test_response_states_ttl_expiry_and_refresh_point():
    s = dataclasses.replace(Settings(), turn_urls=["turn:t:3478"], turn_secret="k", turn_ttl_s=60)
    body = ice_servers_response(s, user="sess_1", now=1_700_000_000)
    assert body["ttl_s"] == 60 and body["expires_at"] == 1_700_000_060 and body["refresh_after_s"] == 48
    assert body["ice_servers"][0]["username"] == "1700000060:sess_1"
    for static in (Settings(), dataclasses.replace(Settings(), turn_urls=["turn:t:3478"], turn_username="u",
                                                   turn_credential="p")):
        body = ice_servers_response(static)
        assert body["ttl_s"] is None and body["expires_at"] is None and body["refresh_after_s"] is None


async def test_session_refreshes_its_credentials_with_its_own_token(start_server):
    """``GET /v1/sessions/{id}/ice-servers``: fresh credentials naming the session, for its token only."""
    from aiortc import RTCPeerConnection

    server = await start_server(turn_urls=["turn:t:3478?transport=udp"], turn_secret="s3cret", turn_ttl_s=60)
    pc = RTCPeerConnection()
    try:
        pc.createDataChannel("events")
        await pc.setLocalDescription(await pc.createOffer())
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{server.url}/v1/sessions",
                                 json={"app": "echo", "sdp": pc.localDescription.sdp}) as resp:
                created = await resp.json()
            route = f"{server.url}/v1/sessions/{created['session_id']}/ice-servers"
            bodies = []
            for _ in range(2):
                async with http.get(route, headers={"Authorization": f"Bearer {created['session_token']}"}) as r:
                    assert r.status == 200
                    bodies.append(await r.json())
                await asyncio.sleep(1.05)  # a later expiry second
            for body in bodies:
                (turn,) = body["ice_servers"]
                expiry, user = turn["username"].split(":")
                assert user == created["session_id"] and int(expiry) == body["expires_at"]
                assert abs(body["expires_at"] - (time.time() + 60)) < 5 and body["refresh_after_s"] == 48
                assert "s3cret" not in str(body)
            assert bodies[1]["expires_at"] > bodies[0]["expires_at"]
            for headers in ({}, {"Authorization": "Bearer not-this-sessions-token"}):
                async with http.get(route, headers=headers) as r:
                    assert r.status == 401
            async with http.get(f"{server.url}/v1/sessions/sess_unknown/ice-servers",
                                headers={"Authorization": f"Bearer {created['session_token']}"}) as r:
                assert r.status == 401
    finally:
        await pc.close()
