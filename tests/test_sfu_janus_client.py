"""The Janus client against a real Janus (tests/janus.py): session, handles, a private VideoRoom with a secret,
join tokens allowed and refused, errors as JanusError, and audio through aiortc peers (publish, subscribe)."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import numpy as np
import pytest

from rtc_agent.rtc.sfu import FeedPublisher, FeedSubscriber, JanusClient, JanusError, videoroom
from rtc_agent.rtc.speech_output import SpeechOutput
from tests.conftest import tone
from tests.janus import Janus, requires_janus, run_janus

pytestmark = requires_janus


@pytest.fixture(scope="module")
def janus(tmp_path_factory: pytest.TempPathFactory) -> Janus:
    with run_janus(Path(tmp_path_factory.mktemp("janus"))) as server:
        yield server


async def _client(janus: Janus) -> JanusClient:
    return await JanusClient(janus.ws_url, api_secret=janus.api_secret).connect()


async def test_session_handle_and_private_room_with_tokens(janus: Janus) -> None:
    client = await _client(janus)
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


async def test_errors_are_janus_errors(janus: Janus, tmp_path: Path) -> None:
    wrong_secret = JanusClient(janus.ws_url, api_secret="wrong")
    with pytest.raises(JanusError) as unauthorized:
        await wrong_secret.connect()
    assert "wrong" not in unauthorized.value.message or "secret" in unauthorized.value.message
    assert unauthorized.value.janus_code == 403  # JANUS_ERROR_UNAUTHORIZED
    with pytest.raises(JanusError):
        await JanusClient(f"ws://127.0.0.1:{janus.http_port + 0}/nothing-here").connect()
    with pytest.raises(JanusError) as bad_url:
        JanusClient("ftp://example.org")
    assert bad_url.value.code == "sfu_unavailable"
    client = await _client(janus)
    try:
        with pytest.raises(JanusError):
            await client.attach("janus.plugin.nosuchplugin")
        handle = await client.attach(videoroom.PLUGIN)
        with pytest.raises(JanusError):
            await handle.message({"request": "no-such-request"})
    finally:
        await client.close()


async def test_audio_published_by_one_peer_reaches_a_subscriber(janus: Janus) -> None:
    client = await _client(janus)
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
