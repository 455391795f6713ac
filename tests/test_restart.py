"""What survives a restart (issue 24): a real server on the embedded SQLite state store issues a page sign-in, a
room join link and a client token, is stopped, and a new server on the same store honours them; two servers on one
Redis store share sign-ins, single use and rate budgets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from tests.test_auth import KEY, bearer
from tests.test_state_store import redis_url  # noqa: F401  (the Redis server fixture)
from tests.test_trust_edges import upload

COOKIE = "rtc_agent_page"


async def _login(http: aiohttp.ClientSession, url: str) -> str:
    async with http.post(f"{url}/login", data={"key": KEY, "next": "/captions"}, allow_redirects=False) as r:
        assert r.status == 303 and r.headers["Location"] == "/captions"
        return r.cookies[COOKIE].value


async def _post(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None,
                **body: Any) -> tuple[int, dict[str, Any]]:
    async with http.post(url, json=body, headers=headers or {}) as r:
        return r.status, await r.json(content_type=None)


async def test_sign_ins_join_links_and_tokens_outlive_a_restart(start_server, tmp_path: Path):
    state = {"state_url": f"sqlite:///{tmp_path}/state.db", "api_keys": [KEY]}
    first = await start_server(**state)
    async with aiohttp.ClientSession() as http:
        cookie = await _login(http, first.url)
        status, room = await _post(http, f"{first.url}/v1/rooms", bearer(KEY), room="standup")
        assert status == 201, room
        status, token = await _post(http, f"{first.url}/v1/tokens", bearer(KEY), app="echo")
        assert status == 201, token
        status, used = await _post(http, f"{first.url}/v1/tokens", bearer(KEY), app="echo")
        assert status == 201, used
        async with http.post(f"{first.url}/v1/sessions", headers=bearer(used["value"]),
                             json={"sdp": "v=0"}) as r:
            assert r.status == 400  # a malformed offer: the token is still live
    await first.runner.cleanup()  # the server stops; its store is closed

    second = await start_server(**state)
    page = {"Cookie": f"{COOKIE}={cookie}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{second.url}/captions", headers=page) as r:
            assert r.status == 200 and 'action="/login"' not in await r.text()  # still signed in
        status, body = await _post(http, f"{second.url}/v1/tokens", page, app="echo")  # the page mints
        assert status == 201, body
        async with http.get(f"{second.url}/v1/ice-servers", headers=bearer(token["value"])) as r:
            assert r.status == 200  # the client token minted before the restart
        link = bearer(room["join_token"])
        status, body = await _post(http, f"{second.url}/v1/tokens", link, app="call", config={"name": "ana"})
        # the link is still a valid credential, and its meeting (in memory, gone with the old process) is made
        # current again under its own id: the link admits to the room as before
        assert status == 201, body
        async with http.post(f"{second.url}/logout", headers=page, allow_redirects=False) as r:
            assert r.status == 303
        status, body = await _post(http, f"{second.url}/v1/tokens", page, app="echo")
        assert (status, body["error"]["code"]) == (401, "invalid_credentials"), body  # signed out for good
    await second.runner.cleanup()

    third = await start_server(**state)
    async with aiohttp.ClientSession() as http:
        status, body = await _post(http, f"{third.url}/v1/tokens", page, app="echo")
        assert (status, body["error"]["code"]) == (401, "invalid_credentials"), body  # the sign-out survived too
        bogus = await _post(http, f"{third.url}/v1/tokens", bearer("rj_" + "x" * 43), app="call")
        assert bogus[0] == 401


async def test_two_servers_on_one_redis_share_sign_ins_single_use_and_budgets(start_server, redis_url):  # noqa: F811
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    await client.flushdb()
    await client.aclose()
    shared = {"state_url": redis_url, "api_keys": [KEY], "rate_tokens_per_minute": 6}
    a, b = await start_server(**shared), await start_server(**shared)
    async with aiohttp.ClientSession() as http:
        cookie = await _login(http, a.url)
        page = {"Cookie": f"{COOKIE}={cookie}"}
        status, token = await _post(http, f"{b.url}/v1/tokens", page, app="echo")  # signed in on a, minted on b
        assert status == 201, token
        results = []
        for server in (a, b, a, b, a):  # the page's address has one budget of 5 (a burst), whichever server
            results.append((await _post(http, f"{server.url}/v1/tokens", page, app="echo"))[0])
        assert results[:4] == [201] * 4 and results[4] == 429, results
        status, minted = await _post(http, f"{a.url}/v1/tokens", bearer(KEY), app="interpret")
        assert status == 201, minted
        interpret = minted["value"]  # single use across servers: used on b, gone on a
        status, body, _ = await upload(http, b.url, bearer(interpret))
        assert status not in (401, 403), body  # past the access check (the junk file itself is refused)
        status, body, _ = await upload(http, a.url, bearer(interpret))
        assert (status, body["error"]["code"]) == (401, "invalid_credentials"), body
        async with http.get(f"{b.url}/health") as r:
            assert r.status == 200 and "state-test-password" not in await r.text()
