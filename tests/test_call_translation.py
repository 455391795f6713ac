"""Interpretation into every listener's language, honest about what the server can do (no models).

A listener who leaves (its speech track ended) never stops the others' interpretation; the capabilities say per
language what text and speech a listener gets; a listen language the server cannot serve is refused with
``unsupported_language`` and changes nothing; a pair that speech translation cannot produce takes the text route
(caption finals -> the ``mt`` engine -> the same events, each with its source -> one synthesis in the target
language for the listeners who hear speech); a late joiner gets the recent lines with their sources; the
text route's backlog is bounded (a muted speaker's finals go first) and pairs are admitted within capacity.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import aiohttp
import numpy as np
import pytest

from rtc_agent.apps.call.app import CallApp
from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.room_registry import RoomRegistry
from rtc_agent.apps.interpret import deliverable
from rtc_agent.apps.interpret.config import resolve_config
from rtc_agent.config import Settings
from rtc_agent.errors import AgentError
from rtc_agent.protocol.codec import encode
from rtc_agent.protocol.events import CaptionFinal
from rtc_agent.rtc.speech_output import SpeechOutput
from rtc_agent.worker import Worker
from tests.fakes import ScriptedAppContext, ScriptedTTS, register
from tests.fakes.mt import ScriptedMT

NO_MT = {"mt_engine": "none"}


class SessionContext(ScriptedAppContext):
    """One participant's session: a real worker, a real speech track, events kept as the JSON the client gets."""

    def __init__(self, pid: str, settings: Settings, worker: Worker) -> None:
        super().__init__(worker, settings=settings, session_id=pid, speech=SpeechOutput(), ms=10_000)

    def emit(self, event: Any) -> None:
        self.events.append(encode(event, event_id="e", session_ms=0))

    def of(self, kind: Any) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


def member(pid: str, settings: Settings, worker: Worker, language: str, listen: str, **kw: Any) -> Participant:
    return Participant(id=pid, name=pid.capitalize(), language=language, listen_language=listen,
                       ctx=SessionContext(pid, settings, worker), **kw)


@pytest.fixture
async def worker():
    w = Worker()
    yield w
    await w.close()


@pytest.fixture
def settings() -> Settings:
    return dataclasses.replace(Settings(), max_room_participants=6, mt_engine="auto")


@pytest.fixture
def every_voice(monkeypatch):
    """A voice for every language on the worker's ``tts`` engine (what a multi-voice TTS gives)."""
    monkeypatch.setattr(deliverable, "_voice_for", lambda settings, language: {"engine": "tts", "voice": "v"})


