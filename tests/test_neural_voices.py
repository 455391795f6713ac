"""The server's neural voices (apps/interpret/neural_voices.py): at most ``tts_neural_voices`` interpretation
languages speak with Kokoro at once, over rooms and interpret sessions; pairs into one language share its slot, a
language past the limit is spoken by the espeak-ng voice from its first text, and a slot comes free when the last
pair into its language stops. Through real rooms, real interpret sessions and a real worker, with scripted engines
under the voices' names."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from rtc_agent.apps.call.room_registry import RoomRegistry
from rtc_agent.apps.interpret import InterpretApp, deliverable
from rtc_agent.apps.interpret.neural_voices import NeuralVoiceSlots, voice_slots
from rtc_agent.config import Settings, SettingsError, validate
from rtc_agent.engines.tts import languages
from rtc_agent.protocol.events import SessionUpdate
from rtc_agent.rtc.speech_output import SpeechOutput
from rtc_agent.worker import Worker
from tests.fakes import ScriptedAppContext, ScriptedASR, ScriptedTTS, ScriptedVAD, loud_above, register
from tests.fakes.mt import ScriptedMT
from tests.test_call_translation import close_room, final, member, until
from tests.test_interpret_text_route import english, utterance


def test_slots_are_held_per_language_and_come_free_with_the_last_pair() -> None:
    slots = NeuralVoiceSlots(1)
    assert slots.acquire("es") and slots.acquire("es")  # two speakers into Spanish: one voice
    assert not slots.acquire("de")
    slots.release("es")
    assert not slots.acquire("de")  # one Spanish pair still speaks
    slots.release("es")
    assert slots.acquire("de") and slots.held == {"de": 1}
    with pytest.raises(ValueError):
        NeuralVoiceSlots(0)


def test_the_setting_sizes_the_slots_and_auto_follows_the_cores(monkeypatch) -> None:
    monkeypatch.setattr(languages, "usable_cores", lambda: 2)
    assert languages.neural_voices(Settings()) == 1  # auto on 2 cores
    monkeypatch.setattr(languages, "usable_cores", lambda: 16)
    assert languages.neural_voices(Settings()) == 8
    assert languages.neural_voices(dataclasses.replace(Settings(), tts_neural_voices=3)) == 3
    for bad in (-1, 65):
        with pytest.raises(SettingsError, match="tts_neural_voices"):
            validate(dataclasses.replace(Settings(), tts_neural_voices=bad))
    worker = Worker()
    assert voice_slots(worker, dataclasses.replace(Settings(), tts_neural_voices=2)).limit == 2
    assert voice_slots(worker, Settings()) is voice_slots(worker, Settings())  # one per server


@pytest.fixture
async def worker():
    w = Worker()
    yield w
    await w.close()


async def test_a_language_past_the_neural_voices_is_spoken_by_espeak_from_its_first_text(worker, monkeypatch):
    monkeypatch.setattr(deliverable, "_voice_for",
                        lambda settings, language: {"engine": "tts-kokoro", "voice": "v"})
    settings = dataclasses.replace(Settings(), max_room_participants=6, mt_engine="auto", tts_neural_voices=1)
    register(worker, "mt", ScriptedMT())
    kokoro = register(worker, "tts-kokoro", ScriptedTTS(seconds=lambda text: 0.02))
    espeak = register(worker, "tts-espeak", ScriptedTTS(seconds=lambda text: 0.02))
    registry = RoomRegistry(settings)
    ben = member("ben", settings, worker, "en", "en")
    ana = member("ana", settings, worker, "es", "es")
    hans = member("hans", settings, worker, "de", "de")
    room = registry.join("r", ben)
    registry.join("r", ana)
    registry.join("r", hans)
    room.on_caption(ben, final("ben_0", "Good morning, everyone.", language="en"))
    await until(lambda: ana.ctx.of("translation.speech.started") and hans.ctx.of("translation.speech.started"))
    engines = {p.listen_language: p.ctx.of("translation.speech.started")[0]["engine"] for p in (ana, hans)}
    assert sorted(engines.values()) == ["tts-espeak", "tts-kokoro"]  # one language holds the neural voice
    neural = next(lang for lang, engine in engines.items() if engine == "tts-kokoro")
    assert {r.language for r in kokoro.ran} == {neural} and {r.language for r in espeak.ran} == set(engines) - {
        neural}
    # the neural language's listener leaves: its pair stops and gives the slot back; a new language takes it
    room.leave(ana.id if neural == "es" else hans.id)
    lucia = member("lucia", settings, worker, "it", "it")
    registry.join("r", lucia)
    room.on_caption(ben, final("ben_1", "The build is green.", 10_000, language="en"))
    await until(lambda: lucia.ctx.of("translation.speech.started"))
    assert lucia.ctx.of("translation.speech.started")[0]["engine"] == "tts-kokoro"
    assert set(voice_slots(worker, settings).held) == {"it"}  # (every speaker into Italian: one voice)
    await close_room(room)
    assert voice_slots(worker, settings).held == {}


async def test_interpret_sessions_hold_the_same_slots_and_give_them_back(worker, monkeypatch):
    """A 1:1 interpret session speaking with Kokoro takes one of the server's slots as a room's language does: a
    second session into another language is spoken by espeak-ng from the start; a session that stops speaking
    (``speak: false``) or ends gives its slot back. Its speech goes through a real session (scripted engines)."""
    monkeypatch.setattr(deliverable, "_voice_for",
                        lambda settings, language: {"engine": "tts-kokoro", "voice": "v"})
    register(worker, "asr", ScriptedASR(english, delay_s=0.002), max_queue=64, concurrency=4)
    register(worker, "vad", ScriptedVAD(loud_above(0.01), delay_s=0.002), max_queue=64)
    register(worker, "mt", ScriptedMT())
    kokoro = register(worker, "tts-kokoro", ScriptedTTS(seconds=lambda text: 0.05))
    register(worker, "tts-espeak", ScriptedTTS(seconds=lambda text: 0.05))

    def interpret(target: str) -> tuple[ScriptedAppContext, InterpretApp]:
        ctx = ScriptedAppContext(worker, close_reason="deleted", speech=SpeechOutput(), st_engine="embedded",
                                 mt_engine="auto", tts_neural_voices=1)
        return ctx, InterpretApp(ctx, InterpretApp.validate_config({"direction": f"en-{target}"}, ctx.settings))

    slots = voice_slots(worker, Settings())
    es_ctx, es = interpret("es")
    _, de = interpret("de")
    assert slots.held == {"es": 1}
    assert es.speaker.synthesizer.engine == "tts-kokoro" and es.speaker.fallback is not None
    assert de.speaker.synthesizer.engine == "tts-espeak" and de.speaker.fallback is None
    await es.start()
    try:
        await utterance(es, es_ctx, lambda: es_ctx.of("translation.speech.started"))
        assert es_ctx.of("translation.speech.started")[0].engine == "tts-kokoro" and kokoro.ran
        await es.on_event(SessionUpdate(session={"speak": False}))
        assert slots.held == {}
        await es.on_event(SessionUpdate(session={"speak": True}))
        assert slots.held == {"es": 1}
    finally:
        await es.close()
        for task in es_ctx.tasks:
            task.cancel()
        await asyncio.gather(*es_ctx.tasks, return_exceptions=True)
    assert slots.held == {}  # the session ended
    await de.close()
    _, italian = interpret("it")
    assert italian.speaker.synthesizer.engine == "tts-kokoro" and slots.held == {"it": 1}
    await italian.close()
    assert slots.held == {}
