"""Trust at the request's edge (issue 23): which origins the sign-in cookie is good for, bodies that must arrive in
time, and sessions that look alike to anyone without their token.

- Only the server's own origin (scheme, host and port) and ``allowed_origins`` are trusted with the page cookie
  and get credentialed CORS. Another loopback origin (a page on ``http://localhost:9999``: SameSite does not
  separate ports) may still call the API with a bearer credential (the cookie riding along is ignored), but a
  request of its that only the cookie would authorise, or a sign-in, gets 403 ``origin_not_allowed``.
- A JSON, SDP or form body (``POST /login`` included) not all read within ``request_read_timeout_s`` gets 408
  ``request_timeout``.
- ``/v1/sessions/{id}`` and its exports answer a request without a valid credential with the same 401 whether the
  session exists or not; an API key still gets 404 for an unknown id.
"""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp
import pytest

from rtc_agent.auth.origin import OriginPolicy
from rtc_agent.config import Settings
from rtc_agent.rtc.client import ClientPeer
from tests.conftest import free_port
from tests.test_auth import bearer

KEY = "origin-key-0123456789abcdef"


def policy(**settings: object) -> OriginPolicy:
    return OriginPolicy(dataclasses.replace(Settings(), host="127.0.0.1", **settings))


# ------------------------------------------------------------------ units


def test_the_own_origin_is_scheme_host_and_port():
    p = policy()
    assert p.is_same_origin("http://127.0.0.1:8080", "127.0.0.1:8080", "http")
    assert p.is_same_origin("http://127.0.0.1", "127.0.0.1:80", "http")  # default ports
    assert p.is_same_origin("http://[::1]:8080", "[::1]:8080", "http")
    assert not p.is_same_origin("http://127.0.0.1:9999", "127.0.0.1:8080", "http")  # another port
    assert not p.is_same_origin("http://localhost:8080", "127.0.0.1:8080", "http")  # another host name
    assert not p.is_same_origin("http://127.0.0.1:8443", "127.0.0.1:8443", "https")  # another scheme
    # a TLS-terminating proxy in front: the page is https, the request reaches the server over plain HTTP
    assert p.is_same_origin("https://rtc.example.org", "rtc.example.org", "http")
    assert not p.is_same_origin("https://rtc.example.org:8443", "rtc.example.org", "http")
    for odd in ("null", "http://127.0.0.1:99999", "ftp://127.0.0.1:8080", "http://127.0.0.1:8080/path", ""):
        assert not p.is_same_origin(odd, "127.0.0.1:8080", "http"), odd
    assert not p.is_same_origin("http://127.0.0.1:8080", None, "http")


def test_only_the_own_and_named_origins_are_trusted_with_the_cookie():
    p = policy(allowed_origins=["https://app.example.org/"])
    host = "127.0.0.1:8080"
    assert p.trusted("http://127.0.0.1:8080", host) and p.trusted("https://app.example.org", host)
    assert not p.trusted("http://localhost:9999", host) and not p.trusted("http://127.0.0.1:9999", host)
    assert p.origin_allowed("http://localhost:9999", host)  # loopback pages may still use a bearer credential
    assert not p.origin_allowed("http://evil.example", host) and not p.origin_allowed("null", host)
    anyone = policy(allowed_origins=["*"])
    assert anyone.origin_allowed("http://evil.example", host) and not anyone.trusted("http://evil.example", host)


# ------------------------------------------------------------------ the cookie and CORS through the real server


