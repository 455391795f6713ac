"""Message budgets through the real server (issue 23): a client flooding ``/v1/realtime`` or the ``events`` data
channel is told ``rate_limited`` (about once a second, not once a message) and disconnected after sustained excess
while another session keeps answering pings; a data-channel message past the advertised max-message-size is
refused while it is reassembled and the channel goes on; a WebSocket session hears why at shutdown."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sctp_limit import LOCAL_MAX_MESSAGE_SIZE
from tests.realtime_helpers import check_shape

BOGUS = json.dumps({"type": "bogus.evt"})
FAST_CLOSE = {"channel_overload_close_s": 1.5}
#: The longest a flood may go on before the server must have closed it (it closes after ~1.5 s alone; a loaded
#: suite is slower).
FLOOD_LIMIT_S = 60.0


def ws_url(server: Any) -> str:
    return server.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"


class SocketReader:
    """Every event of one ``/v1/realtime`` socket, checked against the SDK's models, and how it closed."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self.close_code: int | None = None
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                self.events.append(check_shape(json.loads(message.data)))
        self.close_code = self.ws.close_code

    def errors(self, code: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "error" and e["error"]["code"] == code]

    async def wait_for(self, kind: str, timeout: float = 30.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                found = [e for e in self.events if e["type"] == kind]
                if found:
                    return found[0]
                if self.task.done():
                    raise AssertionError(f"closed before {kind}: {[e['type'] for e in self.events]}")
                await asyncio.sleep(0.02)


class PingProbe:
    """Another session on the same server: a ping every 0.2 s, each of which must be answered."""

    def __init__(self, peer: ClientPeer) -> None:
        self.peer = peer
        self.answered = 0
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            mark = len(self.peer.events)
            self.peer.send({"type": "ping", "client_ts": time.monotonic() * 1000})
            await self.peer.wait_for("pong", timeout=10, after=mark)  # raises (and so fails stop()) if unanswered
            self.answered += 1
            await asyncio.sleep(0.2)

    async def stop(self) -> int:
        if self.task.done():
            self.task.result()  # a ping went unanswered: raise it here
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        return self.answered


async def test_a_websocket_flood_is_told_rate_limited_and_closed_while_another_session_answers(start_server):
    server = await start_server(**FAST_CLOSE)
    async with ClientPeer(server.url, "echo", heartbeat_s=None) as other, aiohttp.ClientSession() as http:
        await other.wait_for("session.created")
        probe = PingProbe(other)
        async with http.ws_connect(ws_url(server), headers={"Authorization": "Bearer sk-test-anything"},
                                   protocols=("realtime",)) as ws:
            reader = SocketReader(ws)
            await reader.wait_for("session.created")
            sent, started = 0, time.monotonic()
            # a deadline checked here, not asyncio.timeout: its cancel may land after the loop ended on its own and
            # surface at a later await as a bare CancelledError (a slow suite once took the flood to the deadline)
            while not ws.closed and not reader.task.done() and time.monotonic() - started < FLOOD_LIMIT_S:
                try:
                    await ws.send_str(BOGUS)
                except ConnectionError:  # the server dropped the connection after its close frame
                    break
                sent += 1
                if sent % 100 == 0:
                    await asyncio.sleep(0)  # the server shares this loop in the test
            assert ws.closed or reader.task.done(), f"still open after {FLOOD_LIMIT_S} s of flood ({sent} sent)"
            await asyncio.wait_for(reader.task, 10)
            flood_s = time.monotonic() - started
        answered = await probe.stop()
        assert server.registry.get(other.session_id).state == "connected"
    limited = reader.errors("rate_limited")
    assert reader.close_code == 1008, reader.close_code
    assert limited and len(limited) <= flood_s + 2, (len(limited), flood_s)
    assert reader.events[-1] in limited  # the last word: why it was closed
    replies = [e for e in reader.events if e["type"] == "error"]
    assert sent > 5 * len(replies), (sent, len(replies))  # dropped messages get no reply
    assert answered >= 1


async def test_a_data_channel_flood_ends_only_that_session(start_server):
    # in-process aiortc carries only a few hundred messages a second: a lower budget makes that a flood
    server = await start_server(**FAST_CLOSE, channel_messages_per_s=50.0, channel_burst_s=1.0)
    async with ClientPeer(server.url, "echo", heartbeat_s=None) as other, \
            ClientPeer(server.url, "echo", heartbeat_s=None) as flooder:
        await other.wait_for("session.created")
        await flooder.wait_for("session.created")
        probe = PingProbe(other)
        sent = 0
        async with asyncio.timeout(30):
            while not [e for e in flooder.events if e["type"] == "session.ended"]:
                if flooder.channel.readyState != "open":
                    break
                if flooder.channel.bufferedAmount < 64 * 1024:
                    for _ in range(100):
                        flooder.send_raw(BOGUS)
                    sent += 100
                await asyncio.sleep(0)
        session = server.registry.get(flooder.session_id)
        async with asyncio.timeout(20):
            while session.state != "closed":
                await asyncio.sleep(0.05)
        answered = await probe.stop()
        assert server.registry.get(other.session_id).state == "connected"
    assert session.close_reason == "rate_limited"
    # session.ended may be lost behind the replies still queued for the flooder; when it arrives, it says why
    assert all(e["reason"] == "rate_limited" for e in flooder.events if e["type"] == "session.ended")
    limited = [e for e in flooder.events if e["type"] == "error" and e["error"]["code"] == "rate_limited"]
    errors = [e for e in flooder.events if e["type"] == "error"]
    assert 1 <= len(limited) <= 20, len(limited)
    assert sent > 5 * len(errors), (sent, len(errors))
    assert answered >= 1


async def test_an_oversize_data_channel_message_is_refused_and_the_channel_goes_on(server):
    async with ClientPeer(server.url, "echo", heartbeat_s=None) as peer:
        await peer.wait_for("session.created")
        peer.pc.sctp._remote_max_message_size = 0  # the hostile client ignores the advertised limit
        size = 2 * 1024 * 1024  # past the limit and past SCTP's 1 MiB receive window (which once stalled)
        peer.send_raw("x" * size)
        refused = await peer.wait_for("error", lambda e: e["error"]["code"] == "message_too_large", timeout=30)
        assert str(LOCAL_MAX_MESSAGE_SIZE) in refused["error"]["message"]
        for _ in range(2):  # the stream's later messages still arrive, in order
            mark = len(peer.events)
            peer.send({"type": "ping", "client_ts": 1.0})
            await peer.wait_for("pong", timeout=20, after=mark)
        peer.send_raw("y" * (LOCAL_MAX_MESSAGE_SIZE + 1))
        peer.send({"type": "ping", "client_ts": 2.0, "event_id": "after_second"})
        pong = await peer.wait_for("pong", lambda e: e.get("ping_event_id") == "after_second", timeout=20)
        assert pong
        refusals = [e for e in peer.events if e["type"] == "error" and e["error"]["code"] == "message_too_large"]
        assert len(refusals) == 2
        session = server.registry.get(peer.session_id)
        assert session.state == "connected"


async def test_a_websocket_session_hears_server_shutdown(start_server):
    server = await start_server(shutdown_timeout_s=3.0)
    async with aiohttp.ClientSession() as http, http.ws_connect(
            ws_url(server), headers={"Authorization": "Bearer sk-test-anything"}) as ws:
        reader = SocketReader(ws)
        await reader.wait_for("session.created")
        await server.runner.cleanup()
        await asyncio.wait_for(reader.task, 10)
    assert reader.close_code == 1001
    last = reader.events[-1]
    assert last["type"] == "error" and last["error"]["code"] == "server_shutdown", last
    assert last["error"]["message"]
