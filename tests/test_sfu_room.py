"""SFU rooms through a real Janus (tests/janus.py) and a real rtc-agent server, with scripted engines.

Two aiortc "speakers" publish audio to Janus themselves (with the token rtc-agent gave each) while holding their
call sessions for events; three listener sessions in two languages. Every participant's event channel gets both
speakers' captions labelled by speaker; rtc-agent publishes exactly one interpreter feed per listen language in
use, and a listener subscribed to its language's feed through Janus receives the interpretation's audio; the
last listener of a language leaving unpublishes its feed; a join without a valid token is refused by Janus;
``room.hand`` reaches the others; the Janus room is destroyed when the room ends. Plus the refusals: an SFU room
without an SFU, a listener in a mesh room, ``room.hand`` in a mesh room, and join links that carry the mode.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from rtc_agent.apps.interpret import deliverable
from rtc_agent.rtc.client import ClientPeer, SessionRefused
from rtc_agent.rtc.sfu import FeedPublisher, FeedSubscriber, JanusClient, JanusError, videoroom
from rtc_agent.rtc.sources import PcmSourceTrack
from rtc_agent.server.keys import ROOMS
from rtc_agent.worker import Worker
from tests.fakes import ScriptedASR, ScriptedMT, ScriptedTTS, ScriptedVAD, loud_above, register
from tests.janus import Janus, requires_janus, run_janus

pytestmark = requires_janus

SAID = "Good morning everyone."
DEADLINE_S = 60.0  # generous: a loaded machine; tests wait for properties, never for moments


@pytest.fixture(scope="module")
def janus(tmp_path_factory: pytest.TempPathFactory) -> Janus:
    with run_janus(Path(tmp_path_factory.mktemp("janus"))) as server:
        yield server


@pytest.fixture
def every_voice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A voice for every language on the worker's ``tts`` engine (the scripted synthesizer)."""
    monkeypatch.setattr(deliverable, "_voice_for", lambda settings, language: {"engine": "tts", "voice": "v"})


class ToneTTS(ScriptedTTS):
    """The scripted synthesizer speaking a 300 Hz tone (a constant level would not survive Opus's high-pass)."""

    def run_batch(self, requests: list[Any]) -> list[Any]:
        out = super().run_batch(requests)
        return [synthesis if isinstance(synthesis, Exception) else dataclasses.replace(
            synthesis, pcm=(np.sin(2 * np.pi * 300 * np.arange(synthesis.pcm.size) / synthesis.sample_rate)
                            * self.level).astype(np.int16)) for synthesis in out]


def scripted_worker(_settings: Any) -> Worker:
    worker = Worker()
    register(worker, "vad", ScriptedVAD(loud_above(0.05)), max_queue=256)
    register(worker, "asr", ScriptedASR(lambda request: SAID))
    register(worker, "mt", ScriptedMT())
    register(worker, "tts", ToneTTS(seconds=lambda text: 0.8, level=8000))
    return worker


def bursts(count: int = 3, seconds: float = 1.2, gap_s: float = 1.5) -> np.ndarray:
    """Loud tones between silences (48 kHz int16): the scripted detector hears one utterance per tone."""
    rate = 48_000
    t = np.arange(int(seconds * rate)) / rate
    tone = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype(np.int16)
    quiet = np.zeros(int(gap_s * rate), dtype=np.int16)
    return np.concatenate([quiet, *[np.concatenate([tone, quiet]) for _ in range(count)]])


async def until(condition: Callable[[], Any], what: str | Callable[[], str], timeout: float = DEADLINE_S) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, f"not reached: {what() if callable(what) else what}"
        await asyncio.sleep(0.1)


async def until_async(condition: Callable[[], Awaitable[Any]], what: str, timeout: float = DEADLINE_S) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await condition()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, f"not reached: {what}"
        await asyncio.sleep(0.2)


async def displays(admin: Any, room_id: int) -> list[str]:
    return sorted(str(p.get("display")) for p in await videoroom.list_participants(admin, room_id))