async def test_a_cookie_from_another_loopback_port_is_refused(start_server):
    server = await start_server(api_keys=[KEY], allowed_origins=["https://app.example.org"])
    port = server.url.rsplit(":", 1)[1]
    tokens = f"{server.url}/v1/tokens"
    other_port = f"http://127.0.0.1:{free_port()}"
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.post(f"{server.url}/login", data={"key": KEY, "next": "/"}, headers={"Origin": other_port},
                             allow_redirects=False) as r:
            assert r.status == 403 and (await r.json())["error"]["code"] == "origin_not_allowed"
            assert "Set-Cookie" not in r.headers
        async with http.post(f"{server.url}/login", data={"key": KEY, "next": "/"}, allow_redirects=False) as r:
            assert r.status == 303  # signed in, from no page at all (the form's own origin sends one too)
        for origin in (other_port, f"http://localhost:{port}", "http://localhost:9999"):
            async with http.post(tokens, json={"app": "echo"}, headers={"Origin": origin}) as r:
                body = await r.json()
                assert (r.status, body["error"]["code"]) == (403, "origin_not_allowed"), (origin, body)
                assert "Access-Control-Allow-Credentials" not in r.headers
        foreign = {"Origin": other_port}
        async with http.post(tokens, json={"app": "echo"}, headers={**foreign, **bearer("not-a-key")}) as r:
            assert r.status == 401  # with a bearer the cookie is ignored, not used in its place
        async with http.post(tokens, json={"app": "echo"}, headers={**foreign, **bearer(KEY)}) as r:
            assert r.status == 201  # a loopback page's own credential works while the cookie rides along
        async with http.post(tokens, json={"app": "echo"}, headers={"Sec-Fetch-Site": "same-site"}) as r:
            assert r.status == 401  # no Origin, but the browser says another site sent it: the cookie is ignored
        async with http.post(tokens, json={"app": "echo"}, headers={"Origin": server.url}) as r:
            assert r.status == 201 and "Access-Control-Allow-Origin" not in r.headers  # its own page
        async with http.post(tokens, json={"app": "echo"}, headers={"Origin": "https://app.example.org"}) as r:
            assert r.status == 201 and r.headers["Access-Control-Allow-Credentials"] == "true"  # a named origin
    async with aiohttp.ClientSession() as http:  # no cookie: a loopback page with a key of its own
        async with http.post(tokens, json={"app": "echo"}, headers={"Origin": other_port, **bearer(KEY)}) as r:
            assert r.status == 201
            assert r.headers["Access-Control-Allow-Origin"] == other_port
            assert "Access-Control-Allow-Credentials" not in r.headers
        preflight = {"Origin": other_port, "Access-Control-Request-Method": "POST"}
        async with http.options(tokens, headers=preflight) as r:
            assert r.status == 204 and r.headers["Access-Control-Allow-Origin"] == other_port
            assert "Access-Control-Allow-Credentials" not in r.headers
        async with http.options(tokens, headers={**preflight, "Origin": "https://app.example.org"}) as r:
            assert r.status == 204 and r.headers["Access-Control-Allow-Credentials"] == "true"


# ------------------------------------------------------------------ bodies that never arrive


@pytest.mark.parametrize(("path", "content_type"), [
    ("/login", "application/x-www-form-urlencoded"),
    ("/v1/tokens", "application/json"),
    ("/v1/sessions", "application/json"),
], ids=["login", "tokens", "sessions"])
async def test_a_slow_body_gets_408(start_server, path, content_type):
    server = await start_server(request_read_timeout_s=0.3)
    port = int(server.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n"
                     "Content-Length: 200\r\n\r\nkey=".encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)  # never sending the rest
        assert head.startswith(b"HTTP/1.1 408"), head
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(
            b"content-length")))
        body = await asyncio.wait_for(reader.readexactly(length), 10)
        assert b'"request_timeout"' in body, body
    finally:
        writer.close()
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/health") as r:
        assert r.status == 200


# ------------------------------------------------------------------ sessions look alike without their token


async def test_unknown_and_existing_sessions_answer_the_same_401(start_server):
    server = await start_server(api_keys=[KEY])
    async with ClientPeer(server.url, "echo", credential=KEY) as peer:
        await peer.wait_for("session.created")
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{server.url}/v1/tokens", json={"app": "echo"}, headers=bearer(KEY)) as r:
                client_token = (await r.json())["value"]

            async def answer(method: str, session_id: str, suffix: str, headers: dict[str, str]) -> tuple:
                url = f"{server.url}/v1/sessions/{session_id}{suffix}"
                async with http.request(method, url, headers=headers, json={"candidates": []}) as r:
                    return r.status, await r.json()

            routes = [("GET", ""), ("PATCH", ""), ("DELETE", ""), ("GET", "/captions.vtt")]
            for headers in ({}, bearer("st_wrong"), bearer(client_token), bearer(peer.session_token)):
                for method, suffix in routes:
                    unknown = await answer(method, "sess_0123456789abcdef", suffix, headers)
                    assert unknown[0] == 401, (method, suffix, headers, unknown)
                    if headers.get("Authorization", "").endswith(peer.session_token):
                        continue  # the session's own token is valid for its session only
                    existing = await answer(method, peer.session_id, suffix, headers)
                    assert existing == unknown, (method, suffix, headers)
            assert (await answer("GET", "sess_0123456789abcdef", "", bearer(KEY)))[0] == 404  # a key may know
            status, info = await answer("GET", peer.session_id, "", bearer(KEY))
            assert status == 200 and info["state"] == "connected"
        assert peer.session_id in server.registry.active
