"""Trust at the edges: uploads, the real process's shutdown, a busy server, overflowing numbers.

- Uploads (``POST /v1/translate/stream``, a multipart "simple" request) need a credential once API keys are set:
  none gets 401, a client token of another app 403 ``token_scope``, an ``interpret`` client token works once.
- Uploads are rate limited per client (429 + ``Retry-After``), like session creation.
- The real process: started open on loopback it says so in its log; SIGTERM (not ``runner.cleanup()`` called by
  a test) tells a connected session ``session.ended {reason: "server_shutdown"}`` and the process exits in
  bounded time, even with a stalled upload holding a request handler.
- A browser page retries a 503 with ``Retry-After`` on its own.
- A float literal that overflows (``1e999``) is refused like ``Infinity``: it parsed to ``inf`` and came back in
  ``pong.client_ts`` as ``Infinity``, which is not JSON (a browser's ``JSON.parse`` throws on it).
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import aiohttp
import pytest

from rtc_agent.auth import AUTH
from rtc_agent.protocol import json_limits
from rtc_agent.rtc.client import ClientPeer
from tests.browser import browser_test, chromium_page, serve

KEY = "trust-gaps-key-0123456789"
URL = "/v1/translate/stream"


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def junk_form() -> aiohttp.FormData:
    """A form the route reads and refuses (not audio): enough to see who gets past the access check."""
    form = aiohttp.FormData()
    form.add_field("direction", "es-en")
    form.add_field("file", b"not audio at all" * 64, filename="x.wav", content_type="audio/wav")
    return form


async def upload(http: aiohttp.ClientSession, base: str, headers: dict[str, str] | None = None
                 ) -> tuple[int, dict[str, Any], dict[str, str]]:
    async with http.post(base + URL, data=junk_form(), headers=headers or {}) as resp:
        body = await resp.json(content_type=None) if resp.content_type.endswith("json") else {}
        return resp.status, body, dict(resp.headers)


async def mint(http: aiohttp.ClientSession, base: str, app: str) -> str:
    async with http.post(f"{base}/v1/tokens", json={"app": app}, headers=bearer(KEY)) as resp:
        data = await resp.json()
        assert resp.status == 201, data
        return data["value"]


# --- uploads need a credential -------------------------------------------------------------------------------------

async def test_uploads_need_a_token_when_keys_are_set(start_server):
    server = await start_server(api_keys=[KEY])
    async with aiohttp.ClientSession() as http:
        status, body, _ = await upload(http, server.url)
        assert (status, body["error"]["code"]) == (401, "missing_credentials"), body
        status, body, _ = await upload(http, server.url, bearer("ct_forged"))
        assert status == 401, body
        echo = await mint(http, server.url, "echo")
        status, body, _ = await upload(http, server.url, bearer(echo))
        assert (status, body["error"]["code"]) == (403, "token_scope"), body
        interpret = await mint(http, server.url, "interpret")
        status, body, _ = await upload(http, server.url, bearer(interpret))
        assert status not in (401, 403), body  # past the access check (the junk file itself is refused)
        assert 400 <= status < 500 and body["error"]["code"] != "missing_credentials", body
        status, body, _ = await upload(http, server.url, bearer(interpret))
        assert (status, body["error"]["code"]) == (401, "invalid_credentials"), body  # single use
        status, body, _ = await upload(http, server.url, bearer(KEY))
        assert status not in (401, 403), body  # an API key is enough


async def test_uploads_are_rate_limited_per_client(start_server):
    server = await start_server(rate_uploads_per_minute=2)
    server.app[AUTH].limits["uploads"].burst = 2.0
    statuses, retry = [], None
    async with aiohttp.ClientSession() as http:
        for _ in range(3):
            status, body, headers = await upload(http, server.url)
            statuses.append((status, body.get("error", {}).get("code")))
            retry = headers.get("Retry-After")
    assert all(400 <= s < 500 and s != 429 for s, _ in statuses[:2]), statuses  # refused uploads still count
    assert statuses[2] == (429, "rate_limited"), statuses
    assert retry is not None and int(retry) >= 1


# --- numbers that overflow ------------------------------------------------------------------------------------

@pytest.mark.parametrize("doc", ["1e999", "[-1e400]", '{"a": 1E+309}', "1.5e99999"])
def test_overflowing_floats_are_refused(doc):
    with pytest.raises(json_limits.JSONLimitError, match="finite"):
        json_limits.loads(doc)


def test_large_finite_and_underflowing_floats_still_parse():
    assert json_limits.loads("[1e308, -1.7976931348623157e308, 1e-999]") == [1e308, -1.7976931348623157e308, 0.0]


async def test_an_overflowing_number_gets_an_error_event_not_an_infinity_echo(server):
    async with ClientPeer(server.url, "echo") as peer:
        await peer.wait_for("session.created")
        after = len(peer.events)
        peer.send_raw('{"type": "ping", "event_id": "inf", "client_ts": 1e999}')
        error = await peer.wait_for("error", after=after, timeout=5)
        assert error["error"]["code"] == "invalid_json", error
        assert not [e for e in peer.events[after:] if e.get("type") == "pong"]
        peer.send({"type": "ping", "event_id": "alive", "client_ts": 1e308})
        pong = await peer.wait_for("pong", lambda e: e["ping_event_id"] == "alive", timeout=5)
        assert pong["client_ts"] == 1e308
    async with aiohttp.ClientSession() as http, http.post(
            f"{server.url}/v1/tokens", json=None, data=b'{"app": "echo", "ttl_s": 1e999}',
            headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 400 and (await resp.json())["error"]["code"] == "invalid_json"


# --- the real process ------------------------------------------------------------------------------------------

async def stalled_upload(port: int) -> asyncio.StreamWriter:
    """Headers of a big upload, then nothing: its handler waits in the body read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST " + URL.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: multipart/form-data; boundary=zz\r\nContent-Length: 1000000\r\n\r\n--zz\r\n")
    await writer.drain()
    writer.reader = reader  # type: ignore[attr-defined]
    return writer




