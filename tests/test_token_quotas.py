"""Token quotas per minting credential (issue 23, item 3): one API key, join link or sign-in cannot fill the token
store for everyone. Past ``max_tokens_per_credential`` live entries a credential gets 429 ``token_quota_exceeded``
with ``Retry-After`` while other credentials still mint; a join link is one credential however many addresses use
it; expired entries are swept in the background; ``/metrics`` shows how full the store is."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import aiohttp
import pytest

from rtc_agent.auth import AUTH, AccessControl
from rtc_agent.auth.access import client_network
from rtc_agent.auth.tokens import TokenStore
from rtc_agent.config import Settings
from rtc_agent.errors import AgentError, RateLimited
from rtc_agent.state import MemoryStore
from tests.test_auth import bearer

KEY, OTHER_KEY = "quota-key-0123456789abcdef", "quota-other-key-0123456789"
IPS = [f"127.0.0.{i}" for i in range(2, 19)]  # 17 source addresses, all on loopback


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------ units


async def test_a_credential_past_its_quota_gets_429_while_others_mint():
    clock = Clock()
    store = TokenStore(limit=100, per_client=2, clock=clock)
    first, _ = await store.mint("echo", {}, 60, client="key:a")
    await store.mint("echo", {}, 120, client="key:a")
    with pytest.raises(RateLimited) as refused:
        await store.mint("echo", {}, 60, client="key:a")
    assert refused.value.code == "token_quota_exceeded" and refused.value.status == 429
    assert refused.value.retry_after == 60  # when its first token expires
    with pytest.raises(RateLimited):
        await store.sign_in(60, client="key:a")  # sign-ins count in the same quota
    await store.mint("echo", {}, 60, client="key:b")  # another credential is not affected
    await store.sign_in(60, client="net:10.0.0.0/24")
    assert await store.consume(first) is not None  # a used token frees its place
    await store.mint("echo", {}, 60, client="key:a")
    clock.now += 61  # the first of a's remaining tokens expires: its place is free again
    await store.mint("echo", {}, 60, client="key:a")
    assert await store.most_held() == 2
    for _ in range(3):  # a mint that names no credential counts in the store's bound only
        await store.mint("room_join", {}, 60, client="", prefix="rj_")
    assert await store.most_held() == 2


async def test_the_quota_never_exceeds_the_store_and_the_store_still_fills():
    assert TokenStore(limit=3, per_client=500).per_client == 3
    store = TokenStore(limit=3, per_client=2)
    await store.mint("echo", {}, 60, client="a")
    await store.mint("echo", {}, 60, client="b")
    await store.mint("echo", {}, 60, client="c")
    with pytest.raises(AgentError) as full:
        await store.mint("echo", {}, 60, client="d")
    assert (full.value.status, full.value.code) == (503, "too_many_tokens")


async def test_sweep_drops_expired_entries_and_counts_by_kind():
    clock = Clock()
    store = TokenStore(limit=100, per_client=100, clock=clock)
    await store.mint("echo", {}, 10, client="key:a")
    await store.mint("echo", {}, 100, client="key:a")
    await store.mint("realtime", {}, 10, client="key:a", prefix="ek_")
    await store.mint("room_join", {"room": "r"}, 100, client="key:a", prefix="rj_")
    cookie = await store.sign_in(10, client="net:127.0.0.0/24")
    assert await store.live_counts() == {"client_token": 2, "client_secret": 1, "room_link": 1, "sign_in": 1}
    clock.now += 11
    assert await store.live_counts() == {"client_token": 1, "client_secret": 0, "room_link": 1, "sign_in": 0}
    assert await store.count() == 2  # expired entries are gone for every read, swept or not
    assert await store.sweep() >= 3 and await store.count() == 2 and await store.most_held() == 2
    assert not await store.signed_in(cookie)


async def test_the_sweeper_runs_until_cancelled():
    clock = Clock()
    store = MemoryStore(clock=clock)
    control = AccessControl(Settings(), store=store)
    control.sweep_interval_s = 0.01
    for _ in range(3):
        await control.tokens.mint("echo", {}, 60, client="key:a")
    clock.now += 61
    task = asyncio.create_task(control.sweep_forever())
    try:
        for _ in range(500):
            if not store._values:
                break
            await asyncio.sleep(0.01)
        assert not store._values and not store._leases  # swept: their space is free
        assert await control.tokens.count() == 0
    finally:
        task.cancel()


def test_networks_name_a_slash_24_or_a_slash_64():
    assert client_network("203.0.113.77") == "net:203.0.113.0/24"
    assert client_network("2001:db8:1:2:3:4:5:6") == "net:2001:db8:1:2::/64"
    assert client_network("unknown") == "net:unknown"


# ------------------------------------------------------------------ through the real server


async def post(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None,
               **body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
    async with http.post(url, json=body, headers=headers or {}) as resp:
        return resp.status, await resp.json(content_type=None), dict(resp.headers)


async def test_one_key_at_its_quota_gets_429_while_another_key_and_a_sign_in_still_mint(start_server):
    server = await start_server(api_keys=[KEY, OTHER_KEY], max_tokens_per_credential=3)
    tokens = f"{server.url}/v1/tokens"
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        for _ in range(3):
            status, body, _ = await post(http, tokens, bearer(KEY), app="echo")
            assert status == 201, body
        status, body, headers = await post(http, tokens, bearer(KEY), app="echo")
        assert (status, body["error"]["code"]) == (429, "token_quota_exceeded"), body
        assert int(headers["Retry-After"]) >= 1
        status, body, _ = await post(http, f"{server.url}/v1/realtime/client_secrets", bearer(KEY))
        assert (status, body["error"]["code"]) == (429, "token_quota_exceeded"), body
        status, body, _ = await post(http, tokens, bearer(OTHER_KEY), app="echo")
        assert status == 201, body
        async with http.post(f"{server.url}/login", data={"key": KEY, "next": "/"}, allow_redirects=False) as r:
            assert r.status == 303 and "rtc_agent_page" in r.headers.get("Set-Cookie", "")
        status, body, _ = await post(http, tokens, app="echo")  # the page, by its sign-in cookie
        assert status == 201, body
        async with http.get(f"{server.url}/health") as r:
            assert r.status == 200 and KEY not in await r.text()


async def mint_from(ip: str, url: str, headers: dict[str, str], **body: Any) -> tuple[int, str]:
    """POST from the source address ``ip``: (status, error code or "")."""
    connector = aiohttp.TCPConnector(local_addr=(ip, 0))
    async with aiohttp.ClientSession(connector=connector) as http:
        status, data, _ = await post(http, url, headers, **body)
        return status, (data.get("error") or {}).get("code", "")


@pytest.mark.parametrize(("limits", "refusal"), [
    ({"max_tokens_per_credential": 5}, "token_quota_exceeded"),
    ({"rate_tokens_per_minute": 10}, "rate_limited"),  # a burst of 5
], ids=["quota", "rate"])
async def test_seventeen_addresses_get_no_more_from_one_join_link_than_one(start_server, limits, refusal):
    server = await start_server(**limits)
    tokens = f"{server.url}/v1/tokens"
    async with aiohttp.ClientSession() as http:
        status, room, _ = await post(http, f"{server.url}/v1/rooms", room="quota-room")
        assert status == 201, room
    link = bearer(room["join_token"])
    results = await asyncio.gather(*(mint_from(ip, tokens, link, app="call", config={"name": f"p{i}"})
                                     for i, ip in enumerate(IPS)))
    assert sum(status == 201 for status, _ in results) == 5, results
    assert sorted(set(results) - {(201, "")}) == [(429, refusal)], results
    # the same addresses without the link are 17 clients (open mode: one budget per address)
    results = await asyncio.gather(*(mint_from(ip, tokens, {}, app="echo") for ip in IPS))
    assert all(status == 201 for status, _ in results), results


def gauges(text: str) -> dict[str, float]:
    found = re.findall(r'^(rtc_agent_tokens_[a-z_]+(?:\{kind="[a-z_]+"\})?) (\S+)$', text, re.MULTILINE)
    return {name: float(value) for name, value in found}


async def test_metrics_show_how_full_the_token_store_is(start_server):
    server = await start_server(max_client_tokens=50, max_tokens_per_credential=40)
    async with aiohttp.ClientSession() as http:
        values = []
        for _ in range(2):
            status, body, _ = await post(http, f"{server.url}/v1/tokens", app="echo")
            assert status == 201, body
            values.append(body["value"])
        status, body, _ = await post(http, f"{server.url}/v1/realtime/client_secrets")
        assert status == 200, body
        values.append(body["value"])
        status, body, _ = await post(http, f"{server.url}/v1/rooms")
        assert status == 201, body
        values.append(body["join_token"])
        async with http.get(f"{server.url}/metrics") as r:
            text = await r.text()
            assert r.status == 200
    found = gauges(text)
    assert found['rtc_agent_tokens_live{kind="client_token"}'] == 2
    assert found['rtc_agent_tokens_live{kind="client_secret"}'] == 1
    assert found['rtc_agent_tokens_live{kind="room_link"}'] == 1
    assert found['rtc_agent_tokens_live{kind="sign_in"}'] == 0
    assert found["rtc_agent_tokens_limit"] == 50 and found["rtc_agent_tokens_per_credential_limit"] == 40
    assert found["rtc_agent_tokens_most_held"] >= 3  # this address: two tokens and a client secret
    assert not [v for v in values if v in text]


async def test_the_sweeper_starts_and_stops_with_the_server(start_server):
    def sweepers() -> list[asyncio.Task]:
        return [t for t in asyncio.all_tasks() if t.get_name() == "token-sweep" and not t.done()]

    server = await start_server()
    assert len(sweepers()) == 1
    assert isinstance(server.app[AUTH], AccessControl)
    await server.runner.cleanup()
    assert not sweepers()


def test_settings_keep_the_quota_safe_by_default():
    settings = dataclasses.replace(Settings(), max_client_tokens=100)
    assert AccessControl(settings).tokens.per_client == 100  # min(max_tokens_per_credential, max_client_tokens)
    assert AccessControl(Settings()).tokens.per_client == Settings().max_tokens_per_credential
