"""Fuzzing offers (issue 11, item 9): a real aiortc offer, mutated (lines dropped, duplicated, swapped; numbers
corrupted; ``m=text`` / ``m=message`` sections injected; bogus BUNDLE groups; huge attributes; candidates with bad
fields; bytes that are not UTF-8; truncation; other line endings) and posted as JSON and as WHIP ``application/sdp``.

Every offer gets 201 or a 4xx, never a 5xx; a 201 is ended with its own token; after each example no session is
left (failed set-ups are closed by the server on its own). Examples are derandomized, so a run is repeatable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from aiortc import RTCPeerConnection
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.background_server import OTHER_THREADS_USE_RANDOM, BackgroundServer

MAX_BODY = 64 * 1024
pytestmark = OTHER_THREADS_USE_RANDOM


async def _offer() -> tuple[RTCPeerConnection, str]:
    pc = RTCPeerConnection()
    pc.createDataChannel("events")
    pc.addTransceiver("audio", direction="sendrecv")
    pc.addTransceiver("video", direction="sendonly")
    await pc.setLocalDescription(await pc.createOffer())
    return pc, pc.localDescription.sdp


@pytest.fixture(scope="module")
def offer_server() -> Iterator[tuple[BackgroundServer, str]]:
    with BackgroundServer(max_sessions=4, max_body_bytes=MAX_BODY, connect_timeout_s=30.0) as srv:
        pc, sdp = srv.run(_offer())
        try:
            yield srv, sdp
        finally:
            srv.run(pc.close())


# --- mutations -------------------------------------------------------------------------------------------------

numbers = st.sampled_from([0, -1, 1, 65535, 65536, 99999, 2**31, 2**32, 2**64, 10**30]) | st.integers(-10**6, 10**6)
token = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=0, max_size=12)
ATTRIBUTES = [
    "a=setup:{t}", "a=fingerprint:sha-256 {t}", "a=fingerprint:{t}", "a=ice-ufrag:{t}", "a=ice-pwd:{t}",
    "a=rtpmap:{n} opus/{n}/{n}", "a=rtpmap:{n} {t}", "a=fmtp:{n} {t}", "a=sctp-port:{n}", "a=max-message-size:{n}",
    "a=ssrc:{n} cname:{t}", "a=ssrc-group:FID {n} {n}", "a=extmap:{n} {t}", "a=mid:{t}", "a=mid:", "a=msid:{t} {t}",
    "a=rtcp:{n} IN IP4 {t}", "a=rtcp-fb:{n} {t}", "a=rid:{t} send", "a=simulcast:send {t}", "a={t}", "a=",
    "c=IN IP4 {t}", "c=IN IP6 {t}", "c={t}", "b=AS:{n}", "t={n} {n}", "o=- {n} {n} IN IP4 {t}", "s=", "v={n}",
    "a=candidate:{t} {n} udp {n} {t} {n} typ host", "a=candidate:1 1 udp 1 999.1.1.1 99999 typ host",
    "a=candidate:1 1 udp 1 127.0.0.1 9 typ host", "a=candidate:1 1 udp 1 169.254.169.254 80 typ host",
    "a=candidate:1 {n} tcp {n} ::1 {n} typ srflx raddr {t} rport {n}", "a=candidate:{t}", "a=end-of-candidates",
    "a=group:BUNDLE {t} {t}", "a=group:BUNDLE", "a=group:LS {t}", "a=sendrecv", "a=inactive", "a=rtcp-mux",
]
SECTIONS = [
    "m=text 9 UDP/TLS/RTP/SAVPF 0\r\nc=IN IP4 0.0.0.0\r\na=mid:{mid}\r\na=rtpmap:0 t140/1000",
    "m=message 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:{mid}",
    "m=application 9 TCP/MSRP *\r\na=mid:{mid}",
    "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:{mid}\r\na=sctp-port:5000",
    "m=audio 0 UDP/TLS/RTP/SAVPF 0\r\na=mid:{mid}",
    "m=video 9 RTP/AVP 96\r\na=mid:{mid}\r\na=rtpmap:96 H264/90000",
    "m=audio {n} {t} {n}\r\na=mid:{mid}",
    "m={t}",
]


def fill(template: str, draw: Any) -> str:
    out = template
    while "{t}" in out or "{n}" in out:
        out = out.replace("{t}", draw(token), 1).replace("{n}", str(draw(numbers)), 1)
    return out


@st.composite
def mutated(draw: Any, sdp: str) -> bytes:
    """The offer after 1-4 random mutations, as bytes (some mutations are not UTF-8)."""
    lines: list[Any] = sdp.rstrip("\r\n").split("\r\n")
    newline = "\r\n"
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["drop", "dup", "swap", "numbers", "attr", "attr", "section", "bundle", "huge",
                                   "bytes", "truncate", "newline", "replace"]))
        event(op)
        at = draw(st.integers(0, max(0, len(lines) - 1)))
        if op == "drop" and lines:
            del lines[at]
        elif op == "dup" and lines:
            lines.insert(at, lines[at])
        elif op == "swap" and lines:
            other = draw(st.integers(0, len(lines) - 1))
            lines[at], lines[other] = lines[other], lines[at]
        elif op == "numbers" and lines and isinstance(lines[at], str):
            value = str(draw(numbers))
            lines[at] = re.sub(r"\d+", value, lines[at], count=draw(st.integers(0, 3)))
        elif op == "attr":
            lines.insert(at, fill(draw(st.sampled_from(ATTRIBUTES)), draw))
        elif op == "section":
            mid = draw(st.sampled_from(["2", "0", "9", "", "x" * 40]))
            lines.extend(fill(draw(st.sampled_from(SECTIONS)), draw).replace("{mid}", mid).split("\r\n"))
            if draw(st.booleans()):  # name it in BUNDLE, first (aiortc then moves the others onto its transport)
                lines = [f"a=group:BUNDLE {mid} 0 1 2" if str(ln).startswith("a=group:BUNDLE") else ln
                         for ln in lines]
        elif op == "bundle":
            mids = draw(st.lists(st.sampled_from(["0", "1", "2", "3", "", "zz", "0 0"]), max_size=5))
            lines = [ln for ln in lines if not str(ln).startswith("a=group:")]
            lines.insert(min(at, 4), "a=group:BUNDLE " + " ".join(mids))
        elif op == "huge":
            size = draw(st.sampled_from([1000, 20_000, 60_000, MAX_BODY + 10]))
            lines.insert(at, "a=x-huge:" + "A" * size)
        elif op == "bytes":
            lines.insert(at, draw(st.binary(min_size=1, max_size=40)))
        elif op == "truncate":
            lines = lines[:at]
        elif op == "newline":
            newline = draw(st.sampled_from(["\n", "\r", "\r\r\n", "\r\n\r\n", ""]))
        elif op == "replace" and lines:
            lines[at] = fill(draw(st.sampled_from(["{t}", "{t}={t}", "m={t} {n}", "a=candidate:{t}"])), draw)
    parts = [ln if isinstance(ln, bytes) else ln.encode() for ln in lines]
    return newline.encode().join(parts) + newline.encode()


# --- the test --------------------------------------------------------------------------------------------------

async def post_offer(srv: BackgroundServer, body: bytes, whip: bool) -> tuple[int, dict[str, str], bytes]:
    if whip:
        return await srv.arequest("POST", "/v1/sessions?app=echo", data=body,
                                  headers={"Content-Type": "application/sdp"})
    text = body.decode("utf-8", errors="surrogateescape")  # lone surrogates: JSON carries them as \udcxx escapes
    payload = json.dumps({"app": "echo", "sdp": text, "type": "offer"}).encode()
    return await srv.arequest("POST", "/v1/sessions", data=payload, headers={"Content-Type": "application/json"})


async def end(srv: BackgroundServer, headers: dict[str, str]) -> int:
    async with srv.http.delete(srv.url + headers["Location"],
                               headers={"Authorization": f"Bearer {headers['X-Session-Token']}"}) as resp:
        return resp.status


@given(data=st.data())
@settings(database=None, derandomize=True, deadline=None, max_examples=300,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_mutated_offers_get_201_or_4xx_and_leave_no_session(offer_server: tuple[BackgroundServer, str],
                                                           data: st.DataObject) -> None:
    srv, sdp = offer_server
    body = data.draw(mutated(sdp))
    whip = data.draw(st.booleans())
    status, headers, answer = srv.run(post_offer(srv, body, whip), timeout=30)
    event(f"status {status}")
    assert status == 201 or 400 <= status < 500, (status, answer[:300], body[:2000])
    if status == 201:
        assert srv.run(end(srv, headers)) == 204
    else:
        error = json.loads(answer)["error"]
        assert error["code"] and error["message"], error
    assert srv.no_sessions(timeout=10), srv.call(lambda: {k: (s.state, s.close_reason)
                                                          for k, s in srv.registry.active.items()})


def test_known_bad_offers(offer_server: tuple[BackgroundServer, str]) -> None:
    """Hand-made offers no session can come of, each refused with 400 ``invalid_sdp`` (an offer without a DTLS
    fingerprint used to get 201 and a session whose connect task failed an assertion)."""
    srv, sdp = offer_server
    lines = sdp.rstrip("\r\n").split("\r\n")
    text_first = [ln.replace("a=group:BUNDLE 0 1 2", "a=group:BUNDLE 3 0 1 2") for ln in lines] + \
        ["m=text 9 UDP/TLS/RTP/SAVPF 0", "c=IN IP4 0.0.0.0", "a=mid:3", "a=rtpmap:0 t140/1000"]
    cases = {
        "text section first in BUNDLE": "\r\n".join(text_first) + "\r\n",
        "no media": "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n",
        "no ice credentials": "\r\n".join(ln for ln in lines if not ln.startswith("a=ice-")) + "\r\n",
        "no fingerprint": "\r\n".join(ln for ln in lines if not ln.startswith("a=fingerprint")) + "\r\n",
        "only the header": "v=0\r\n",
        "every line twice": "\r\n".join(ln for ln in lines for _ in (0, 1)) + "\r\n",
        "BUNDLE of unknown mids": "\r\n".join(ln if not ln.startswith("a=group:BUNDLE") else "a=group:BUNDLE 7 8"
                                              for ln in lines) + "\r\n",
    }
    for name, offer in cases.items():
        for whip in (False, True):
            status, headers, answer = srv.run(post_offer(srv, offer.encode(), whip), timeout=30)
            if status == 201:
                srv.run(end(srv, headers))
            assert status == 400 and json.loads(answer)["error"]["code"] == "invalid_sdp", (name, answer[:300])
            assert srv.no_sessions(timeout=10), name
    assert srv.request("GET", "/health")[0] == 200