@pytest.mark.parametrize("stall", [False, True], ids=["idle", "stalled-upload"])
async def test_sigterm_drains_the_real_process(tmp_path, stall):
    shutdown_s = 2.0
    with serve(tmp_path, "--preload", "", "--shutdown-timeout-s", str(shutdown_s),
               "--upload-read-timeout-s", "60") as served:
        log = served.log.read_text(errors="replace")
        assert "open mode" in log and "loopback" in log, log[-2000:]  # says so at start
        port = int(served.base.rsplit(":", 1)[1])
        peer = ClientPeer(served.base, "echo")
        await peer.connect()
        try:
            await peer.wait_for("session.created", timeout=10)
            stalled = await stalled_upload(port) if stall else None
            await asyncio.sleep(0.3)
            began = time.monotonic()
            served.proc.send_signal(signal.SIGTERM)
            ended = await peer.wait_for("session.ended", timeout=10)
            assert ended["reason"] == "server_shutdown" and ended["message"], ended
            while served.proc.poll() is None and time.monotonic() - began < 30:
                await asyncio.sleep(0.1)
            took = time.monotonic() - began
            assert served.proc.returncode is not None, "the server did not exit within 30 s of SIGTERM"
            print(f"SIGTERM to exit: {took:.1f} s (shutdown_timeout_s {shutdown_s})")
            # the sessions' drain, then aiohttp's wait for request handlers still running (a stalled body read),
            # each bounded by shutdown_timeout_s; 3 s for the process to start exiting and the test to see it
            assert took < shutdown_s * (2 if stall else 1) + 3.0, took
            if stalled is not None:
                stalled.close()
        finally:
            await peer.close(delete=False)


# --- the page retries a busy server ---------------------------------------------------------------------------


@browser_test
def test_the_page_retries_a_503_with_retry_after(tmp_path):
    pytest.importorskip("playwright.sync_api")
    posts: list[int] = []
    with serve(tmp_path, "--preload", "") as served, chromium_page(served, tmp_path) as b:
        def busy_once(route: Any) -> None:
            if route.request.method != "POST":
                route.continue_()
                return
            posts.append(1)
            if len(posts) == 1:
                route.fulfill(status=503, headers={"Retry-After": "1", "Content-Type": "application/json"},
                              body='{"error": {"type": "server_error", "code": "too_many_sessions", '
                                   '"message": "the server is at its limit; retry later"}}')
            else:
                route.continue_()

        b.page.route("**/v1/sessions", busy_once)
        b.open("/echo")
        b.page.click("#connect")
        b.wait_js("connected after one retry",
                  "document.querySelector('#connection-state').textContent.trim() === 'connected'", 30_000)
        assert len(posts) == 2, posts
        assert "server busy, retry 1" in b.page.inner_text("#event-log"), b.diagnose("the retry is logged")
        assert not b.page_errors(), b.diagnose("no page errors")
