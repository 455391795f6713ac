"""Fuzzing the HTTP routes (issue 11, item 9): random methods, paths, headers, query strings and bodies (JSON of
random shapes, deep nesting, huge numbers, random bytes, forms, wrong content types) against the real server.

Every answer is below 500; under ``/v1/`` an error is the JSON ``{"error": {type, code, message}}``; the server
stays healthy and no session slot stays taken. Raw bytes straight onto the socket get a 4xx or a closed
connection. Examples are derandomized (no example database), so a run is repeatable.
"""

from __future__ import annotations

import asyncio
import io
import json
import wave
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from aiortc import RTCPeerConnection
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rtc_agent.apps.agent.config import DEFAULTS as AGENT_DEFAULTS
from rtc_agent.apps.captions.app import CaptionsApp
from rtc_agent.apps.interpret.config import CONFIG_KEYS as INTERPRET_KEYS
from rtc_agent.apps.vision_commentary import COMMENTARY_DEFAULTS
from rtc_agent.engines.asr.openai import multipart
from rtc_agent.rtc.client import ClientPeer
from tests.background_server import OTHER_THREADS_USE_RANDOM, BackgroundServer

KEY = "fuzz-key-0123456789abcdef"
MAX_BODY = 16 * 1024
TRICKLE = "application/trickle-ice-sdpfrag"
pytestmark = OTHER_THREADS_USE_RANDOM
FUZZ = settings(database=None, derandomize=True, deadline=None, max_examples=300,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Live:
    """The module's server, with one connected echo session (its token lets examples reach PATCH/GET) and a real
    aiortc offer (so some session creations get as far as the app's config check)."""

    def __init__(self, srv: BackgroundServer, peer: ClientPeer, offer: str) -> None:
        self.srv, self.peer, self.offer = srv, peer, offer


async def _live_parts(srv: BackgroundServer) -> tuple[ClientPeer, str, RTCPeerConnection]:
    peer = ClientPeer(srv.url, "echo", credential=KEY)
    await peer.connect()
    pc = RTCPeerConnection()
    pc.createDataChannel("events")
    pc.addTransceiver("audio", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    return peer, pc.localDescription.sdp, pc


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with BackgroundServer(api_keys=[KEY], max_body_bytes=MAX_BODY, max_sessions=4,
                          st_max_upload_seconds=2.0, upload_read_timeout_s=2.0, upload_deadline_s=5.0) as srv:
        peer, offer, pc = srv.run(_live_parts(srv))
        try:
            yield Live(srv, peer, offer)
        finally:
            srv.run(peer.close())
            srv.run(pc.close())
            assert srv.no_sessions(), "a session outlived its DELETE"


# --- strategies ------------------------------------------------------------------------------------------------

text = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF, exclude_categories=("Cs",)), max_size=24)
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(-10**80, 10**80) | text
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=16,
)
APPS = st.sampled_from(["echo", "captions", "agent", "interpret", "call", "", "ECHO"]) | json_values
CONFIG_KEYS = ["language", "delay_s", "instructions", "tools", "voice", "direction", "source_language",
               "target_language", "chunk_ms", "vision", "barge_in", "task", "speak", "filler", "model",
               "source_text", "language_prior"]
configs = st.dictionaries(st.sampled_from(CONFIG_KEYS) | text, json_values, max_size=4) | json_values
candidates = st.fixed_dictionaries({}, optional={
    "candidate": st.sampled_from(["candidate:1 1 udp 2130706431 192.0.2.7 50000 typ host",
                                  "candidate:1 1 udp 1 999.1.1.1 99999 typ host", "candidate:x", ""]) | text,
    "sdpMid": json_values, "sdpMLineIndex": json_values, "usernameFragment": json_values})


def structured(offer: str) -> st.SearchStrategy[Any]:
    """JSON objects shaped like the routes' own bodies, fields random."""
    return st.one_of(
        st.fixed_dictionaries({}, optional={"app": APPS, "sdp": st.just(offer) | json_values,
                                            "type": st.sampled_from(["offer", "answer"]) | json_values,
                                            "config": configs}),
        st.fixed_dictionaries({}, optional={"app": APPS, "config": configs, "ttl_s": json_values}),
        st.fixed_dictionaries({}, optional={"candidates": st.lists(candidates, max_size=30) | json_values,
                                            "end_of_candidates": json_values}),
    )


