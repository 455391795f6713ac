"""Authentication and authorisation through the real server: API keys, client tokens, session tokens, page sign-in,
the Origin/Host policy, rate limits, admission by load and the refusal to run open off loopback."""

from __future__ import annotations

import dataclasses
import time

import aiohttp
import pytest

from rtc_agent.auth import AUTH, ApiKeys, check_exposure, is_loopback_host
from rtc_agent.auth.origin import OriginPolicy
from rtc_agent.auth.rate_limit import RateLimiter
from rtc_agent.auth.tokens import TokenStore
from rtc_agent.config import Settings, SettingsError
from rtc_agent.rtc.client import ClientPeer, SessionRefused
from rtc_agent.rtc.sources import PcmSourceTrack
from rtc_agent.server.keys import ADMISSION
from tests.conftest import tone

KEY = "test-key-0123456789abcdef"
EVIL = {"Origin": "http://evil.example"}


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


async def _offer() -> tuple[object, str]:
    from aiortc import RTCPeerConnection

    pc = RTCPeerConnection()
    pc.createDataChannel("events")
    pc.addTransceiver("audio", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    return pc, pc.localDescription.sdp


# ------------------------------------------------------------------ units


def test_api_keys_are_hashed_and_matched():
    keys = ApiKeys([KEY, "another-key-0123456789"])
    assert keys.match(KEY) is not None and keys.match("another-key-0123456789") is not None
    assert keys.match(KEY + "x") is None and keys.match("") is None
    assert KEY not in repr(vars(keys))  # only digests are kept


async def test_client_tokens_are_single_use_and_expire():
    now = [time.time()]
    store = TokenStore(limit=3, clock=lambda: now[0])
    value, token = await store.mint("echo", {"delay_s": 0.5}, 60, client="ip:1")
    assert await store.peek(value) == token and await store.peek(value) == token  # peeking leaves it usable
    assert await store.consume(value) == token
    assert await store.consume(value) is None and await store.peek(value) is None
    old, token = await store.mint("echo", {}, 60, client="ip:1")
    now[0] += 61
    assert await store.peek(old) is None and await store.consume(old) is None
    await store.mint("echo", {}, 60, client="ip:1")
    await store.mint("echo", {}, 60, client="ip:1")
    await store.mint("echo", {}, 60, client="ip:1")  # the expired one is pruned to make room
    with pytest.raises(Exception, match="too many live tokens"):
        await store.mint("echo", {}, 60, client="ip:1")


async def test_rate_limiter_buckets_per_client():
    now = [0.0]
    limiter = RateLimiter(60, burst=2, clock=lambda: now[0])
    assert await limiter.take("a") is None and await limiter.take("a") is None
    wait = await limiter.take("a")
    assert wait is not None and 0.5 < wait <= 1.0
    assert await limiter.take("b") is None  # another client has its own bucket
    now[0] += 1.0
    assert await limiter.take("a") is None


def test_origin_and_host_policy():
    policy = OriginPolicy(dataclasses.replace(Settings(), host="127.0.0.1"))
    assert policy.host_allowed("127.0.0.1:8080") and policy.host_allowed("localhost:8080")
    assert policy.host_allowed("[::1]:8080")
    assert not policy.host_allowed("attacker.example") and not policy.host_allowed(None)
    assert policy.origin_allowed("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert policy.origin_allowed("http://localhost:3000", "127.0.0.1:8080")  # loopback origins
    assert not policy.origin_allowed("http://evil.example", "127.0.0.1:8080")
    assert not policy.origin_allowed("null", "127.0.0.1:8080")
    wide = OriginPolicy(dataclasses.replace(Settings(), host="0.0.0.0", allowed_hosts=["rtc.example.org"],
                                            allowed_origins=["https://app.example.org"]))
    assert wide.host_allowed("192.168.1.20:8080") and wide.host_allowed("rtc.example.org")
    assert not wide.host_allowed("rebind.attacker.example:8080")
    assert wide.origin_allowed("https://app.example.org", "rtc.example.org")
    assert wide.origin_allowed("https://rtc.example.org", "rtc.example.org")  # same origin


def test_open_mode_only_on_loopback():
    assert is_loopback_host("127.0.0.1") and is_loopback_host("::1") and is_loopback_host("localhost")
    assert not is_loopback_host("0.0.0.0") and not is_loopback_host("192.168.1.2")
    base = Settings()
    assert "open mode" in check_exposure(dataclasses.replace(base, host="127.0.0.1"))
    with pytest.raises(SettingsError, match="without API keys"):
        check_exposure(dataclasses.replace(base, host="0.0.0.0"))
    assert "INSECURE" in check_exposure(dataclasses.replace(base, host="0.0.0.0", insecure_open=True))
    assert "API keys required" in check_exposure(dataclasses.replace(base, host="0.0.0.0", api_keys=[KEY]))


def test_cli_refuses_to_serve_open_off_loopback(capsys):
    from rtc_agent.cli import main

    assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "without API keys" in capsys.readouterr().err


# ------------------------------------------------------------------ through the real server


async def test_a_stranger_cannot_touch_a_session(server):
    """The finding: with no credentials a third party listed sessions, read one, exported it and ended it."""
    async with ClientPeer(server.url, "captions", audio=PcmSourceTrack(tone(2.0), tail="silence")) as peer:
        await peer.wait_for("session.created")
        base = f"{server.url}/v1/sessions"
        async with aiohttp.ClientSession() as http:
            for headers in ({}, EVIL, bearer("st_wrong")):
                async with http.get(base, headers=headers) as r:
                    assert r.status in (401, 403), headers
                for method, url in (("GET", f"{base}/{peer.session_id}"),
                                    ("GET", f"{base}/{peer.session_id}/captions.vtt"),
                                    ("DELETE", f"{base}/{peer.session_id}"),
                                    ("PATCH", f"{base}/{peer.session_id}")):
                    async with http.request(method, url, headers=headers, json={"candidates": []}) as r:
                        body = await r.json()
                        assert r.status in (401, 403), (method, url, headers, body)
                        assert body["error"]["type"] in ("authentication_error", "permission_error")
            # The session's own token works; the session was never disturbed.
            async with http.get(f"{base}/{peer.session_id}", headers=peer.auth_headers) as r:
                info = await r.json()
                assert r.status == 200 and info["state"] == "connected"
            async with http.get(f"{base}/{peer.session_id}/captions.vtt", headers=peer.auth_headers) as r:
                assert r.status == 200
        assert peer.session_id in server.registry.active


async def test_foreign_origins_and_hosts_are_refused_before_any_work(server):
    pc, sdp = await _offer()
    async with aiohttp.ClientSession() as http:
        body = {"app": "echo", "sdp": sdp}
        async with http.post(f"{server.url}/v1/sessions", json=body, headers=EVIL) as r:
            assert r.status == 403 and (await r.json())["error"]["code"] == "origin_not_allowed"
        form = aiohttp.FormData()
        form.add_field("file", b"RIFF....", filename="x.wav", content_type="audio/wav")
        async with http.post(f"{server.url}/v1/translate/stream", data=form, headers=EVIL) as r:
            assert r.status == 403
        async with http.get(f"{server.url}/v1/ice-servers", headers={"Host": "attacker.example"}) as r:
            assert r.status == 403 and (await r.json())["error"]["code"] == "host_not_allowed"
        async with http.get(f"{server.url}/captions", headers={"Host": "attacker.example"}) as r:
            assert r.status == 403
        async with http.post(f"{server.url}/v1/sessions", json=body,
                             headers={"Origin": server.url}) as r:  # the page's own origin
            assert r.status == 201
            data = await r.json()
        async with http.delete(f"{server.url}/v1/sessions/{data['session_id']}",
                               headers=bearer(data["session_token"])) as r:
            assert r.status == 204
    assert not server.registry.active
    await pc.close()


async def test_cors_only_for_allowed_origins(start_server):
    server = await start_server(allowed_origins=["https://app.example.org"])
    async with aiohttp.ClientSession() as http:
        preflight = {"Origin": "https://app.example.org", "Access-Control-Request-Method": "POST"}
        async with http.options(f"{server.url}/v1/sessions", headers=preflight) as r:
            assert r.status == 204
            assert r.headers["Access-Control-Allow-Origin"] == "https://app.example.org"
            assert "Authorization" in r.headers["Access-Control-Allow-Headers"]
        async with http.get(f"{server.url}/v1/ice-servers", headers={"Origin": "https://app.example.org"}) as r:
            assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "https://app.example.org"
        async with http.options(f"{server.url}/v1/sessions", headers={**preflight, **EVIL}) as r:
            assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers


async def test_api_keys_client_tokens_and_session_tokens(start_server):
    server = await start_server(api_keys=[KEY], turn_urls=["turn:turn.example.org:3478"],
                                turn_secret="coturn-shared-secret")
    async with aiohttp.ClientSession() as http:
        pc, sdp = await _offer()
        async with http.post(f"{server.url}/v1/sessions", json={"app": "echo", "sdp": sdp}) as r:
            assert r.status == 401 and (await r.json())["error"]["code"] == "missing_credentials"
        async with http.post(f"{server.url}/v1/tokens", json={"app": "echo"}) as r:
            assert r.status == 401
        async with http.get(f"{server.url}/v1/ice-servers") as r:
            assert r.status == 401
        async with http.get(f"{server.url}/metrics") as r:
            assert r.status == 401
        async with http.get(f"{server.url}/health") as r:
            health = await r.text()
            assert r.status == 200 and KEY not in health
        # A client token, minted with the API key, fixes the app and part of the config.
        async with http.post(f"{server.url}/v1/tokens", json={"app": "echo", "config": {"delay_s": 0.5}},
                             headers=bearer(KEY)) as r:
            assert r.status == 201
            token = await r.json()
        assert token["value"].startswith("ct_") and token["app"] == "echo"
        assert token["config"] == {"delay_s": 0.5} and token["expires_at"] > time.time()
        async with http.get(f"{server.url}/v1/ice-servers", headers=bearer(token["value"])) as r:
            turn = next(s for s in (await r.json())["ice_servers"] if "username" in s)
        expiry, _, user = turn["username"].partition(":")
        assert int(expiry) > time.time() and user.startswith("sess_")
        async with http.post(f"{server.url}/v1/sessions", headers=bearer(token["value"]),
                             json={"app": "captions", "sdp": sdp}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "token_scope"
        await pc.close()
    pc, sdp = await _offer()
    async with aiohttp.ClientSession() as http:
        body = {"app": "echo", "sdp": sdp, "config": {"delay_s": 2.0}}
        async with http.post(f"{server.url}/v1/sessions", headers=bearer(token["value"]), json=body) as r:
            created = await r.json()
            assert r.status == 201, created
        assert created["session_id"] == user  # the TURN username named this session
        session = server.registry.get(created["session_id"])
        assert session.config["delay_s"] == 0.5  # the token's config wins
        async with http.post(f"{server.url}/v1/sessions", headers=bearer(token["value"]), json=body) as r:
            assert r.status == 401  # single use
        async with http.get(f"{server.url}/v1/sessions", headers=bearer(created["session_token"])) as r:
            assert r.status == 401  # a session token is not an API key
        async with http.get(f"{server.url}/v1/sessions", headers=bearer(KEY)) as r:
            listed = await r.json()
            assert r.status == 200 and [s["session_id"] for s in listed["sessions"]] == [created["session_id"]]
        async with http.delete(f"{server.url}/v1/sessions/{created['session_id']}", headers=bearer(KEY)) as r:
            assert r.status == 204
    await pc.close()
    # ClientPeer with a client token end to end.
    async with aiohttp.ClientSession() as http, http.post(
            f"{server.url}/v1/tokens", json={"app": "echo"}, headers=bearer(KEY)) as r:
        value = (await r.json())["value"]
    async with ClientPeer(server.url, "echo", credential=value) as peer:
        await peer.wait_for("session.created")
        assert (await peer.session_info())["state"] == "connected"
    with pytest.raises(SessionRefused) as refused:
        async with ClientPeer(server.url, "echo", credential=value):
            pass
    assert refused.value.status == 401


async def test_page_sign_in_with_a_cookie(start_server):
    server = await start_server(api_keys=[KEY])
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as http:
        async with http.get(f"{server.url}/captions") as r:
            page = await r.text()
            assert 'action="/login"' in page and '"required": true' in page
        async with http.post(f"{server.url}/login", data={"key": "wrong", "next": "/captions"},
                             allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/captions?signin=failed"
        async with http.post(f"{server.url}/login", data={"key": KEY, "next": "https://evil.example/"},
                             headers=EVIL, allow_redirects=False) as r:
            assert r.status == 403  # a foreign page cannot sign a visitor in
        async with http.post(f"{server.url}/login", data={"key": KEY, "next": "//evil.example/x"},
                             allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/"  # no open redirect
            cookie = r.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and KEY not in cookie
        async with http.get(f"{server.url}/captions") as r:
            assert 'action="/login"' not in await r.text()
        async with http.post(f"{server.url}/v1/tokens", json={"app": "captions"}) as r:
            assert r.status == 201
        async with http.post(f"{server.url}/v1/tokens", json={"app": "captions"}, headers=EVIL) as r:
            assert r.status == 403
        async with http.post(f"{server.url}/logout", allow_redirects=False) as r:
            assert r.status == 303
        async with http.post(f"{server.url}/v1/tokens", json={"app": "captions"}) as r:
            assert r.status == 401


async def test_session_creation_is_rate_limited_per_client(start_server):
    server = await start_server(rate_sessions_per_minute=2)
    limiter = server.app[AUTH].limits["sessions"]
    limiter.burst = 2.0
    statuses = []
    async with aiohttp.ClientSession() as http:
        for _ in range(3):
            async with http.post(f"{server.url}/v1/sessions", json={"app": "echo", "sdp": "v=0"}) as r:
                statuses.append(r.status)
                retry = r.headers.get("Retry-After")
    assert statuses[:2] == [400, 400] and statuses[2] == 429  # bad offers still spend the budget
    assert retry is not None and int(retry) >= 1


async def test_admission_refuses_sessions_when_the_loop_is_late(start_server):
    server = await start_server(admission_max_loop_lag_ms=300.0)
    admission = server.app[ADMISSION]
    lag = admission.lag_monitor
    lag.reset()
    for _ in range(60):
        lag.record(0.8)
    admission.check()  # no session is running: nobody to protect, so a slow start refuses nobody
    async with ClientPeer(server.url, "echo") as running:
        await running.wait_for("session.created")
        for _ in range(60):
            lag.record(0.8)
        async with aiohttp.ClientSession() as http, http.post(f"{server.url}/v1/sessions",
                                                              json={"app": "echo", "sdp": "v=0"}) as r:
            body = await r.json()
            assert r.status == 503 and body["error"]["code"] == "server_busy"
            assert int(r.headers["Retry-After"]) >= 1
    lag.reset()
    assert admission.refused == 1


async def test_admission_refuses_sessions_when_an_engine_queue_is_behind(start_server):
    server = await start_server(admission_max_queue_delay_ms=1000.0)
    admission = server.app[ADMISSION]
    admission.running = lambda: 1
    admission.worker = type("BusyWorker", (), {"recent_queue_delays_ms": lambda self, s: {"asr": 4200.0}})()
    async with aiohttp.ClientSession() as http, http.post(f"{server.url}/v1/sessions",
                                                          json={"app": "echo", "sdp": "v=0"}) as r:
        body = await r.json()
    assert r.status == 503 and "engine asr queue" in body["error"]["message"]


async def test_bad_json_bodies_get_400_not_500(server):
    deep = b"[" * 50000 + b"]" * 50000
    big = b'{"app": "echo", "sdp": "v=0", "x": ' + b"9" * 100000 + b"}"
    async with aiohttp.ClientSession() as http:
        for body in (deep, big):
            async with http.post(f"{server.url}/v1/sessions", data=body,
                                 headers={"Content-Type": "application/json"}) as r:
                assert r.status in (400, 413), await r.text()
        async with http.post(f"{server.url}/v1/tokens", data=b"[" * 3000,
                             headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "invalid_json"
        async with http.get(f"{server.url}/health") as r:
            assert r.status == 200
