"""Call rooms without models: membership events, room_full, room.signal validation and rate limit, the
transcript exports, interpretation pairs per (speaker, language), join links and their token scope."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import aiohttp
import numpy as np
import pytest

from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.room_registry import RoomRegistry
from rtc_agent.apps.call.signal_relay import MAX_SIGNAL_BYTES, SignalBucket
from rtc_agent.config import Settings
from rtc_agent.errors import AgentError
from rtc_agent.protocol.codec import encode
from rtc_agent.protocol.events import CaptionFinal, CaptionPartial, CaptionTranslation
from tests.fakes import ScriptedAppContext

KEY = "k" * 32


class FakeSink:
    def __init__(self) -> None:
        self.played: list[int] = []

    def play(self, pcm: np.ndarray, sample_rate: int, **_: Any) -> Any:
        self.played.append(len(pcm))
        loop = asyncio.get_running_loop()
        handle = type("H", (), {})()
        handle.id, handle.sent_ms, handle.done = "u", len(pcm) * 1000 // sample_rate, loop.create_future()
        handle.done.set_result(handle.sent_ms)
        return handle

    def clear(self) -> list[Any]:
        return []


class ParticipantContext(ScriptedAppContext):
    """A participant's session (session id ``pid``, no worker, a :class:`FakeSink` to speak into, 10 s on its
    clock) that keeps its events as the JSON objects the client receives."""

    def __init__(self, pid: str, settings: Settings) -> None:
        super().__init__(None, settings=settings, session_id=pid, speech=FakeSink(), ms=10_000)

    def emit(self, event: Any) -> None:
        self.events.append(encode(event, event_id="e", session_ms=0))

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]


def person(pid: str, settings: Settings, language: str = "en", listen: str | None = None, **kw: Any) -> Participant:
    return Participant(id=pid, name=pid.upper(), language=language, listen_language=listen or language,
                       ctx=ParticipantContext(pid, settings), **kw)


@pytest.fixture
def settings() -> Settings:
    return dataclasses.replace(Settings(), max_room_participants=3)


async def test_membership_events_and_room_full(settings):
    registry = RoomRegistry(settings)
    a, b, c, d = (person(x, settings) for x in "abcd")
    room = registry.join("r1", a)
    registry.join("r1", b)
    assert a.ctx.events[0]["type"] == "room.joined" and a.ctx.events[0]["participants"][0]["participant_id"] == "a"
    joined = b.ctx.events[0]
    assert joined["type"] == "room.joined" and [p["participant_id"] for p in joined["participants"]] == ["a", "b"]
    assert a.ctx.events[-1]["type"] == "room.participant.joined" and a.ctx.events[-1]["participant"]["name"] == "B"
    registry.join("r1", c)
    with pytest.raises(AgentError) as full:
        registry.join("r1", d)
    assert full.value.status == 409 and full.value.code == "room_full"
    with pytest.raises(AgentError):
        registry.check_room("r1")
    room.leave("b", "deleted")
    left = a.ctx.events[-1]
    assert left["type"] == "room.participant.left" and left["participant_id"] == "b" and left["reason"] == "deleted"
    a.mic_muted = True
    room.update(a)
    assert c.ctx.events[-1]["type"] == "room.participant.updated" and c.ctx.events[-1]["participant"]["mic_muted"]
    room.leave("a")
    room.leave("c")
    assert "r1" not in registry.rooms  # a room lives while it has participants


async def test_a_leaving_member_is_announced_gone_before_its_last_caption(settings):
    """A closing session tells the room at once (announce_leaving), still delivers its last final caption to the
    others and the transcript, is not listed to newcomers nor holds its name, and leave() says nothing twice."""
    registry = RoomRegistry(settings)
    a, b = person("a", settings), person("b", settings)
    room = registry.join("r", a)
    registry.join("r", b)
    room.announce_leaving("b", "deleted")
    room.announce_leaving("b", "deleted")
    assert [e["participant_id"] for e in a.ctx.events if e["type"] == "room.participant.left"] == ["b"]
    room.on_caption(b, CaptionFinal(segment_id="s9", text="Goodbye all", audio_start_ms=9000, audio_end_ms=9600))
    assert a.ctx.events[-1]["type"] == "caption.final" and a.ctx.events[-1]["speaker"]["participant_id"] == "b"
    assert [line.text for line in room.transcript.lines] == ["Goodbye all"]
    c = person("c", settings)
    c.name = "B"
    registry.join("r", c)
    joined = c.ctx.events[0]
    assert [p["participant_id"] for p in joined["participants"]] == ["a", "c"] and c.name == "B"
    room.leave("b", "deleted")
    assert [e["participant_id"] for e in a.ctx.events if e["type"] == "room.participant.left"] == ["b"]
    assert "b" not in room.participants
    room.leave("a")
    room.leave("c")


async def test_signal_relay_is_validated_and_rate_limited(settings):
    registry = RoomRegistry(settings)
    a, b = person("a", settings), person("b", settings)
    room = registry.join("r", a)
    registry.join("r", b)
    room.relay_signal(a, "b", "offer", {"type": "offer", "sdp": "v=0\r\n"})
    relayed = b.ctx.events[-1]
    assert relayed == {**relayed, "type": "room.signal", "from": "a", "to": "b", "kind": "offer"}
    room.relay_signal(a, "b", "candidate", {"candidate": "candidate:1 1 udp 1 1.2.3.4 5 typ host", "sdpMid": "0",
                                            "sdpMLineIndex": 0, "extra": {"x": 1}})
    assert b.ctx.events[-1]["payload"] == {"candidate": "candidate:1 1 udp 1 1.2.3.4 5 typ host", "sdpMid": "0",
                                           "sdpMLineIndex": 0}  # only what a browser uses is relayed
    room.relay_signal(a, "b", "candidate", None)
    bad = [("zz", "offer", {"type": "offer", "sdp": "x"}, "unknown_participant"),
           ("a", "offer", {"type": "offer", "sdp": "x"}, "unknown_participant"),  # to oneself
           ("b", "offer", {"sdp": 5}, "invalid_signal"),
           ("b", "answer", {"type": "offer", "sdp": "x"}, "invalid_signal"),
           ("b", "candidate", "nope", "invalid_signal"),
           ("b", "candidate", {"candidate": "c", "sdpMLineIndex": "0"}, "invalid_signal"),
           ("b", "offer", {"type": "offer", "sdp": "x" * (MAX_SIGNAL_BYTES + 1)}, "signal_too_large")]
    for to, kind, payload, code in bad:
        with pytest.raises(AgentError) as exc:
            room.relay_signal(a, to, kind, payload)
        assert exc.value.code == code, (to, kind)
    a.bucket = SignalBucket(rate=0.0, burst=2)
    room.relay_signal(a, "b", "candidate", None)
    room.relay_signal(a, "b", "candidate", None)
    with pytest.raises(AgentError) as limited:
        room.relay_signal(a, "b", "candidate", None)
    assert limited.value.status == 429


async def test_captions_fan_out_with_speaker_and_transcript_exports(settings):
    registry = RoomRegistry(settings)
    a, b = person("a", settings), person("b", settings, captions=False)
    room = registry.join("r", a)
    registry.join("r", b)
    room.on_caption(a, CaptionPartial(segment_id="s1", committed="hello", tentative="there", audio_start_ms=9000,
                                      audio_end_ms=9500))
    assert a.ctx.events[-1]["speaker"] == {"participant_id": "a", "name": "A"}
    assert "caption.partial" not in b.ctx.types()  # b asked for no captions
    b.captions = True
    room.on_caption(a, CaptionFinal(segment_id="s1", text="Hello <there> --> you", audio_start_ms=9000,
                                    audio_end_ms=9800))
    assert b.ctx.events[-1]["type"] == "caption.final" and b.ctx.events[-1]["speaker"]["name"] == "A"
    room.on_translation(a, CaptionTranslation(segment_id="s1", speaker=a.tag, language="en", text="Hi"))
    vtt = room.transcript.to_vtt()
    assert vtt.startswith("WEBVTT") and "<v A>Hello &lt;there&gt; --&gt; you" in vtt
    data = room.transcript.to_json()
    assert data["lines"][0]["name"] == "A" and data["lines"][0]["translations"] == {"en": "Hi"}
    room.leave("a")
    room.leave("b")
    assert registry.transcript("r").lines  # kept after the room ended
    with pytest.raises(AgentError):
        registry.transcript("nope")


async def test_one_pipeline_per_speaker_and_language(settings):
    settings = dataclasses.replace(settings, max_room_participants=4)
    registry = RoomRegistry(settings)
    es = person("es", settings, language="es")
    en1 = person("en1", settings, language="en")
    en2 = person("en2", settings, language="en", interpret=False)
    room = registry.join("r", es)
    assert room.pairs == {}
    registry.join("r", en1)
    registry.join("r", en2)
    # one pair per speaker and language: English speakers need nothing for English listeners; the Spanish speaker
    # gets the English speakers by text translation of their finals (speech translation gives English only)
    assert set(room.pairs) == {("es", "en"), ("en1", "es"), ("en2", "es")}
    pair = room.pairs[("es", "en")]
    assert pair.route == "speech" and room.pairs[("en1", "es")].route == "text"
    assert set(pair.sink.sinks) == {"en1"}  # only en1 asked to hear the interpretation
    auto = person("x", settings, language="auto", listen="es")
    registry.join("r", auto)
    # an auto speaker is not interpreted; x joins the Spanish listeners of the pairs there are
    assert set(room.pairs) == {("es", "en"), ("en1", "es"), ("en2", "es")}
    pair._on_text("Good morning", 0, 1000)
    tr = [e for e in en1.ctx.events if e["type"] == "caption.translation"]
    assert tr and tr[0]["speaker"]["participant_id"] == "es" and tr[0]["language"] == "en"
    assert not [e for e in es.ctx.events if e["type"] == "caption.translation"]
    room.leave("en1")
    assert set(pair.sink.sinks) == set()
    room.leave("en2")
    room.leave("x")
    assert room.pairs == {}
    await asyncio.sleep(0)
    assert all(t.cancelled() or t.done() for t in es.ctx.tasks)


# --- HTTP: join links, token scope, transcripts ------------------------------------------------------------

async def test_join_link_mints_room_scoped_client_tokens(start_server):
    server = await start_server(api_keys=[KEY])
    base = server.url
    auth = {"Authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/v1/rooms", json={}) as resp:
            assert resp.status == 401
        async with http.post(f"{base}/v1/rooms", json={"room": "team-1"}, headers=auth) as resp:
            assert resp.status == 201
            link = await resp.json()
        assert link["room"] == "team-1" and link["url"] == f"/call?room=team-1#join={link['join_token']}"
        join = {"Authorization": f"Bearer {link['join_token']}"}
        async with http.post(f"{base}/v1/tokens", json={"app": "call", "config": {"name": "Ann"}},
                             headers=join) as resp:
            assert resp.status == 201
            token = await resp.json()
        assert token["app"] == "call" and token["config"] == {"name": "Ann", "room": "team-1"}
        # the join link is not used up (everyone who got it joins with it) ...
        async with http.post(f"{base}/v1/tokens", json={"app": "call"}, headers=join) as resp:
            assert resp.status == 201
        # ... but it admits to its own room, its own app, and creates no session itself
        async with http.post(f"{base}/v1/tokens", json={"app": "call", "config": {"room": "other"}},
                             headers=join) as resp:
            assert resp.status == 403 and (await resp.json())["error"]["code"] == "token_scope"
        async with http.post(f"{base}/v1/tokens", json={"app": "captions"}, headers=join) as resp:
            assert resp.status == 403
        async with http.post(f"{base}/v1/sessions", json={"app": "call", "sdp": "v=0", "config": {"room": "team-1"}},
                             headers=join) as resp:
            assert resp.status == 403
        # a participant's client token cannot mint more tokens
        async with http.post(f"{base}/v1/tokens", json={"app": "call"},
                             headers={"Authorization": f"Bearer {token['value']}"}) as resp:
            assert resp.status in (401, 403)
        # its config fixes the room: a session for another room is refused by scope
        async with http.post(f"{base}/v1/sessions", json={"app": "call", "sdp": "v=0", "config": {"room": "other"}},
                             headers={"Authorization": f"Bearer {token['value']}"}) as resp:
            assert resp.status in (400, 403)
        async with http.get(f"{base}/v1/rooms/team-1/transcript.json", headers=join) as resp:
            assert resp.status == 404  # no such room yet: nobody joined
        async with http.get(f"{base}/v1/rooms/other/transcript.json", headers=join) as resp:
            assert resp.status == 403
        async with http.get(f"{base}/v1/rooms/team-1/transcript.vtt") as resp:
            assert resp.status == 401
        async with http.post(f"{base}/v1/rooms", json={"room": "bad name!"}, headers=auth) as resp:
            assert resp.status == 400


async def test_call_config_is_validated(server):
    from rtc_agent.apps.call.app import CallApp

    settings = Settings()
    ok = CallApp.validate_config({"room": "r", "name": " Ann\x00 ", "language": "es"}, settings)
    assert ok == {"room": "r", "name": "Ann", "language": "es", "listen_language": "es", "captions": True,
                  "interpret": True, "listen_speech": True, "mic_muted": False, "camera_muted": False,
                  "role": "speaker"}
    assert CallApp.validate_config({"room": "r"}, settings)["listen_language"] == "en"
    for bad in ({}, {"room": "a b"}, {"room": "r", "language": "xx"}, {"room": "r", "captions": "yes"},
                {"room": "r", "video": True}):
        with pytest.raises(AgentError):
            CallApp.validate_config(bad, settings)
    async with aiohttp.ClientSession() as http, http.post(
            f"{server.url}/v1/sessions", json={"app": "call", "sdp": "v=0", "config": {"room": "no spaces"}}) as resp:
        assert resp.status == 400 and (await resp.json())["error"]["code"] == "invalid_config"


async def test_call_page_is_served(server):
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/call?room=abc") as resp:
        assert resp.status == 200
        html = await resp.text()
    for needle in ('id="tiles"', 'id="speak-language"', 'id="listen-language"', 'id="copy-link"', 'id="leave"',
                   'id="download-vtt"', '"app": "call"', 'href="/call"'):
        assert needle in html, needle
    async with aiohttp.ClientSession() as http:
        for path in ("/static/js/apps/call.js", "/static/js/mesh.js", "/static/css/call.css"):
            async with http.get(f"{server.url}{path}") as resp:
                assert resp.status == 200, path


async def test_fanout_sink_plays_one_synthesis_on_every_listener(settings):
    from rtc_agent.apps.call.speech_fanout import FanoutSink

    sink = FanoutSink()
    empty = sink.play(np.zeros(480, dtype=np.int16), 48000)
    assert empty.done.done() and empty.sent_ms == 0  # nobody listening: nothing waits
    a, b = FakeSink(), FakeSink()
    sink.sinks.update({"a": a, "b": b})
    handle = sink.play(np.zeros(4800, dtype=np.int16), 48000, utterance_id="u1")
    await asyncio.wait_for(handle.done, 1)
    assert a.played == b.played == [4800] and handle.sent_ms == 100


async def test_session_update_changes_languages_and_mute_live(settings):
    from rtc_agent.apps.call.app import CallApp

    settings = dataclasses.replace(settings, max_room_participants=4)
    apps = []
    registry = RoomRegistry(settings)
    for pid, language in (("es", "es"), ("en", "en")):
        ctx = ParticipantContext(pid, settings)
        app = CallApp(ctx, CallApp.validate_config({"room": "upd", "name": pid, "language": language}, settings))
        app.room = registry.join("upd", app.participant)
        apps.append(app)
    es, en = apps
    room = es.room
    assert set(room.pairs) == {("es", "en"), ("en", "es")}
    en._update({"listen_language": "es"})  # the English speaker now wants Spanish: nobody needs English
    assert set(room.pairs) == {("en", "es")} and en.ctx.types()[-2:] == ["session.updated", "room.participant.updated"]
    assert es.ctx.events[-1]["type"] == "room.participant.updated"
    assert es.ctx.events[-1]["participant"]["listen_language"] == "es"
    es._update({"language": "en", "listen_language": "en"})
    en._update({"listen_language": "en", "mic_muted": True})
    assert room.pairs == {} and es.ctx.events[-1]["participant"]["mic_muted"] is True
    es._update({"language": "fr"})
    assert set(room.pairs) == {("es", "en")} and room.pairs[("es", "en")].config["source_language"] == "fr"
    before = dict(es.config)
    for bad in ({"room": "other"}, {"volume": 3}, {"captions": "no"}, "x", {"language": "de", "captions": "no"},
                {"name": "Zed", "listen_language": "xx"}):
        with pytest.raises(AgentError):
            es._update(bad)
    assert es.config == before and es.participant.language == "fr"  # a refused update changes nothing
    room.leave("es")
    room.leave("en")