async def until(condition, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def final(segment: str, text: str, end_ms: int = 9_000, language: str | None = None) -> CaptionFinal:
    return CaptionFinal(segment_id=segment, text=text, audio_start_ms=end_ms - 900, audio_end_ms=end_ms,
                        language=language)


async def close_room(room) -> None:
    for pid in list(room.participants):
        room.leave(pid)
    await asyncio.sleep(0)


# --- 1. a listener who leaves ---------------------------------------------------------------------------------

async def test_a_listener_who_leaves_never_stops_the_others_interpretation(settings, worker):
    tts = register(worker, "tts", ScriptedTTS(seconds=lambda text: 0.05))
    registry = RoomRegistry(settings)
    es = member("es", settings, worker, "es", "en")
    en1, en2 = (member(p, settings, worker, "en", "en") for p in ("en1", "en2"))
    room = registry.join("r", es)
    registry.join("r", en1)
    registry.join("r", en2)
    pair = room.pairs[("es", "en")]
    assert set(pair.sink.sinks) == {"en1", "en2"}
    en1.ctx.speech.stop()  # en1's session ends: its track is gone before the room hears it left
    pair._on_text("Good morning everyone", 0, 9_000)
    await until(lambda: len(tts.ran) == 1 and en2.ctx.speech.busy)
    await asyncio.sleep(0.05)
    assert not pair.tasks[-1].done()  # the speech task lives on
    assert set(pair.sink.sinks) == {"en2"} and pair.sink.gone == 1  # the gone listener is dropped
    room.leave("en1")
    pair._on_text("and welcome", 1_000, 9_500)
    await until(lambda: len(en2.ctx.of("translation.speech.started")) == 2)
    assert [e["text"] for e in en2.ctx.of("translation.speech.started")] == ["Good morning everyone", "and welcome"]
    await close_room(room)


# --- 2. honest capabilities and refusals ----------------------------------------------------------------------

async def test_capabilities_say_per_language_what_a_listener_gets(settings, every_voice):
    languages = ("en", "es", "de")
    with_mt = deliverable.listen_options(settings, languages)
    assert set(with_mt["en"]) == {"text", "speech", "engine", "voice", "quality", "reason"}
    assert with_mt["en"]["text"] and "whisper" in with_mt["en"]["engine"]  # speech translation gives English
    for language in ("es", "de"):
        assert with_mt[language]["text"] and with_mt[language]["speech"] and with_mt[language]["reason"] is None
    bare = deliverable.listen_options(dataclasses.replace(settings, **NO_MT), languages)
    assert bare["en"]["text"]
    for language in ("es", "de"):
        entry = bare[language]
        assert not entry["text"] and not entry["speech"] and language in entry["reason"] and entry["engine"] is None


async def test_capabilities_without_a_voice_offer_text_only(settings, monkeypatch):
    monkeypatch.setattr(deliverable, "_voice_for", lambda s, language: None if language != "en" else "tts")
    options = deliverable.listen_options(settings, ("en", "es"))
    assert options["en"]["speech"] and options["es"]["text"] and not options["es"]["speech"]
    assert "voice" in options["es"]["reason"]


async def test_a_listen_language_the_server_cannot_serve_is_refused(settings, worker):
    bare = dataclasses.replace(settings, **NO_MT)
    with pytest.raises(AgentError) as refused:
        CallApp.validate_config({"room": "r", "language": "en", "listen_language": "de"}, bare)
    assert refused.value.code == "unsupported_language" and "'de'" in refused.value.message
    assert CallApp.validate_config({"room": "r", "language": "de"}, bare)["listen_language"] == "de"  # own language
    assert CallApp.validate_config({"room": "r", "language": "en", "listen_language": "de"},
                                   settings)["listen_language"] == "de"  # by text translation
    app = CallApp(SessionContext("a", bare, worker), CallApp.validate_config({"room": "r", "language": "en"}, bare))
    before = dict(app.config)
    with pytest.raises(AgentError) as live:
        app._update({"listen_language": "de", "captions": False})
    assert live.value.code == "unsupported_language"
    assert app.config == before and app.participant.listen_language == "en" and app.participant.captions
    # the interpret app: a target its speech translation cannot produce, and its config as it was
    config = resolve_config({"source_language": "es"}, bare)
    with pytest.raises(AgentError) as target:
        resolve_config({"target_language": "de"}, bare, base=config)
    assert target.value.code == "unsupported_language" and config["target_language"] == "en"


async def test_session_creation_refuses_an_unservable_listen_language(start_server):
    server = await start_server(mt_engine="none")
    body = {"app": "call", "sdp": "v=0", "config": {"room": "r", "language": "en", "listen_language": "ja"}}
    async with aiohttp.ClientSession() as http, http.post(f"{server.url}/v1/sessions", json=body) as resp:
        assert resp.status == 400 and (await resp.json())["error"]["code"] == "unsupported_language"


# --- 3. any pair, by the best engine --------------------------------------------------------------------------

async def test_the_text_route_brings_every_speaker_into_every_listeners_language(settings, worker, every_voice):
    mt = register(worker, "mt", ScriptedMT())
    tts = register(worker, "tts", ScriptedTTS(seconds=lambda text: 0.02))
    registry = RoomRegistry(settings)
    ana = member("ana", settings, worker, "es", "es")
    ben = member("ben", settings, worker, "en", "en")
    chen = member("chen", settings, worker, "de", "en", listen_speech=False)
    room = registry.join("r", ana)
    registry.join("r", ben)
    registry.join("r", chen)
    assert room.pairs[("ben", "es")].route == "text" and room.pairs[("chen", "es")].route == "text"
    assert room.pairs[("ana", "en")].route == "speech" and room.pairs[("chen", "en")].route == "speech"
    assert set(room.pairs[("ana", "en")].sink.sinks) == {"ben"}  # Chen asked for text only
    for i, text in enumerate(("Good morning.", "The build is green.", "Ship it today.")):
        room.on_caption(ben, final(f"ben_{i}", text, 9_000 + 1_000 * i, language="en"))
    await until(lambda: len(ana.ctx.of("caption.translation")) == 3)
    lines = ana.ctx.of("caption.translation")
    assert [line["segment_id"] for line in lines] == ["ben_0", "ben_1", "ben_2"]  # in order, each with its source
    for line, request in zip(lines, mt.requests, strict=True):
        assert line["source_text"] == request.text and line["route"] == "text" and line["language"] == "es"
        assert line["speaker"]["participant_id"] == "ben" and line["text"]
    assert [r.context for r in mt.requests][1] == (("Good morning.", lines[0]["text"]),)  # the previous final
    chunks = ana.ctx.of("translation.chunk")
    assert [c["source_text"] for c in chunks] == [r.text for r in mt.requests] and {c["action"] for c in chunks} == {
        "EMIT"}
    await until(lambda: len(tts.ran) == 3)
    assert {r.language for r in tts.ran} == {"es"}  # one synthesis per text, in the listener's language
    assert not ben.ctx.of("caption.translation") and not chen.ctx.of("caption.translation")
    assert room.transcript.lines[-1].translations["es"] == lines[-1]["text"]
    await close_room(room)


async def test_a_late_joiner_gets_recent_lines_with_their_sources(settings, worker):
    register(worker, "mt", ScriptedMT())
    registry = RoomRegistry(dataclasses.replace(settings, room_replay_lines=2))
    ana, ben = member("ana", settings, worker, "es", "es"), member("ben", settings, worker, "en", "en")
    room = registry.join("r", ana)
    registry.join("r", ben)
    for i, text in enumerate(("One.", "Two.", "Three.")):
        room.on_caption(ben, final(f"b{i}", text, 9_000 + 1_000 * i, language="en"))
    await until(lambda: len(ana.ctx.of("caption.translation")) == 3)
    dana = member("dana", settings, worker, "fr", "es")
    registry.join("r", dana)
    finals = dana.ctx.of("caption.final")
    replayed = dana.ctx.of("caption.translation")
    assert [f["text"] for f in finals] == ["Two.", "Three."] and all(f["speaker"]["name"] == "Ben" for f in finals)
    assert [(t["segment_id"], t["source_text"]) for t in replayed] == [("b1", "Two."), ("b2", "Three.")]
    assert all(t["replayed"] for t in replayed)
    await close_room(room)


# --- 4. keeping up, or saying so ------------------------------------------------------------------------------

async def test_the_text_backlog_is_bounded_and_a_muted_speaker_goes_first(settings, worker):
    mt = register(worker, "mt", ScriptedMT())
    mt.gate = threading.Event()  # translations wait: the backlog builds
    registry = RoomRegistry(dataclasses.replace(settings, room_mt_backlog=3))
    ana = member("ana", settings, worker, "es", "es")
    ben, cara = member("ben", settings, worker, "en", "en"), member("cara", settings, worker, "en", "en")
    room = registry.join("r", ana)
    registry.join("r", ben)
    registry.join("r", cara)
    try:
        room.on_caption(ben, final("b0", "first words", language="en"))
        await until(lambda: not room.pairs[("ben", "es")].pending)  # b0 is in flight, held by the gate
        cara.mic_muted = True
        room.on_caption(cara, final("c0", "muted words", language="en"))
        room.on_caption(ben, final("b1", "second", language="en"))
        room.on_caption(ben, final("b2", "third", language="en"))
        room.on_caption(ben, final("b3", "fourth", language="en"))  # four waiting, three allowed
        drops = ana.ctx.of("translation.speech.catchup")
        assert [(d["action"], d["segment_id"], d["reason"]) for d in drops] == [("drop", "c0", "muted")]
        assert drops[0]["skipped_text"] == "muted words" and drops[0]["lag_ms"] >= 0
        cara.mic_muted = False
        for i in range(4, 7):
            room.on_caption(ben, final(f"b{i}", f"more {i}", language="en"))
        assert sum(len(p.pending) for p in room.pairs.values() if hasattr(p, "pending")) == 3
        dropped = [d["segment_id"] for d in ana.ctx.of("translation.speech.catchup")][1:]
        assert dropped == ["b1", "b2", "b3"]  # then the oldest
    finally:
        mt.gate.set()
    await until(lambda: len(ana.ctx.of("caption.translation")) == 4)
    assert [t["segment_id"] for t in ana.ctx.of("caption.translation")] == ["b0", "b4", "b5", "b6"]
    await close_room(room)


async def test_pairs_are_admitted_within_capacity_and_refusals_are_told_once(settings, worker):
    registry = RoomRegistry(dataclasses.replace(settings, room_max_pairs=1))
    ana, ben = member("ana", settings, worker, "es", "es"), member("ben", settings, worker, "en", "en")
    room = registry.join("r", ana)
    registry.join("r", ben)
    assert len(room.pairs) == 1
    waiting = ana if ("ben", "es") not in room.pairs else ben  # whose pair came second
    errors = [e for e in waiting.ctx.events if e["type"] == "error"]
    assert [e["error"]["code"] for e in errors] == ["interpretation_unavailable"]
    ana.mic_muted = True
    room.update(ana)  # membership changes: no second notice
    assert len([e for e in waiting.ctx.events if e["type"] == "error"]) == 1
    await close_room(room)
    capped = RoomRegistry(settings, pair_capacity=lambda: 0)  # the machine holds no more speech pipelines
    ana, ben = member("ana", settings, worker, "es", "es"), member("ben", settings, worker, "en", "en")
    room = capped.join("r", ana)
    capped.join("r", ben)
    assert set(room.pairs) == {("ben", "es")}  # the text route still runs
    assert [e["error"]["code"] for e in ana.ctx.events if e["type"] == "error"] == []
    assert [e["error"]["code"] for e in ben.ctx.events if e["type"] == "error"] == ["interpretation_unavailable"]
    await close_room(room)


async def test_a_pair_no_engine_can_make_is_told_to_its_listener(settings, worker):
    bare = dataclasses.replace(settings, **NO_MT)
    registry = RoomRegistry(bare)
    ana, ben = member("ana", bare, worker, "es", "es"), member("ben", bare, worker, "en", "en")
    room = registry.join("r", ana)
    registry.join("r", ben)
    assert set(room.pairs) == {("ana", "en")}
    errors = [e["error"] for e in ana.ctx.events if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["unsupported_language"] and "'es'" in errors[0]["message"]
    await close_room(room)


async def test_fanout_survives_a_sink_that_fails(settings):
    from rtc_agent.apps.call.speech_fanout import FanoutSink

    sink = FanoutSink()
    gone, full, live = SpeechOutput(), SpeechOutput(max_seconds=0.01), SpeechOutput()
    gone.stop()
    sink.sinks.update({"gone": gone, "full": full, "live": live})
    handle = sink.play(np.zeros(4800, dtype=np.int16), 48_000)
    assert set(sink.sinks) == {"full", "live"} and sink.gone == 1 and sink.missed == 1
    assert len(handle.handles) == 1 and live.busy
    assert sink.clear() and not live.busy