async def test_an_sfu_room_through_janus(start_server, janus: Janus, every_voice) -> None:
    server = await start_server(make_worker=scripted_worker, mt_engine="auto", sfu_url=janus.ws_url,
                                sfu_api_secret=janus.api_secret, max_room_participants=2)
    room = "webinar"
    peers: list[ClientPeer] = []
    janus_client = await JanusClient(janus.ws_url, api_secret=janus.api_secret).connect()
    admin = await janus_client.attach(videoroom.PLUGIN)
    publishers: list[FeedPublisher] = []
    subscriber: FeedSubscriber | None = None

    async def join(name: str, role: str, listen: str) -> ClientPeer:
        peer = ClientPeer(server.url, "call", receive_audio=False,
                          config={"room": room, "mode": "sfu", "name": name, "language": "en",
                                  "listen_language": listen, "role": role})
        peers.append(peer)
        await peer.connect()
        await peer.wait_for("room.joined", timeout=DEADLINE_S)
        return peer

    try:
        # three listeners in two languages: one interpreter feed each for es and de
        listeners = [await join("L1", "listener", "es"), await join("L2", "listener", "es"),
                     await join("L3", "listener", "de")]
        joined = next(e for e in listeners[0].events if e["type"] == "room.joined")
        assert joined["mode"] == "sfu" and joined["participants"][0]["role"] == "listener"
        sfu = joined["sfu"]
        assert sfu["url"] == janus.ws_url and sfu["display"] == joined["participant_id"] and sfu["token"]
        assert janus.api_secret not in str(joined)  # the API secret never reaches a page
        room_id = sfu["room"]
        await until_async(lambda: _has_feeds(admin, room_id, ["interpreter-de", "interpreter-es"]),
                          "one interpreter feed per listen language")
        assert not [e for e in listeners[0].events if e["type"] == "error"]
        update = await listeners[2].wait_for("room.sfu.updated", lambda e: set(e["interpreter_feeds"]) == {"es", "de"},
                                             timeout=DEADLINE_S)
        assert update["listener_count"] == 3
        # a join without a valid token is refused by Janus
        stranger = await janus_client.attach(videoroom.PLUGIN)
        with pytest.raises(JanusError):
            await videoroom.join_publisher(stranger, room_id, display="eve", token="not-a-token")
        # listener L1 hears its language's feed through Janus, with its own token
        heard: list[np.ndarray] = []
        es_feed = update["interpreter_feeds"]["es"]
        es_entry = next(p for p in await videoroom.list_participants(admin, room_id) if p["id"] == es_feed)
        assert es_entry["publisher"]
        subscriber = FeedSubscriber(janus_client, room_id, es_feed, [{"feed": es_feed}], token=sfu["token"],
                                    sink=lambda pcm, start_ms: heard.append(pcm))
        await subscriber.start()

        # two speakers: call sessions for events, their audio published to Janus by the peers themselves
        speakers = [await join("Ana", "speaker", "en"), await join("Ben", "speaker", "en")]
        for speaker in speakers:
            mine = next(e for e in speaker.events if e["type"] == "room.joined")
            publisher = FeedPublisher(janus_client, room_id, PcmSourceTrack(bursts(), 48000, tail="silence"),
                                      display=mine["sfu"]["display"], token=mine["sfu"]["token"])
            publishers.append(publisher)
            await publisher.start()
        speaker_ids = {next(e for e in s.events if e["type"] == "room.joined")["participant_id"] for s in speakers}

        # every participant's channel gets both speakers' captions, labelled
        for peer in [*listeners, *speakers]:
            await until(lambda peer=peer: speaker_ids <= {e["speaker"]["participant_id"] for e in peer.events
                                                          if e["type"] == "caption.final"},
                        "captions of both speakers on every channel")
            assert all(e["text"] == SAID for e in peer.events if e["type"] == "caption.final")
        # the speakers' feed ids are announced
        await until(lambda: {e["participant"]["participant_id"] for e in listeners[0].events
                             if e["type"] == "room.participant.updated" and e["participant"].get("feed_id")}
                    >= speaker_ids, "feed ids of both speakers")
        # translations in each listener's language, and the es interpretation's audio through Janus
        for listener, language in zip(listeners, ("es", "es", "de"), strict=True):
            await until(lambda listener=listener: any(e["type"] == "caption.translation" for e in listener.events),
                        "a translation for every listener")
            assert {e["language"] for e in listener.events if e["type"] == "caption.translation"} == {language}
        bridge = server.app[ROOMS].sfu.bridges[room]
        await until(lambda: sum(1 for pcm in heard if pcm.size and np.abs(pcm).max() > 500) >= 10,  # 200 ms
                    lambda: f"interpretation audio on the es feed: heard {len(heard)} chunks, peak "
                            f"{max((int(np.abs(p).max()) for p in heard if p.size), default=0)}; feed sent "
                            f"{bridge.feeds['es'].speech.speech_frames_sent} speech frames; "
                            f"{server.app[ROOMS].rooms[room].stats()['interpretation']}")

        # a raised hand reaches the others
        listeners[0].send({"type": "room.hand", "raised": True})
        raised = await speakers[0].wait_for("room.participant.updated",
                                            lambda e: e["participant"].get("hand_raised"), timeout=DEADLINE_S)
        assert raised["participant"]["role"] == "listener" and "feed_id" not in raised["participant"]

        # the last listener of de leaves: its feed is unpublished, once
        await listeners[2].close()
        peers.remove(listeners[2])
        await until_async(lambda: _has_feeds(admin, room_id, ["interpreter-es"]), "the de feed unpublished")
        await listeners[0].wait_for("room.sfu.updated", lambda e: set(e["interpreter_feeds"]) == {"es"}
                                    and e["listener_count"] == 2, timeout=DEADLINE_S)
        # the room ends: the Janus room is destroyed
        for peer in list(peers):
            await peer.close()
            peers.remove(peer)
        await until_async(lambda: _room_gone(admin, room_id), "the Janus room destroyed")
    finally:
        if subscriber is not None:
            await subscriber.close()
        for publisher in publishers:
            await publisher.close()
        for peer in peers:
            await peer.close()
        await janus_client.close()


