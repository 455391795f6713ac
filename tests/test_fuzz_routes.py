"""Every route's body, malformed (issue 23): no answer is a 5xx and no error body carries a traceback.

The routes are read from the running server's router, so a new route is fuzzed without a change here. Each one
gets, with a valid API key and without: an empty body, garbage bytes, deep JSON nesting, JSON of the wrong shape
and encoding, a body over ``max_body_bytes``, wrong content types and ``multipart/form-data`` variants (no, empty,
over-long or ill-charactered boundary; garbage; truncated at every kind of place; missing, nameless, duplicated,
nested and too many parts; over-long part headers). Every GET route also gets malformed WebSocket upgrades. The
set is built from a fixed seed, so a run is repeatable; the server's log must not hold an unhandled error.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from rtc_agent.rtc.client import ClientPeer
from tests.background_server import FUZZ_SETTINGS
from tests.test_fuzz_http import KEY, check_answer, error_code

MAX_BODY = 16 * 1024
SEED = 23
SDP = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"
TRACEBACK = re.compile(rb"Traceback \(most recent call last\)|File \"[^\"]+\.py\", line \d+")
Body = tuple[str, str | None, bytes]  # (what, content type or None for none, body)


def form(boundary: str, parts: list[tuple[str, bytes]], *, end: bool = True) -> bytes:
    """A ``multipart/form-data`` body: ``parts`` as (header lines, data)."""
    out = b"".join(b"--" + boundary.encode() + b"\r\n" + headers.encode() + b"\r\n\r\n" + data + b"\r\n"
                   for headers, data in parts)
    return out + (b"--" + boundary.encode() + b"--\r\n" if end else b"")


def named(name: str, extra: str = "") -> str:
    return f'Content-Disposition: form-data; name="{name}"' + extra


def multipart_bodies(rng: random.Random) -> Iterator[Body]:
    """Malformed (and a few merely odd) ``multipart/form-data`` bodies, each with its content type."""
    mp = "multipart/form-data"
    call = form("b0und", [(named("sdp"), SDP.encode()), (named("session"), b'{"type": "realtime"}')])
    upload = form("b0und", [(named("file", '; filename="a.wav"'), b"RIFF" + rng.randbytes(200)),
                            (named("direction"), b"es-en")])
    good = call[:-len(b"--b0und--\r\n")] + upload
    yield "no boundary", mp, good
    yield "empty boundary", mp + "; boundary=", good
    yield "empty quoted boundary", mp + '; boundary=""', good
    yield "71-char boundary", mp + "; boundary=" + "a" * 71, form("a" * 71, [(named("sdp"), b"x")])
    yield "300-char boundary", mp + "; boundary=" + "b" * 300, form("b" * 300, [(named("sdp"), b"x")])
    yield "boundary with odd characters", mp + '; boundary="a\\"b{}"', good
    yield "garbage", mp + "; boundary=b0und", rng.randbytes(700)
    yield "garbage after a boundary", mp + "; boundary=b0und", b"--b0und\r\n" + rng.randbytes(500)
    for kind, whole in (("call", call), ("upload", upload)):  # cut inside the headers, the data, the boundaries
        for cut in sorted({*rng.sample(range(1, len(whole) - 16), 5), 9, 12, len(whole) - 16}):
            yield f"{kind} form truncated at {cut}", mp + "; boundary=b0und", whole[:cut]
    yield "no closing boundary", mp + "; boundary=b0und", form("b0und", [(named("sdp"), SDP.encode())], end=False)
    yield "no parts", mp + "; boundary=b0und", b"--b0und--\r\n"
    yield "empty body", mp + "; boundary=b0und", b""
    yield "only the file", mp + "; boundary=b0und", form("b0und", [(named("file"), b"")])
    yield "only a session", mp + "; boundary=b0und", form("b0und", [(named("session"), b"{}")])
    yield "duplicated parts", mp + "; boundary=b0und", form("b0und", [(named("sdp"), SDP.encode())] * 2
                                                            + [(named("file"), b"RIFF")] * 2)
    yield "nameless part", mp + "; boundary=b0und", form("b0und", [("Content-Type: text/plain", b"hi")])
    yield "no headers", mp + "; boundary=b0und", form("b0und", [("", b"hi")])
    yield "malformed header", mp + "; boundary=b0und", form("b0und", [("Content-Disposition form-data", b"x")])
    yield "header over 8 kB", mp + "; boundary=b0und", form("b0und", [(named("sdp", "; x=" + "y" * 9000), b"x")])
    yield "200 headers", mp + "; boundary=b0und", form("b0und", [(named("sdp") + "\r\nX-A: b" * 200, b"x")])
    yield "60 parts", mp + "; boundary=b0und", form("b0und", [(named(f"p{i}"), b"v") for i in range(60)])
    yield "nested multipart", mp + "; boundary=b0und", form("b0und", [(
        named("sdp") + "\r\nContent-Type: multipart/mixed; boundary=inner", form("inner", [(named("x"), b"y")]))])
    yield "long _charset_", mp + "; boundary=b0und", form("b0und", [(named("_charset_"), b"u" * 64),
                                                                    (named("sdp"), b"x")])
    yield "base64 garbage", mp + "; boundary=b0und", form("b0und", [(
        named("sdp") + "\r\nContent-Transfer-Encoding: base64", b"!!!*")])
    yield "gzip garbage", mp + "; boundary=b0und", form("b0und", [(
        named("session") + "\r\nContent-Encoding: gzip", rng.randbytes(40))])
    yield "bad charset", mp + "; boundary=b0und", form("b0und", [(
        named("session") + "\r\nContent-Type: text/plain; charset=nope", b"{}")])
    yield "non-UTF-8 fields", mp + "; boundary=b0und", form("b0und", [(named("sdp"), b"\xff\xfe"),
                                                                      (named("direction"), b"\xc3")])
    yield "session not JSON", mp + "; boundary=b0und", form("b0und", [(named("sdp"), SDP.encode()),
                                                                      (named("session"), b"{nope")])
    yield "deep session", mp + "; boundary=b0und", form("b0und", [(named("sdp"), SDP.encode()),
                                                                  (named("session"), b"[" * 5000 + b"]" * 5000)])
    yield "form over the limit", mp + "; boundary=b0und", form("b0und", [(named("sdp"), b"v" * (MAX_BODY + 10))])
    yield "long preamble", mp + "; boundary=b0und", b"junk line\r\n" * 40000 + good
    yield "multipart/mixed", "multipart/mixed; boundary=b0und", good


def bodies(rng: random.Random) -> list[Body]:
    """Every malformed body of the run, in a fixed order."""
    plain: list[Body] = [
        ("empty", None, b""), ("empty JSON", "application/json", b""),
        ("garbage", None, rng.randbytes(64)), ("garbage JSON", "application/json", rng.randbytes(600)),
        ("garbage SDP", "application/sdp", rng.randbytes(300)),
        ("deep array", "application/json", b"[" * 60000 + b"]" * 60000),
        ("deep object", "application/json", b'{"a":' * 3000 + b"1" + b"}" * 3000),
        ("huge number", "application/json", b'{"n": ' + b"9" * 50000 + b"}"),
        ("JSON array", "application/json", b"[]"), ("JSON string", "application/json", b'"x"'),
        ("JSON null", "application/json", b"null"),
        ("wrong fields", "application/json", json.dumps({"sdp": 1, "app": [], "config": "x", "candidates": {},
                                                         "session": 5, "expires_after": []}).encode()),
        ("UTF-16 JSON", "application/json; charset=utf-16", '{"app": "echo"}'.encode("utf-16")),
        ("non-UTF-8 JSON", "application/json", b'{"app": "\xff"}'),
        ("over max_body_bytes", "application/json", b" " * (MAX_BODY + 100)),
        ("form-urlencoded", "application/x-www-form-urlencoded", b"key=%ff&next=%0d%0a&" + b"a=b&" * 50),
        ("text", "text/plain", b"hello"), ("octets", "application/octet-stream", rng.randbytes(100)),
        ("odd content type", "x/y; ;;=;", b"{}"), ("trickle fragment", "application/trickle-ice-sdpfrag",
                                                   b"a=candidate:x\r\n" + rng.randbytes(80)),
    ]
    return plain + list(multipart_bodies(rng))


#: bodies both form routes must refuse as ``invalid_multipart`` (whatever parts they expect)
MALFORMED = frozenset({"no boundary", "empty boundary", "empty quoted boundary", "71-char boundary",
                       "300-char boundary", "boundary with odd characters", "garbage", "garbage after a boundary",
                       "empty body", "nameless part", "no headers", "malformed header", "header over 8 kB",
                       "200 headers", "nested multipart", "long _charset_"})

UPGRADES: list[tuple[str, dict[str, str]]] = [
    ("no key", {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13"}),
    ("bad key", {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                 "Sec-WebSocket-Key": "not base64 !"}),
    ("bad version", {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "99",
                     "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}),
    ("no Connection", {"Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                       "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}),
    ("odd subprotocols", {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                          "Sec-WebSocket-Protocol": "openai-insecure-api-key., ,realtime,;;",
                          "Sec-WebSocket-Key": "short"}),
    ("other upgrade", {"Upgrade": "h2c, websocket2", "Connection": "Upgrade, HTTP2-Settings"}),
]


def concrete(canonical: str, session_id: str, method: str) -> str:
    """A path for a route pattern: the live session where one fits (a bogus one for DELETE, which would end
    it), plausible values elsewhere."""
    values = {"session_id": session_id if method != "DELETE" else "sess_0123456789abcdef", "fmt": "json",
              "room": "fuzzroom", "call_id": "rtc_0123456789abcdef"}
    path = re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "x"), canonical)
    return path + "/x.css" if canonical == "/static" else path


def check(method: str, path: str, status: int, headers: Any, body: bytes, what: str) -> None:
    """No 5xx, a JSON error under /v1/ (the HTTP fuzz's checks) and no traceback anywhere."""
    check_answer({"method": method, "path": path, "what": what}, status, dict(headers), body)
    assert not TRACEBACK.search(body), (method, path, what, status, body[:400])


@pytest.fixture
async def live(start_server: Any) -> Any:
    server = await start_server(api_keys=[KEY], max_body_bytes=MAX_BODY, max_sessions=4, **FUZZ_SETTINGS,
                                upload_read_timeout_s=2.0, upload_deadline_s=5.0, request_read_timeout_s=5.0)
    peer = ClientPeer(server.url, "echo", credential=KEY)
    await peer.connect()
    try:
        yield server, peer
    finally:
        await peer.close()


async def test_every_route_answers_malformed_bodies_with_a_4xx(live: Any, caplog: pytest.LogCaptureFixture) -> None:
    server, peer = live
    rng = random.Random(SEED)
    cases = bodies(rng)
    routes = sorted({(r.method, r.resource.canonical) for r in server.app.router.routes()
                     if r.resource is not None and r.method != "*"})
    assert ("POST", "/v1/realtime/calls") in routes and ("POST", "/v1/translate/stream") in routes
    seen: dict[str, int] = {}  # "status code" -> count
    answers: dict[tuple[str, str], str] = {}  # (path, body) -> "status code", with the key
    caplog.set_level(logging.ERROR)
    async with aiohttp.ClientSession() as http:
        async def send(method: str, path: str, headers: dict[str, str], body: bytes | None, what: str) -> None:
            async with http.request(method, server.url + path, headers=headers, data=body, allow_redirects=False,
                                    skip_auto_headers=["Content-Type"]) as res:
                answer = await res.read()
            check(method, path, res.status, res.headers, answer, what)
            key = f"{res.status} {error_code(answer)}"
            seen[key] = seen.get(key, 0) + 1
            if headers.get("Authorization"):
                answers[(path, what)] = key

        for method, canonical in routes:
            path = concrete(canonical, str(peer.session_id), method)
            takes_body = method not in ("GET", "HEAD")
            for keyed in (True, False):
                auth = {"Authorization": f"Bearer {KEY}"} if keyed else {}
                # without a key most routes refuse before the body: a sample of it is enough there
                sample = cases if takes_body and keyed else rng.sample(cases, 4 if takes_body else 2)
                for what, content_type, body in sample:
                    headers = {**auth, **({"Content-Type": content_type} if content_type else {})}
                    await send(method, path, headers, body, what)
                if method == "GET":
                    for what, upgrade in UPGRADES:
                        await send(method, path, {**auth, **upgrade}, None, "upgrade: " + what)

        async def preamble() -> Any:  # 440 kB of lines before any boundary, chunked (no Content-Length)
            for _ in range(40):
                yield b"junk line\r\n" * 1000

        async with http.post(server.url + "/v1/realtime/calls", data=preamble(), headers={
                "Authorization": f"Bearer {KEY}", "Content-Type": "multipart/form-data; boundary=b0und"}) as res:
            check("POST", "/v1/realtime/calls", res.status, res.headers, await res.read(), "chunked preamble")
            assert res.status in (400, 413)  # no starting boundary, or over the form's size
    unhandled = [r.getMessage() for r in caplog.records if "unhandled" in r.getMessage()]
    assert not unhandled, unhandled
    assert sum(seen.values()) > 500, seen
    for path, kind in (("/v1/realtime/calls", "call"), ("/v1/translate/stream", "upload")):  # the form readers
        wrong = {what: got for (where, what), got in answers.items() if where == path and (
            what in MALFORMED or what.startswith(f"{kind} form truncated")) and got != "400 invalid_multipart"}
        assert not wrong, (path, wrong)
    assert server.registry.get(str(peer.session_id)).state == "connected"  # the fuzz ended nothing it should not

