"""The Janus client against a real Janus (tests/janus.py), over both transports (WebSocket, HTTP long poll):
session, handles, a private VideoRoom with a secret, join tokens allowed and refused, errors as JanusError, and
audio through aiortc peers (publish, subscribe). HTTP only: the long poll delivers events, stops with the session,
and a lost Janus is reported once."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web

from rtc_agent.bench.common import free_port
from rtc_agent.rtc.sfu import FeedPublisher, FeedSubscriber, JanusClient, JanusError, videoroom
from rtc_agent.rtc.sfu.janus_http import HttpTransport
from rtc_agent.rtc.speech_output import SpeechOutput
from tests.conftest import tone
from tests.janus import Janus, requires_janus, run_janus

pytestmark = requires_janus


@pytest.fixture(scope="module")
def janus(tmp_path_factory: pytest.TempPathFactory) -> Janus:
    with run_janus(Path(tmp_path_factory.mktemp("janus"))) as server:
        yield server


@pytest.fixture(params=["ws", "http"])
def url(request: pytest.FixtureRequest, janus: Janus) -> str:
    """The Janus API URL of one transport."""
    return janus.ws_url if request.param == "ws" else janus.http_url


async def _client(janus: Janus, url: str) -> JanusClient:
    return await JanusClient(url, api_secret=janus.api_secret).connect()


async def test_session_handle_and_private_room_with_tokens(janus: Janus, url: str) -> None:
    client = await _client(janus, url)
    try:
        assert client.session_id and client.connected
        admin = await client.attach(videoroom.PLUGIN)
        room_id, secret = videoroom.random_room_id(), secrets.token_hex(12)
        good, other = secrets.token_hex(8), secrets.token_hex(8)
        assert await videoroom.create_room(admin, room_id=room_id, secret=secret, publishers=4,
                                           allowed=[good]) == room_id
        assert set(await videoroom.allow_tokens(admin, room_id, secret, "add", [other])) == {good, other}
        # the wrong secret may not change the tokens
        with pytest.raises(JanusError) as refused:
            await videoroom.allow_tokens(admin, room_id, "not-the-secret", "add", ["x"])
        assert refused.value.janus_code is not None
        # a join with a listed token works and is seen by the others
        member = await client.attach(videoroom.PLUGIN)
        joined = await videoroom.join_publisher(member, room_id, display="ana", token=good)
        assert joined["id"] and joined["publishers"] == []
        people = await videoroom.list_participants(admin, room_id)
        assert [p["display"] for p in people] == ["ana"]
        # one without a valid token is refused
        stranger = await client.attach(videoroom.PLUGIN)
        with pytest.raises(JanusError) as denied:
            await videoroom.join_publisher(stranger, room_id, display="eve", token="wrong")
        assert denied.value.code == "sfu_error" and denied.value.janus_code
        # a removed token no longer lets anyone in
        await videoroom.allow_tokens(admin, room_id, secret, "remove", [other])
        late = await client.attach(videoroom.PLUGIN)
        with pytest.raises(JanusError):
            await videoroom.join_publisher(late, room_id, display="bob", token=other)
        await videoroom.destroy_room(admin, room_id, secret)
        with pytest.raises(JanusError):  # gone
            await videoroom.list_participants(admin, room_id)
    finally:
        await client.close()
    assert not client.connected
    with pytest.raises(JanusError):
        await client.attach(videoroom.PLUGIN)


async def test_errors_are_janus_errors(janus: Janus, url: str) -> None:
    wrong_secret = JanusClient(url, api_secret="wrong")
    with pytest.raises(JanusError) as unauthorized:
        await wrong_secret.connect()
    assert "wrong" not in unauthorized.value.message or "secret" in unauthorized.value.message
    assert unauthorized.value.janus_code == 403  # JANUS_ERROR_UNAUTHORIZED
    with pytest.raises(JanusError):
        await JanusClient(f"ws://127.0.0.1:{janus.http_port + 0}/nothing-here").connect()
    with pytest.raises(JanusError) as no_janus_here:  # Janus's HTTP port, a path that is not its API
        await JanusClient(f"http://127.0.0.1:{janus.http_port}/nothing-here").connect()
    assert no_janus_here.value.janus_code == 404
    with pytest.raises(JanusError):  # nothing listens
        await JanusClient(f"http://127.0.0.1:{free_port()}/janus", request_timeout_s=3.0).connect()
    with pytest.raises(JanusError) as bad_url:
        JanusClient("ftp://example.org")
    assert bad_url.value.code == "sfu_unavailable"
    client = await _client(janus, url)
    try:
        with pytest.raises(JanusError):
            await client.attach("janus.plugin.nosuchplugin")
        handle = await client.attach(videoroom.PLUGIN)
        with pytest.raises(JanusError):
            await handle.message({"request": "no-such-request"})
    finally:
        await client.close()


async def test_audio_published_by_one_peer_reaches_a_subscriber(janus: Janus, url: str) -> None:
    client = await _client(janus, url)
    admin = await client.attach(videoroom.PLUGIN)
    room_id, secret, token = videoroom.random_room_id(), secrets.token_hex(12), secrets.token_hex(8)
    await videoroom.create_room(admin, room_id=room_id, secret=secret, publishers=4, allowed=[token])
    watcher = await client.attach(videoroom.PLUGIN)
    seen: list[dict] = []
    watcher.on_event = lambda data, jsep, msg: seen.extend(data.get("publishers") or [])
    await videoroom.join_publisher(watcher, room_id, display="watcher", token=token)
    speech = SpeechOutput()
    publisher = FeedPublisher(client, room_id, speech, display="speaker-1", token=token)
    received: list[np.ndarray] = []
    subscriber = None
    try:
        feed_id = await publisher.start()
        deadline = asyncio.get_running_loop().time() + 20
        while not any(p["id"] == feed_id for p in seen):
            assert asyncio.get_running_loop().time() < deadline, "no publishers event for the new feed"
            await asyncio.sleep(0.1)
        entry = next(p for p in seen if p["id"] == feed_id)
        assert entry["display"] == "speaker-1"
        streams = videoroom.audio_streams(entry)
        assert streams and all(s["feed"] == feed_id for s in streams)
        subscriber = FeedSubscriber(client, room_id, feed_id, streams, token=token,
                                    sink=lambda pcm, start_ms: received.append(pcm))
        await subscriber.start()
        speech.play(tone(1.5, 440.0), 48000)
        deadline = asyncio.get_running_loop().time() + 30
        while sum(r.size for r in received) < 16000 or max((np.abs(r).max() for r in received), default=0) < 2000:
            assert asyncio.get_running_loop().time() < deadline, "no audio through Janus"
            await asyncio.sleep(0.1)
        assert subscriber.received_ms >= 1000
    finally:
        if subscriber is not None:
            await subscriber.close()
        await publisher.close()
        speech.stop()
        await videoroom.destroy_room(admin, room_id, secret)
        await client.close()


async def test_http_events_come_by_long_poll_which_ends_with_the_session(janus: Janus) -> None:
    client = await JanusClient(janus.http_url, api_secret=janus.api_secret).connect()
    transport = client.transport
    assert isinstance(transport, HttpTransport) and transport.polling
    admin = await client.attach(videoroom.PLUGIN)
    room_id, secret, token = videoroom.random_room_id(), secrets.token_hex(12), secrets.token_hex(8)
    await videoroom.create_room(admin, room_id=room_id, secret=secret, publishers=4, allowed=[token])
    # the join's answer is an asynchronous event: only the long poll brings it
    joined = await videoroom.join_publisher(await client.attach(videoroom.PLUGIN), room_id, display="ana",
                                            token=token)
    assert joined["videoroom"] == "joined" and transport.polls >= 1
    # another participant joining is an event without a transaction: it reaches the watcher's on_event
    seen: list[str] = []
    watcher = await client.attach(videoroom.PLUGIN)
    await videoroom.join_publisher(watcher, room_id, display="watcher", token=token)
    watcher.on_event = lambda data, jsep, msg: seen.extend(str(p.get("display")) for p in data.get("publishers") or [])
    speech = SpeechOutput()
    publisher = FeedPublisher(client, room_id, speech, display="speaker-1", token=token)
    try:
        await publisher.start()
        deadline = asyncio.get_running_loop().time() + 20
        while "speaker-1" not in seen:
            assert asyncio.get_running_loop().time() < deadline, "no publishers event through the long poll"
            await asyncio.sleep(0.1)
    finally:
        await publisher.close()
        speech.stop()
        await videoroom.destroy_room(admin, room_id, secret)
        await client.close()
    assert not transport.polling and not client.connected


@pytest.mark.parametrize("transport", ["ws", "http"])
async def test_janus_going_away_is_reported_once(tmp_path: Path, transport: str) -> None:
    lost: list[str] = []
    with run_janus(tmp_path) as server:
        client = await JanusClient(server.ws_url if transport == "ws" else server.http_url,
                                   api_secret=server.api_secret, on_lost=lost.append).connect()
        handle = await client.attach(videoroom.PLUGIN)
    # Janus stopped: the WebSocket closes, the long poll fails
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while not lost:
            assert asyncio.get_running_loop().time() < deadline, "the lost Janus was not noticed"
            await asyncio.sleep(0.1)
        assert not client.connected and client.lost_reason == lost[0]
        with pytest.raises(JanusError):
            await handle.message({"request": "list"})
    finally:
        await client.close()
    assert len(lost) == 1


@pytest.mark.parametrize("poll", ["held", "timeout"])
async def test_the_long_poll_is_bounded_and_ends_with_the_session(poll: str) -> None:
    """A scripted Janus REST API that answers ``create`` and then either holds the event poll forever (the poll
    ends after ``poll_timeout_s``) or says the session timed out: either way the session is lost, once, and the
    poll stops; after a failed poll, closing still destroys the session."""

    asked: list[str] = []

    async def api(request: web.Request) -> web.Response:
        message = await request.json()
        asked.append(f"{request.path} {message['janus']}")
        return web.json_response({"janus": "success", "transaction": message["transaction"], "data": {"id": 7}})

    release = asyncio.Event()  # the held poll's handler returns at the end, so the server stops at once

    async def events(request: web.Request) -> web.Response:
        if poll == "held":
            await release.wait()
        return web.json_response([{"janus": "timeout", "session_id": 7}])

    app = web.Application()
    app.router.add_post("/janus", api)
    app.router.add_post("/janus/7", api)
    app.router.add_get("/janus/7", events)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    lost: list[str] = []
    client = await JanusClient(f"http://127.0.0.1:{port}/janus", poll_timeout_s=1.0, keepalive_s=3600,
                               on_lost=lost.append).connect()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while not lost or client.transport.polling:
            assert asyncio.get_running_loop().time() < deadline, "the poll did not end"
            await asyncio.sleep(0.1)
        assert ("no answer in 1 s" if poll == "held" else "timed our session out") in lost[0]
        assert not client.connected and len(lost) == 1
        await client.close()
        # a session whose poll failed may still exist: closing destroys it; a timed-out one is gone already
        assert asked == ["/janus create", *(["/janus/7 destroy"] if poll == "held" else [])]
    finally:
        await client.close()
        release.set()
        await runner.cleanup()