async def _has_feeds(admin: Any, room_id: int, wanted: list[str]) -> bool:
    publishing = [p for p in await videoroom.list_participants(admin, room_id) if p.get("publisher")]
    return sorted(str(p["display"]) for p in publishing if str(p["display"]).startswith("interpreter-")) == wanted


async def _room_gone(admin: Any, room_id: int) -> bool:
    try:
        await videoroom.list_participants(admin, room_id)
    except JanusError:
        return True
    return False


async def test_refusals_and_join_links(start_server, janus: Janus) -> None:
    plain = await start_server(make_worker=scripted_worker)
    with pytest.raises(SessionRefused) as no_sfu:
        await ClientPeer(plain.url, "call", receive_audio=False, config={"room": "r", "mode": "sfu"}).connect()
    assert no_sfu.value.status == 400 and no_sfu.value.body["error"]["code"] == "sfu_unavailable"
    with pytest.raises(SessionRefused) as mesh_listener:
        await ClientPeer(plain.url, "call", receive_audio=False, config={"room": "r", "role": "listener"}).connect()
    assert mesh_listener.value.body["error"]["code"] == "invalid_config"
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{plain.url}/v1/rooms", json={"room": "big", "mode": "sfu"}) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["code"] == "sfu_unavailable"
        async with http.post(f"{plain.url}/v1/rooms", json={"room": "big", "size": 50}) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["code"] == "sfu_unavailable"
        async with http.post(f"{plain.url}/v1/rooms", json={"room": "small"}) as resp:
            body = await resp.json()
            assert resp.status == 201 and body["mode"] == "mesh" and "mode=" not in body["url"]
        with_sfu = await start_server(make_worker=scripted_worker, sfu_url=janus.ws_url,
                                      sfu_api_secret=janus.api_secret)
        async with http.post(f"{with_sfu.url}/v1/rooms", json={"room": "talk", "size": 50}) as resp:
            body = await resp.json()
            assert resp.status == 201 and body["mode"] == "sfu" and "mode=sfu" in body["url"]
            assert body["max_participants"] == 316
        async with http.post(f"{with_sfu.url}/v1/rooms", json={"room": "talk", "mode": "meh"}) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["code"] == "invalid_mode"
        async with http.get(f"{with_sfu.url}/health") as resp:
            assert janus.api_secret not in await resp.text()
    # the planned room opens as an SFU room without "mode" in the config; a hand in a mesh room is refused
    planned = ClientPeer(with_sfu.url, "call", receive_audio=False, config={"room": "talk", "language": "en"})
    mesh = ClientPeer(with_sfu.url, "call", receive_audio=False, config={"room": "meshy", "language": "en"})
    try:
        await planned.connect()
        joined = await planned.wait_for("room.joined", timeout=DEADLINE_S)
        assert joined["mode"] == "sfu" and joined["listener_count"] == 0 and joined["sfu"]["room"]
        await mesh.connect()
        mesh_joined = await mesh.wait_for("room.joined", timeout=DEADLINE_S)
        assert mesh_joined["mode"] == "mesh" and mesh_joined["sfu"] is None
        mesh.send({"type": "room.hand", "raised": True})
        refused = await mesh.wait_for("error", timeout=DEADLINE_S)
        assert refused["error"]["code"] == "not_sfu_room"
    finally:
        await planned.close()
        await mesh.close()