def bodies(offer: str) -> st.SearchStrategy[tuple[str, bytes]]:
    """``(kind, body)``: the content type is chosen separately, so JSON also arrives with the wrong one."""
    deep = st.integers(1, 60000).map(lambda n: ("deep", b"[" * n + b"]" * n))
    deep_object = st.integers(1, 3000).map(lambda n: ("deep", b'{"a":' * n + b"1" + b"}" * n))
    huge_number = st.integers(1, 100000).map(lambda n: ("number", b'{"app": "echo", "n": ' + b"9" * n + b"}"))
    form = st.dictionaries(st.sampled_from(["key", "next", "direction", "file", "source_language"]) | text,
                           text, max_size=3).map(lambda d: ("form", urlencode(d).encode()))
    return st.one_of(
        st.just(("empty", b"")),
        json_values.map(lambda v: ("json", json.dumps(v).encode())),
        structured(offer).map(lambda v: ("json", json.dumps(v).encode())),
        deep, deep_object, huge_number, form,
        st.binary(max_size=600).map(lambda b: ("bytes", b)),
        st.integers(MAX_BODY - 2, MAX_BODY + 4000).map(lambda n: ("big", b" " * n)),
        st.sampled_from([offer.encode(), offer.encode()[:300], b"v=0\r\n"]).map(lambda b: ("sdp", b)),
    )


CONTENT_TYPES = st.sampled_from([
    None, "application/json", "application/sdp", "application/trickle-ice-sdpfrag", "text/plain",
    "application/x-www-form-urlencoded", "multipart/form-data", "multipart/form-data; boundary=zz",
    "application/json; charset=latin-1", "application/octet-stream",
]) | header_text


