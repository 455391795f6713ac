"""rtc-agent's side of a Janus restart, with a real Janus (tests/janus.py), a real server and scripted engines.

Janus stops under a live SFU room and starts again on the same ports (knowing nothing): the room's bridge says
``room.sfu.updated {sfu_state: "reconnecting"}``, reconnects with backoff over the same transport, re-creates the
Janus room with the same id, lets the members' tokens in again, re-publishes the interpreter feed and says
``sfu_state: "connected", reconnects: 1`` with the new feed id; a speaker re-publishing with its old token is
subscribed again and captioned. Over both transports (WebSocket and HTTP long poll). When only rtc-agent's
connection drops (Janus keeps the room), the bridge finds the room still there and re-subscribes to the speaker
who never stopped publishing. And when Janus stays away, the state ends ``lost`` after the bounded attempts; a
new joiner is refused with 502 ``sfu_reconnecting`` and starts one more round, which finds Janus back.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from rtc_agent.apps.call.sfu.reconnect import backoff
from rtc_agent.apps.interpret import deliverable
from rtc_agent.rtc.client import ClientPeer, SessionRefused
from rtc_agent.rtc.sfu import FeedPublisher, JanusClient, videoroom
from rtc_agent.rtc.sources import PcmSourceTrack
from rtc_agent.server.keys import ROOMS
from tests.janus import Janus, requires_janus, run_janus
from tests.test_sfu_room import DEADLINE_S, bursts, scripted_worker, until, until_async

pytestmark = requires_janus


@pytest.fixture
def voices(monkeypatch: pytest.MonkeyPatch) -> None:
    """A voice for every language on the worker's ``tts`` engine (the scripted synthesizer)."""
    monkeypatch.setattr(deliverable, "_voice_for", lambda settings, language: {"engine": "tts", "voice": "v"})