class CountingBridge:
    """What a room asks of its SFU bridge, without Janus: the listing rule of :class:`SfuBridge` (speakers always,
    listeners while at most 20) over the members the test adds."""

    max_participants = 100

    def __init__(self) -> None:
        self.members: list[Any] = []

    def listed(self, p: Any) -> bool:
        return p.role == "speaker" or sum(1 for m in self.members if m.role == "listener") <= 20

    def joined_fields(self, p: Any) -> dict[str, Any]:
        return {"mode": "sfu", "listener_count": sum(1 for m in self.members if m.role == "listener"), "sfu": {}}


async def test_past_20_listeners_only_counts_travel() -> None:
    from rtc_agent.apps.call.room_registry import RoomRegistry
    from rtc_agent.config import Settings
    from tests.test_rooms import person

    settings = Settings()
    registry, bridge = RoomRegistry(settings), CountingBridge()
    speaker = person("s", settings, sfu=bridge)
    bridge.members.append(speaker)
    room = registry.join("big", speaker)
    listeners = []
    for i in range(22):
        p = person(f"l{i}", settings, role="listener", sfu=bridge)
        bridge.members.append(p)
        registry.join("big", p)
        listeners.append(p)
    joined = [e["participant"]["participant_id"] for e in speaker.ctx.events if e["type"] == "room.participant.joined"]
    assert joined == [f"l{i}" for i in range(20)]  # the 21st and 22nd listener are counted, not announced
    last = listeners[-1].ctx.events[0]
    assert last["type"] == "room.joined" and last["listener_count"] == 22
    assert {p["participant_id"] for p in last["participants"]} == {"s", "l21"}  # speakers and itself
    assert room.max_participants == 100 and not room.pairs  # listeners say nothing: no pairs of theirs
    for p in [speaker, *listeners]:
        room.leave(p.id)


async def test_listeners_do_not_use_up_the_call_capacity(start_server, janus: Janus) -> None:
    server = await start_server(make_worker=scripted_worker, sfu_url=janus.ws_url, sfu_api_secret=janus.api_secret,
                                capacity_sessions=["call=1"])
    config = {"room": "cap", "mode": "sfu", "language": "en"}
    peers = [ClientPeer(server.url, "call", receive_audio=False, config={**config, "name": "Speaker"})]
    peers += [ClientPeer(server.url, "call", receive_audio=False, config={**config, "name": f"L{i}",
                                                                          "role": "listener"}) for i in range(3)]
    second = ClientPeer(server.url, "call", receive_audio=False, config={**config, "name": "Second"})
    try:
        for peer in peers:
            await peer.connect()
            await peer.wait_for("room.joined", timeout=DEADLINE_S)
        with pytest.raises(SessionRefused) as busy:  # a second speaker is one more media session: refused
            await second.connect()
        assert busy.value.status == 503 and busy.value.body["error"]["code"] == "server_busy"
        last = await peers[0].wait_for("room.sfu.updated", lambda e: e["listener_count"] == 3, timeout=DEADLINE_S)
        assert last["room"] == "cap"
    finally:
        for peer in peers:
            await peer.close()


async def test_a_listener_session_runs_no_captions_pipeline(start_server, janus: Janus) -> None:
    asr = ScriptedASR(lambda request: SAID)

    def worker_with(_settings: Any) -> Worker:
        worker = Worker()
        register(worker, "vad", ScriptedVAD(loud_above(0.05)), max_queue=256)
        register(worker, "asr", asr)
        return worker

    server = await start_server(make_worker=worker_with, sfu_url=janus.ws_url, sfu_api_secret=janus.api_secret)
    config = {"room": "quiet", "mode": "sfu", "language": "en"}
    speaker = ClientPeer(server.url, "call", receive_audio=False, config={**config, "name": "Ana"})
    # a listener whose session even carries loud audio up: none of it is transcribed
    listener = ClientPeer(server.url, "call", receive_audio=False, audio=PcmSourceTrack(bursts(), 48000),
                          config={**config, "name": "Lis", "role": "listener"})
    try:
        await speaker.connect()
        await speaker.wait_for("room.joined", timeout=DEADLINE_S)
        await listener.connect()
        created = await listener.wait_for("session.created", timeout=DEADLINE_S)
        await listener.wait_for("room.joined", timeout=DEADLINE_S)
        assert created["session"]["engines"] == {}
        info = await until_async(lambda: _received_at_least(listener, 3000), "3 s of the listener's audio received")
        assert info["engines"] == {} and info["app_stats"]["captions"] is None
        assert (await speaker.session_info())["app_stats"]["captions"] is not None  # a speaker has its pipeline
        assert asr.requests == []
    finally:
        await listener.close()
        await speaker.close()


async def _received_at_least(peer: ClientPeer, ms: int) -> dict[str, Any] | None:
    info = await peer.session_info()
    return info if info["audio"]["received_ms"] >= ms else None
