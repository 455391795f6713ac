"""ICE servers and coturn-compatible TURN REST credentials."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import time

import aiohttp

from rtc_agent.config import Settings
from rtc_agent.server.ice import ice_servers, server_ice_servers, turn_rest_credentials


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