def test_backoff_doubles_up_to_its_most_and_is_bounded() -> None:
    assert list(backoff(1.0, 15.0, 7)) == [1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    assert list(backoff(0.5, 0.5, 2)) == [0.5, 0.5]
    assert list(backoff(1.0, 15.0, 0)) == []


def _settings(janus: Janus, transport: str, **more: Any) -> dict[str, Any]:
    return {"make_worker": scripted_worker, "mt_engine": "auto",
            "sfu_url": janus.ws_url if transport == "ws" else janus.http_url, "sfu_public_url": janus.ws_url,
            "sfu_api_secret": janus.api_secret, "sfu_reconnect_delay_s": 0.2, "sfu_reconnect_max_delay_s": 1.0,
            **more}


async def _publish(janus: Janus, joined: dict[str, Any]) -> tuple[JanusClient, FeedPublisher]:
    """The speaker's own audio into the Janus room, as its page would publish it."""
    client = await JanusClient(janus.ws_url, api_secret=janus.api_secret).connect()
    publisher = FeedPublisher(client, joined["sfu"]["room"], PcmSourceTrack(bursts(), 48000, tail="silence"),
                              display=joined["sfu"]["display"], token=joined["sfu"]["token"])
    await publisher.start()
    return client, publisher


async def _publishing(janus: Janus, room_id: int) -> list[str]:
    client = await JanusClient(janus.ws_url, api_secret=janus.api_secret).connect()
    try:
        return sorted(str(p["display"]) for p in await videoroom.list_participants(await client.attach(
            videoroom.PLUGIN), room_id) if p.get("publisher"))
    except Exception:
        return []
    finally:
        await client.close()


async def _listener_and_speaker(url: str, room: str,
                                peers: list[ClientPeer]) -> tuple[ClientPeer, dict[str, Any]]:
    """A Spanish listener, then an English speaker, joined to SFU room ``room`` (both added to ``peers`` to
    close): the listener and the speaker's ``room.joined``."""
    config = {"room": room, "mode": "sfu", "language": "en"}
    listener = ClientPeer(url, "call", receive_audio=False,
                          config={**config, "name": "Lis", "role": "listener", "listen_language": "es"})
    speaker = ClientPeer(url, "call", receive_audio=False, config={**config, "name": "Ana"})
    peers += [listener, speaker]
    await listener.connect()
    await listener.wait_for("room.joined", timeout=DEADLINE_S)
    await speaker.connect()
    return listener, await speaker.wait_for("room.joined", timeout=DEADLINE_S)


@pytest.mark.parametrize("transport", ["ws", "http"])
async def test_the_room_comes_back_after_janus_restarts(start_server, tmp_path: Path, voices, transport: str) -> None:
    peers: list[ClientPeer] = []
    media: list[Any] = []
    with contextlib.ExitStack() as first:
        janus = first.enter_context(run_janus(tmp_path))
        server = await start_server(**_settings(janus, transport, sfu_reconnect_attempts=40))
        listener, joined = await _listener_and_speaker(server.url, "restart", peers)
        room_id = joined["sfu"]["room"]
        before = await listener.wait_for("room.sfu.updated", lambda e: "es" in e["interpreter_feeds"],
                                         timeout=DEADLINE_S)
        assert before["sfu_state"] == "connected" and before["reconnects"] == 0
        media += await _publish(janus, joined)
        await until(lambda: any(e["type"] == "caption.final" for e in listener.events), "a caption before")
        bridge = server.app[ROOMS].sfu.bridges["restart"]
        for item in reversed(media):
            await item.close()
        media.clear()
    # Janus is gone
    try:
        await listener.wait_for("room.sfu.updated", lambda e: e["sfu_state"] == "reconnecting", timeout=DEADLINE_S)
        assert not bridge.subscribers and bridge.interpreter_feeds == {}
        with run_janus(tmp_path, again=janus):
            back = await listener.wait_for("room.sfu.updated", lambda e: e["sfu_state"] == "connected"
                                           and e["reconnects"] == 1 and "es" in e["interpreter_feeds"],
                                           timeout=DEADLINE_S)
            assert bridge.room_id == room_id and back["listener_count"] == 1
            await until_async(lambda: _has(janus, room_id, "interpreter-es"), "the es feed published again")
            # the speaker's page publishes again with the token it had: subscribed and captioned again
            heard = len([e for e in listener.events if e["type"] == "caption.final"])
            media += await _publish(janus, joined)
            await until(lambda: bridge.subscribers, "the speaker's new feed subscribed")
            await until(lambda: len([e for e in listener.events if e["type"] == "caption.final"]) > heard,
                        "a caption after the restart")
            assert bridge.stats()["sfu_state"] == "connected" and bridge.stats()["reconnects"] == 1
            for item in reversed(media):
                await item.close()
            media.clear()
            for peer in peers:
                await peer.close()
            peers.clear()
    finally:
        for item in reversed(media):
            await item.close()
        for peer in peers:
            await peer.close()


async def _has(janus: Janus, room_id: int, display: str) -> bool:
    return display in await _publishing(janus, room_id)


async def _only_one(janus: Janus, room_id: int, display: str) -> bool:
    return (await _publishing(janus, room_id)).count(display) == 1


async def test_a_dropped_connection_finds_the_room_still_there(start_server, tmp_path: Path, voices) -> None:
    peers: list[ClientPeer] = []
    media: list[Any] = []
    with run_janus(tmp_path) as janus:
        server = await start_server(**_settings(janus, "ws", sfu_reconnect_attempts=10))
        try:
            listener, joined = await _listener_and_speaker(server.url, "blip", peers)
            bridge = server.app[ROOMS].sfu.bridges["blip"]
            await listener.wait_for("room.sfu.updated", lambda e: "es" in e["interpreter_feeds"], timeout=DEADLINE_S)
            # the speaker publishes a long stretch of bursts; rtc-agent's own socket to Janus then drops
            client = await JanusClient(janus.ws_url, api_secret=janus.api_secret).connect()
            publisher = FeedPublisher(client, joined["sfu"]["room"],
                                      PcmSourceTrack(bursts(count=12), 48000, tail="silence"),
                                      display=joined["sfu"]["display"], token=joined["sfu"]["token"])
            media += [client, publisher]
            await publisher.start()
            await until(lambda: bridge.subscribers, "the speaker subscribed")
            old_client = bridge.client
            await old_client.transport._ws.close()  # as a network cut would
            await listener.wait_for("room.sfu.updated", lambda e: e["sfu_state"] == "connected"
                                    and e["reconnects"] == 1 and "es" in e["interpreter_feeds"], timeout=DEADLINE_S)
            assert bridge.client is not old_client and bridge.client.connected
            heard = len([e for e in listener.events if e["type"] == "caption.final"])
            # the speaker never re-published: the new watcher found its feed and subscribed again
            await until(lambda: bridge.subscribers, "the speaker subscribed again")
            await until(lambda: len([e for e in listener.events if e["type"] == "caption.final"]) > heard,
                        "a caption after the drop")
            # one es feed: Janus ended the old session (its feed with it) when its socket closed
            await until_async(lambda: _only_one(janus, joined["sfu"]["room"], "interpreter-es"), "one es feed")
        finally:
            for item in reversed(media):
                await item.close()
            for peer in peers:
                await peer.close()


async def test_a_janus_that_stays_away_ends_lost_until_someone_joins(start_server, tmp_path: Path) -> None:
    peers: list[ClientPeer] = []
    config = {"room": "gone", "mode": "sfu", "language": "en"}
    try:
        with run_janus(tmp_path) as janus:
            server = await start_server(**_settings(janus, "ws", sfu_reconnect_attempts=2,
                                                    sfu_reconnect_delay_s=0.1, sfu_reconnect_max_delay_s=0.2))
            first = ClientPeer(server.url, "call", receive_audio=False, config={**config, "name": "Ana"})
            peers.append(first)
            await first.connect()
            room_id = (await first.wait_for("room.joined", timeout=DEADLINE_S))["sfu"]["room"]
        lost = await first.wait_for("room.sfu.updated", lambda e: e["sfu_state"] == "lost", timeout=DEADLINE_S)
        assert lost["reconnects"] == 0
        with run_janus(tmp_path, again=janus):
            # a joiner of a lost room is refused, and starts one more round of reconnects, which now succeeds
            late = ClientPeer(server.url, "call", receive_audio=False, config={**config, "name": "Ben"})
            with pytest.raises(SessionRefused) as refused:
                await late.connect()
            assert refused.value.status == 502 and refused.value.body["error"]["code"] == "sfu_reconnecting"
            await first.wait_for("room.sfu.updated", lambda e: e["sfu_state"] == "connected" and e["reconnects"] == 1,
                                 timeout=DEADLINE_S)
            again = ClientPeer(server.url, "call", receive_audio=False, config={**config, "name": "Ben"})
            peers.append(again)
            await again.connect()
            joined = await again.wait_for("room.joined", timeout=DEADLINE_S)
            assert joined["sfu"]["room"] == room_id and joined["sfu"]["token"]  # the same Janus room
            for peer in peers:
                await peer.close()
            peers.clear()
    finally:
        for peer in peers:
            await peer.close()