def mostly(usual: Any, *others: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` in about four draws of five, else one of ``others``."""
    rest = st.one_of(*others)
    return st.sampled_from([True, True, True, True, False]).flatmap(lambda pick: st.just(usual) if pick else rest)


ROUTES = [("POST", "/v1/sessions"), ("POST", "/v1/sessions"), ("POST", "/v1/sessions"), ("GET", "/v1/sessions"),
          ("GET", "/v1/sessions/{id}"), ("PATCH", "/v1/sessions/{id}"), ("PATCH", "/v1/sessions/{id}"),
          ("DELETE", "/v1/sessions/{id}"), ("GET", "/v1/sessions/{id}/captions.vtt"),
          ("GET", "/v1/sessions/{id}/captions.json"), ("POST", "/v1/tokens"), ("POST", "/v1/tokens"),
          ("GET", "/v1/ice-servers"), ("POST", "/v1/translate/stream"), ("POST", "/v1/translate/stream"),
          ("POST", "/login"), ("POST", "/logout"), ("GET", "/health"), ("GET", "/metrics"), ("GET", "/"),
          ("POST", "/v1/realtime/calls"), ("POST", "/v1/realtime/client_secrets"),
          ("POST", "/v1/realtime/calls/{id}/hangup"), ("GET", "/v1/realtime")]
METHODS = ["GET", "POST", "PATCH", "DELETE", "PUT", "HEAD", "OPTIONS"]


def routes(session_id: str) -> st.SearchStrategy[tuple[str, str]]:
    """``(method, path)``: mostly a real route (the session id mostly the live one), else anything."""
    ids = mostly(session_id, st.sampled_from(["sess_0123456789abcdef", "", "..", "%00", "sess_" + "a" * 300])
                 | text.map(lambda t: quote(t, safe="")))
    known = st.tuples(st.sampled_from(ROUTES), ids).map(lambda r: (r[0][0], r[0][1].replace("{id}", r[1])))
    weird = st.tuples(st.sampled_from(METHODS), st.sampled_from([p for _, p in ROUTES]) | st.text(
        st.sampled_from("/v1sesion%.:_-?#abc"), max_size=30).map(lambda t: "/" + t))
    return mostly(None, weird).flatmap(lambda w: st.just(w) if w else known)


QUERY_KEYS = ["app", "config", "direction", "source_language", "target_language", "chunk_ms", "source_text",
              "signin", "next"]
queries = st.dictionaries(st.sampled_from(QUERY_KEYS) | text, text | json_values.map(json.dumps), max_size=3)


def requests(live: Live) -> st.SearchStrategy[dict[str, Any]]:
    sid, token = live.peer.session_id or "", live.peer.session_token or ""
    auth = mostly(f"Bearer {KEY}", st.sampled_from([None, f"Bearer {token}", "Bearer nope", "Basic Zm9vOmJhcg==",
                                                    "Bearer "]), header_text)
    return st.fixed_dictionaries({
        "route": routes(sid),
        "query": queries,
        "body": bodies(live.offer),
        "content_type": mostly("application/json", CONTENT_TYPES),
        "auth": auth,
        "origin": mostly(None, st.sampled_from([live.srv.url, "https://evil.example", "null"]), header_text),
        "host": mostly(None, st.sampled_from(["evil.example", "localhost"]), header_text),
        "cookie": mostly(None, st.sampled_from(["rtc_agent_page=forged", "a=b; c"])),
    })


# --- checks ----------------------------------------------------------------------------------------------------

def error_code(body: bytes) -> str:
    """The ``error.code`` of a JSON error body ("" otherwise), for the statistics of the run."""
    try:
        return str(json.loads(body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


def check_answer(req: dict[str, Any], status: int, headers: dict[str, str], body: bytes) -> None:
    assert status < 500, (status, req, body[:300])
    path = req["path"].split("?")[0]
    # aiohttp's HTTP parser (a request line over 8 KB...) answers text/plain 400 before any route or middleware
    parser_error = status == 400 and headers.get("Content-Type", "").startswith("text/plain")
    if path.startswith("/v1/") and status >= 400 and req["method"] != "HEAD" and not parser_error:
        data = json.loads(body)
        error = data["error"]
        assert {"type", "code", "message"} <= set(error), data
        assert all(isinstance(error[k], str) and error[k] for k in ("type", "code", "message")), data
        assert KEY not in body.decode(errors="replace")
    if status in (429, 503):
        assert int(headers["Retry-After"]) >= 1


async def end_created(srv: BackgroundServer, status: int, headers: dict[str, str], body: bytes) -> None:
    """A session an example happened to create is ended with its own token (its slot must come back)."""
    if status != 201 or "X-Session-Token" not in headers or "Location" not in headers:
        return
    async with srv.http.delete(srv.url + headers["Location"],
                               headers={"Authorization": f"Bearer {headers['X-Session-Token']}"}) as resp:
        assert resp.status == 204, await resp.text()


@given(data=st.data())
@FUZZ
def test_http_routes_never_answer_500(live: Live, data: st.DataObject) -> None:
    srv = live.srv
    req = data.draw(requests(live))
    req["method"], req["path"] = req.pop("route")
    kind, body = req["body"]
    ends_live = req["method"] == "DELETE" or req["path"].endswith("/hangup")
    if ends_live and str(live.peer.session_id) in req["path"]:  # keep the live session: aim elsewhere
        req["path"] = req["path"].replace(str(live.peer.session_id), "sess_ffffffffffffffff")
    headers = {k: v for k, v in (("Authorization", req["auth"]), ("Origin", req["origin"]),
                                 ("Host", req["host"]), ("Cookie", req["cookie"])) if v is not None}
    if kind == "form" and data.draw(st.booleans()):  # a real multipart upload with random parts
        fields = data.draw(st.dictionaries(st.sampled_from(["direction", "source_language", "target_language",
                                                            "chunk_ms", "source_text", "language_prior"])
                                             | text, text, max_size=3))
        file = data.draw(st.binary(max_size=400) | st.just(b"RIFF\x24\x00\x00\x00WAVEfmt "))
        body, content_type = multipart(fields, {"file": ("a.wav", file, "audio/wav")} if file else {})
        headers["Content-Type"] = content_type
    elif req["content_type"] is not None:
        headers["Content-Type"] = req["content_type"]
    query = ("?" + urlencode(req["query"])) if req["query"] else ""
    status, answer_headers, answer = srv.request(req["method"], req["path"] + query, headers=headers,
                                                 data=body if req["method"] not in ("GET", "HEAD") else None)
    event(f"{req['method']} /{'/'.join(req['path'].split('/')[1:3])} -> {status} {error_code(answer)}")
    check_answer(req, status, answer_headers, answer)
    srv.run(end_created(srv, status, answer_headers, answer))


# --- the routes' own bodies: app configs, tokens, candidates, uploads -------------------------------------------

VISION_KEYS = sorted(COMMENTARY_DEFAULTS)
APP_KEYS = {"echo": ["delay_s"], "captions": sorted(CaptionsApp.CONFIG_KEYS), "agent": sorted(AGENT_DEFAULTS),
            "interpret": sorted(INTERPRET_KEYS)}
plausible = st.one_of(
    json_values, st.booleans(), st.integers(-5, 20000), st.floats(-1e6, 1e6, allow_nan=False),
    st.sampled_from(["en", "es", "auto", "es-en", "auto-en", "en-fr", "xx", "", "auto", "change", "all"]),
    st.integers(0, 40000).map(lambda n: "x" * n),
    st.dictionaries(st.sampled_from(VISION_KEYS), json_values | st.integers(-5, 5000), max_size=3),
    st.lists(st.fixed_dictionaries({"type": st.just("function"), "name": text,
                                    "parameters": json_values}), max_size=3),
)


def app_configs() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    return st.sampled_from(sorted(APP_KEYS)).flatmap(lambda app: st.tuples(st.just(app), st.dictionaries(
        mostly(None, text).flatmap(lambda k: st.just(k) if k else st.sampled_from(APP_KEYS[app])),
        plausible, max_size=4)))


def wav(seconds: float) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * int(16000 * seconds))
    return buf.getvalue()


SILENCE = wav(0.3)


@given(data=st.data())
@settings(database=None, derandomize=True, deadline=None, max_examples=120,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_route_bodies_with_random_fields_never_answer_500(live: Live, data: st.DataObject) -> None:
    """Bodies shaped as each route expects, their fields random: sessions (JSON and WHIP) with a real offer and
    random app configs, client tokens, trickle-ICE candidates for the live session, uploads of a short WAV."""
    srv = live.srv
    auth = {"Authorization": f"Bearer {KEY}"}
    kind = data.draw(st.sampled_from(["session", "whip", "token", "patch", "sdpfrag", "upload"]))
    app, config = data.draw(app_configs())
    if kind == "session":
        body = {"app": app, "sdp": live.offer, "type": "offer", "config": config}
        req = ("POST", "/v1/sessions", {**auth, "Content-Type": "application/json"}, json.dumps(body).encode())
    elif kind == "whip":
        query = urlencode({"app": app, "config": json.dumps(config)})
        req = ("POST", f"/v1/sessions?{query}", {**auth, "Content-Type": "application/sdp"}, live.offer.encode())
    elif kind == "token":
        body = {"app": app, "config": config, "ttl_s": data.draw(json_values | st.integers(-5, 1000))}
        req = ("POST", "/v1/tokens", {**auth, "Content-Type": "application/json"}, json.dumps(body).encode())
    elif kind in ("patch", "sdpfrag"):
        found = data.draw(st.lists(candidates, max_size=25))
        token = {"Authorization": f"Bearer {live.peer.session_token}"}
        if kind == "patch":
            body = json.dumps({"candidates": found, "end_of_candidates": data.draw(st.booleans())}).encode()
            content_type = "application/json"
        else:
            lines = ["a=" + str(c.get("candidate")) for c in found] + data.draw(st.lists(text, max_size=3))
            body, content_type = "\r\n".join(["m=audio 9 UDP 0", "a=mid:0", *lines]).encode(), TRICKLE
        req = ("PATCH", f"/v1/sessions/{live.peer.session_id}", {**token, "Content-Type": content_type}, body)
    else:
        fields = {k: str(v) for k, v in config.items()}
        body, content_type = multipart(fields, {"file": ("a.wav", SILENCE, "audio/wav")})
        req = ("POST", "/v1/translate/stream", {**auth, "Content-Type": content_type}, body)
    method, path, headers, body = req
    status, answer_headers, answer = srv.request(method, path, headers=headers, data=body)
    event(f"{kind} -> {status} {error_code(answer)}")
    check_answer({"method": method, "path": path}, status, answer_headers, answer)
    srv.run(end_created(srv, status, answer_headers, answer))


# --- raw bytes on the socket -----------------------------------------------------------------------------------

REQUEST_LINES = st.sampled_from([
    b"GET / HTTP/1.1\r\n", b"POST /v1/sessions HTTP/1.1\r\n", b"PATCH /v1/sessions/x HTTP/1.1\r\n",
    b"GET /health HTTP/9.9\r\n", b"\x00\xff\r\n", b"GET /v1/sessions HTTP/1.1\n",
])


async def raw_exchange(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.read(256), 5)
    except (ConnectionError, TimeoutError):
        return b""
    finally:
        writer.close()


@given(line=REQUEST_LINES, junk=st.binary(max_size=300),
       headers=st.lists(st.binary(max_size=60), max_size=4))
@settings(database=None, derandomize=True, deadline=None, max_examples=60)
def test_raw_garbage_gets_4xx_or_a_closed_connection(live: Live, line: bytes, junk: bytes,
                                                     headers: list[bytes]) -> None:
    payload = line + b"Host: 127.0.0.1\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + junk
    answer = live.srv.run(raw_exchange(live.srv.port, payload), timeout=15)
    if answer:
        status = int(answer.split(b" ", 2)[1])
        assert status < 500, answer[:200]
    assert live.srv.request("GET", "/health")[0] == 200


# --- last: the server after all of the above ----------------------------------------------------------------

def test_server_is_healthy_after_fuzzing(live: Live) -> None:
    """Runs after the fuzz test: /health answers, the live session is still up, and no other slot is taken."""
    srv = live.srv
    status, _, body = srv.request("GET", "/health")
    assert status == 200, body
    assert srv.wait_until(lambda: set(srv.registry.active) == {live.peer.session_id}, timeout=15), \
        srv.call(lambda: {k: s.state for k, s in srv.registry.active.items()})
    srv.call(lambda: live.peer.send({"type": "ping", "event_id": "after-http-fuzz"}))  # on the peer's own loop
    srv.run(live.peer.wait_for("pong", lambda e: e.get("ping_event_id") == "after-http-fuzz", timeout=5))
