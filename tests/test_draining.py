"""Draining on SIGTERM (issue 24, item 3): a real ``rtc-agent serve`` process with a connected aiortc peer is sent
SIGTERM: ``/health`` answers 503 ``draining`` (the usual JSON body), new sessions (``POST /v1/sessions``, the
Realtime calls) get 503 ``server_draining`` with ``Retry-After`` while tokens are still minted, the running session
ends with ``session.ended {reason: "server_shutdown"}`` within ``shutdown_drain_s``, and the process exits 0 in
time. In process: sessions that end by themselves end the drain early; ``shutdown_drain_s = 0`` ends them at once."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiortc import RTCConfiguration, RTCPeerConnection

from rtc_agent.rtc.client import ClientPeer
from rtc_agent.server.draining import drain
from tests.browser import serve, tail

DRAIN_S = 6.0  # long enough for this test to look at a draining server on a loaded machine


async def poll(check: Any, timeout: float, period: float = 0.05) -> Any:
    """The first truthy ``await check()`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(period)


async def health(http: aiohttp.ClientSession, base: str) -> tuple[int, dict[str, Any]]:
    async with http.get(f"{base}/health") as r:
        return r.status, await r.json()


async def refused_offers(http: aiohttp.ClientSession, base: str) -> list[tuple[int, str, str | None]]:
    """``(status, error code, Retry-After)`` of a new WebRTC session and of a new Realtime call."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio", direction="sendrecv")
    pc.createDataChannel("oai-events")
    await pc.setLocalDescription(await pc.createOffer())
    out = []
    try:
        for url, kwargs in ((f"{base}/v1/sessions", {"json": {"app": "echo", "sdp": pc.localDescription.sdp}}),
                            (f"{base}/v1/realtime/calls", {"data": pc.localDescription.sdp,
                                                           "headers": {"Content-Type": "application/sdp"}})):
            async with http.post(url, **kwargs) as r:
                body = await r.json(content_type=None)
                out.append((r.status, body["error"]["code"], r.headers.get("Retry-After")))
    finally:
        await pc.close()
    return out


def ended_reason(peer: ClientPeer) -> str | None:
    return next((e["reason"] for e in peer.events if e["type"] == "session.ended"), None)


async def test_sigterm_drains_then_ends_sessions_and_exits_0(tmp_path: Path):
    args = ("--preload", "", "--state-url", f"sqlite:///{tmp_path}/state.db", "--shutdown-drain-s", str(DRAIN_S),
            "--shutdown-timeout-s", "5")
    with serve(tmp_path, *args) as served:
        async with aiohttp.ClientSession() as http:
            status, body = await health(http, served.base)
            assert status == 200 and body["status"] == "ok" and body["state"]["store"] == "sqlite"
            peer = ClientPeer(served.base, "echo")
            await peer.connect()
            try:
                served.proc.send_signal(signal.SIGTERM)
                signalled = time.monotonic()

                async def draining() -> dict[str, Any] | None:
                    status, body = await health(http, served.base)
                    return body if status == 503 else None

                body = await poll(draining, timeout=DRAIN_S)
                assert body["status"] == "draining" and body["sessions"]["active"] == 1  # the usual body
                assert ended_reason(peer) is None  # running sessions go on during the drain
                for status, code, retry_after in await refused_offers(http, served.base):
                    assert (status, code) == (503, "server_draining") and int(retry_after) >= 1
                async with http.post(f"{served.base}/v1/tokens", json={"app": "echo"}) as r:
                    assert r.status == 201  # tokens are fine: the page's next session goes to another node
                ended = await peer.wait_for("session.ended", timeout=DRAIN_S + 10)
                assert ended["reason"] == "server_shutdown"
                assert time.monotonic() - signalled >= DRAIN_S - 1.0  # it waited for the drain first
            finally:
                await peer.close(delete=False)
        code = await asyncio.get_running_loop().run_in_executor(None, lambda: served.proc.wait(timeout=30))
        assert code == 0, tail(served.log)
        assert "draining" in tail(served.log, 20000)


async def test_the_drain_ends_early_when_sessions_end_and_at_once_with_0(start_server):
    server = await start_server(shutdown_drain_s=30.0)
    peer = ClientPeer(server.url, "echo")
    await peer.connect()
    task = asyncio.ensure_future(drain(server.app))
    async with aiohttp.ClientSession() as http:
        await poll(lambda: _status(http, server.url, 503), timeout=5)
        started = time.monotonic()
        assert await peer.delete() in (200, 204)  # the last session ends by itself: the drain is over
        await asyncio.wait_for(task, timeout=10)
        assert time.monotonic() - started < 10 < 30
        assert ended_reason(peer) != "server_shutdown"
    await peer.close(delete=False)

    at_once = await start_server(shutdown_drain_s=0.0)
    peer = ClientPeer(at_once.url, "echo")
    await peer.connect()
    try:
        await asyncio.wait_for(drain(at_once.app), timeout=10)
        ended = await peer.wait_for("session.ended", timeout=10)
        assert ended["reason"] == "server_shutdown" and not at_once.registry.active
    finally:
        await peer.close(delete=False)


async def _status(http: aiohttp.ClientSession, base: str, expected: int) -> bool:
    async with http.get(f"{base}/health") as r:
        return r.status == expected
