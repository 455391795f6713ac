"""OpenAI Realtime client secrets and authorization: ``client.realtime.client_secrets.create`` gives an ``ek_`` key
that opens exactly one connection and expires; wrong, expired, used or missing keys get 401 with OpenAI's error
shape; browsers may send the key as a WebSocket subprotocol; open mode (no keys, loopback) takes any key but
still checks ``ek_`` secrets."""

from __future__ import annotations

import logging
import time

import aiohttp
import openai
import pytest
from websockets.exceptions import InvalidStatus

from rtc_agent.auth import AUTH
from tests.realtime_helpers import Events, client

KEY = "rk-test-0123456789abcdef"
SESSION = {"type": "realtime", "instructions": "You are a pirate.", "output_modalities": ["text"]}


async def refused(server, **headers: str) -> tuple[int, dict]:
    """Try to open /v1/realtime with ``headers``; the status and JSON body of the refusal."""
    async with aiohttp.ClientSession() as http, http.get(
            server.url + "/v1/realtime?model=gpt-realtime",
            headers={"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                     "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", **headers}) as res:
        return res.status, await res.json()


def assert_openai_error(body: dict, code: str | None = None) -> None:
    error = body["error"]
    assert set(error) >= {"type", "code", "message", "param"}, body
    assert error["type"] == "authentication_error"
    if code is not None:
        assert error["code"] == code


async def test_client_secret_opens_exactly_one_connection_and_expires(start_server):
    server = await start_server(api_keys=[KEY])
    api = client(server, api_key=KEY)
    secret = await api.realtime.client_secrets.create(session=SESSION,
                                                      expires_after={"anchor": "created_at", "seconds": 120})
    assert secret.value.startswith("ek_")
    assert abs(secret.expires_at - (time.time() + 120)) < 5
    assert secret.session.type == "realtime" and secret.session.instructions == "You are a pirate."

    async with client(server, api_key=secret.value).realtime.connect(model="gpt-realtime") as conn:
        events = Events(conn)
        created = await events.wait_for("session.created")
        assert created["session"]["id"] == secret.session.id
        assert created["session"]["instructions"] == "You are a pirate."
        assert created["session"]["output_modalities"] == ["text"]
        await events.close()

    with pytest.raises(InvalidStatus) as info:  # used up
        async with client(server, api_key=secret.value).realtime.connect(model="gpt-realtime"):
            pass
    assert info.value.response.status_code == 401
    status, body = await refused(server, Authorization=f"Bearer {secret.value}")
    assert status == 401
    assert_openai_error(body, "invalid_credentials")

    short = await api.realtime.client_secrets.create(expires_after={"anchor": "created_at", "seconds": 10})
    tokens = server.app[AUTH].tokens
    real_clock = tokens.store.clock
    tokens.store.clock = lambda: real_clock() + 11  # ten seconds later, without waiting for them
    status, body = await refused(server, Authorization=f"Bearer {short.value}")
    assert status == 401
    assert_openai_error(body, "invalid_credentials")


async def test_wrong_and_missing_keys_get_openai_shaped_401s(start_server):
    server = await start_server(api_keys=[KEY])
    with pytest.raises(openai.AuthenticationError) as info:
        await client(server, api_key="rk-wrong-key-0000000000").realtime.client_secrets.create()
    assert info.value.status_code == 401
    status, body = await refused(server, Authorization="Bearer rk-wrong-key-0000000000")
    assert status == 401
    assert_openai_error(body, "invalid_credentials")
    status, body = await refused(server)
    assert status == 401
    assert_openai_error(body, "missing_credentials")
    async with aiohttp.ClientSession() as http, http.post(server.url + "/v1/realtime/calls", data="v=0\r\n",
                                                          headers={"Content-Type": "application/sdp"}) as res:
        assert res.status == 401
        assert_openai_error(await res.json(), "missing_credentials")
    with pytest.raises(openai.BadRequestError) as bad:
        await client(server, api_key=KEY).realtime.client_secrets.create(
            session={"type": "realtime", "audio": {"input": {"format": {"type": "audio/wav"}}}})
    assert bad.value.status_code == 400
    assert bad.value.body["param"] == "session.audio.input.format.type"


async def test_a_browser_sends_the_key_as_a_websocket_subprotocol(start_server):
    server = await start_server(api_keys=[KEY])
    secret = await client(server, api_key=KEY).realtime.client_secrets.create(session=SESSION)
    url = server.url.replace("http", "ws") + "/v1/realtime?model=gpt-realtime"
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url, protocols=("realtime", f"openai-insecure-api-key.{secret.value}")) as ws:
            assert ws.protocol == "realtime"
            first = await ws.receive_json(timeout=10)
            assert first["type"] == "session.created" and first["session"]["id"] == secret.session.id
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:  # the secret is used up
            await http.ws_connect(url, protocols=("realtime", f"openai-insecure-api-key.{secret.value}"))
        assert info.value.status == 401


async def test_open_mode_takes_any_key_but_checks_client_secrets(start_server, caplog):
    caplog.set_level(logging.INFO, logger="rtc_agent")
    server = await start_server()
    assert any("any API key is accepted" in r.getMessage() for r in caplog.records)
    async with client(server, api_key="sk-anything-at-all").realtime.connect(model="gpt-realtime") as conn:
        events = Events(conn)
        await events.wait_for("session.created")
        await events.close()
    secret = await client(server).realtime.client_secrets.create()
    async with client(server, api_key=secret.value).realtime.connect(model="gpt-realtime") as conn:
        events = Events(conn)
        await events.wait_for("session.created")
        await events.close()
    for value in (secret.value, "ek_made_up_value"):
        status, body = await refused(server, Authorization=f"Bearer {value}")
        assert status == 401, value
        assert_openai_error(body, "invalid_credentials")
