"""The interpret app's text route (issue 21): a target that speech translation cannot make (en -> es on the embedded
Whisper, which translates into English only) is served as the call rooms serve it: the recognised text (the source
captions' finals), the ``mt`` engine, and the target language's own voice. Scripted engines on a real worker; the
real path is in tests/test_call_languages_real.py."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import pytest

from rtc_agent.apps.interpret import InterpretApp, deliverable
from rtc_agent.apps.interpret.text_route import FinalsTranslator
from rtc_agent.engines.asr.base import Segment, TranscribeRequest, Transcript
from rtc_agent.errors import EngineError, InvalidRequest
from rtc_agent.protocol.events import CaptionFinal, SessionUpdate
from rtc_agent.rtc.speech_output import SpeechOutput
from rtc_agent.worker import Worker
from tests.fakes import ScriptedAppContext, ScriptedASR, ScriptedMT, ScriptedTTS, ScriptedVAD, loud_above, register
from tests.test_interpret_source import speak
from tests.test_worker import wait_until

SR = 16000
SPOKEN = "good morning everyone"


def english(request: TranscribeRequest) -> Transcript:
    """The scripted Whisper: English speech, confidently detected."""
    audio_s = len(request.audio) / SR
    return Transcript(text=SPOKEN, segments=[Segment(0.0, audio_s, f" {SPOKEN}")], language=request.language or "en",
                      language_prob=0.97, language_probs=[("en", 0.97)], prefix_applied=False, audio_s=audio_s)


@pytest.fixture
def voices(monkeypatch: pytest.MonkeyPatch) -> None:
    """English and Spanish voices on the worker's ``tts`` engine (what Piper + Kokoro give), none for German."""
    monkeypatch.setattr(deliverable, "_voice_for", lambda settings, language: "tts" if language in ("en", "es")
                        else None)


def session(**overrides: Any) -> tuple[ScriptedAppContext, dict[str, Any]]:
    worker = Worker()
    engines = {"asr": register(worker, "asr", ScriptedASR(english, delay_s=0.002), max_queue=64, concurrency=4),
               "mt": register(worker, "mt", ScriptedMT()),
               "tts": register(worker, "tts", ScriptedTTS(seconds=lambda text: 0.05))}
    register(worker, "vad", ScriptedVAD(loud_above(0.01), delay_s=0.002), max_queue=64)
    ctx = ScriptedAppContext(worker, close_reason="deleted", speech=SpeechOutput(),
                             **{"st_engine": "embedded", "mt_engine": "auto", **overrides})
    return ctx, engines


async def utterance(app: InterpretApp, ctx: ScriptedAppContext, done: Any) -> None:
    """One loud utterance, then quiet until ``done()`` (a generous deadline, never a moment)."""
    await speak(app, ctx, 2.0, loud=True)
    for _ in range(300):
        await speak(app, ctx, 0.1, loud=False)
        if done():
            return
    raise AssertionError("the utterance was not interpreted")


async def stop(app: InterpretApp, ctx: ScriptedAppContext) -> None:
    await app.close()
    for task in ctx.tasks:
        task.cancel()
    await asyncio.gather(*ctx.tasks, return_exceptions=True)
    await ctx.worker.close()


async def test_english_to_spanish_on_whisper_is_recognised_translated_and_spoken_in_spanish(voices: None) -> None:
    ctx, engines = session()
    config = InterpretApp.validate_config({"direction": "en-es"}, ctx.settings)
    app = InterpretApp(ctx, config)  # type: ignore[arg-type]
    assert app.route == "text" and app.source is not None and not app.pipeline.translating
    assert app.engines()["mt"] and app.engines()["tts"]
    await app.start()
    try:
        await utterance(app, ctx, lambda: ctx.of("translation.speech.started"))
    finally:
        await stop(app, ctx)
    [chunk] = [c for c in ctx.of("translation.chunk") if c.action == "EMIT"]
    assert (chunk.text, chunk.source_text, chunk.source_language) == (f"[es] {SPOKEN}", SPOKEN, "en")
    assert [(r.text, r.source, r.target) for r in engines["mt"].requests] == [(SPOKEN, "en", "es")]
    assert all(r.task == "transcribe" for r in engines["asr"].requests)  # no speech-translation turns
    assert app.policy.stats()["model_calls"] == 0
    assert {r.language for r in engines["tts"].ran} == {"es"}  # read by the Spanish voice
    started = ctx.of("translation.speech.started")
    assert started and started[0].language == "es" and started[0].text == f"[es] {SPOKEN}"
    assert not ctx.of("caption.final")  # the captions reach the page only with source_text
    assert app.stats()["text_route"]["texts"] == 1


async def test_source_text_shows_the_captions_and_the_route_follows_the_target(voices: None) -> None:
    ctx, engines = session()
    app = InterpretApp(ctx, InterpretApp.validate_config({"source_language": "en", "source_text": True},  # type: ignore
                                                         ctx.settings))
    assert app.route == "speech" and app.pipeline.translating
    await app.start()
    try:
        await app.on_event(SessionUpdate(session={"target_language": "es"}))
        assert app.route == "text" and not app.pipeline.translating and app.speaker.language == "es"
        await utterance(app, ctx, lambda: [c for c in ctx.of("translation.chunk") if c.source_text])
        assert ctx.of("caption.final")[-1].text == SPOKEN
        await app.on_event(SessionUpdate(session={"target_language": "de"}))  # delivered as text, no voice
        assert app.route == "text" and not app.speaker.enabled
        with pytest.raises(InvalidRequest) as err:
            await app.on_event(SessionUpdate(session={"target_language": "xx"}))
        assert err.value.code == "unsupported_language" and app.config["target_language"] == "de"
        await app.on_event(SessionUpdate(session={"target_language": "en"}))  # back to speech translation
        assert app.route == "speech" and app.pipeline.translating and app.speaker.enabled
    finally:
        await stop(app, ctx)
    assert [r.target for r in engines["mt"].requests] == ["es"]


def test_without_a_text_translator_only_english_is_offered(voices: None) -> None:
    ctx, _ = session(mt_engine="none")
    with pytest.raises(InvalidRequest) as err:
        InterpretApp.validate_config({"direction": "en-es"}, ctx.settings)
    assert err.value.code == "unsupported_language" and "'es'" in err.value.message
    assert InterpretApp.validate_config({"direction": "es-en"}, ctx.settings)["target_language"] == "en"


def line_final(i: int) -> CaptionFinal:
    """The ``i``-th final of a speaker who says "line 0", "line 1", ... a second apart."""
    return CaptionFinal(segment_id=f"s{i}", text=f"line {i}", audio_start_ms=i * 1000, audio_end_ms=i * 1000 + 900,
                        language="en")


async def translate_lines(mt_engine: ScriptedMT, lines: int, events: list[Any], *, max_pending: int = 16,
                          one_by_one: bool = False) -> FinalsTranslator:
    """Push ``lines`` finals ("line 0", ...) and a blank one into a translator on ``mt_engine``, run it until it
    has nothing left, and return it (its events in ``events``). The finals come all at once, or with
    ``one_by_one`` each once the previous one is translated (a speaker who pauses between sentences)."""
    worker = Worker()
    register(worker, "mt", mt_engine)
    translator = FinalsTranslator(worker, "es", events.append, lambda: 20_000, max_pending=max_pending)
    task = asyncio.ensure_future(translator.run())  # (it starts at the first wait: after a burst of finals)
    try:
        for i in range(lines):
            translator.push(line_final(i))
            if one_by_one:
                await asyncio.wait_for(translator.drained(), 10)
        translator.push(CaptionFinal(segment_id="blank", text="  ", audio_start_ms=0, audio_end_ms=1))
        await asyncio.wait_for(translator.drained(), 10)
    finally:
        task.cancel()
        await worker.close()
    return translator


async def test_finals_translator_drops_the_oldest_past_its_backlog_and_reports_the_first_error() -> None:
    mt_engine, events = ScriptedMT(RuntimeError("boom")), []
    translator = await translate_lines(mt_engine, 4, events, max_pending=2)
    drops = [e for e in events if e.type == "translation.speech.catchup"]
    assert [(d.action, d.segment_id, d.reason) for d in drops] == [("drop", "s0", "behind"), ("drop", "s1", "behind")]
    assert [e.type for e in events[2:]] == ["error", "translation.chunk"]  # line 2 failed, line 3 came through
    assert events[-1].text == "[es] line 3" and [r.text for r in mt_engine.requests] == ["line 2", "line 3"]
    assert translator.stats()["errors"] == 1 and translator.stats()["dropped"] == 2


async def test_the_context_grows_final_by_final_and_is_cut_back_to_the_newest() -> None:
    """Each prompt extends the previous one while the context grows (the LLM's row cache computes only the new
    part), up to CONTEXT_MAX_FINALS pairs; then it starts again from the newest CONTEXT_FINALS."""
    mt_engine = ScriptedMT()
    await translate_lines(mt_engine, 9, [])
    contexts = [r.context for r in mt_engine.requests]
    assert [len(c) for c in contexts] == [0, 1, 2, 3, 4, 2, 3, 4, 2]
    assert contexts[5] == (("line 3", "[es] line 3"), ("line 4", "[es] line 4"))  # the newest, in order
    for earlier, later in itertools.pairwise(contexts[5:8]):
        assert later[:len(earlier)] == earlier  # the next context extends this one
    assert not mt_engine.primed  # a final was always waiting: its translation computes the cut context anyway


async def test_after_a_cut_the_engine_computes_the_cut_context_before_the_next_final() -> None:
    """The prompt after a cut starts with no earlier prompt; with no final waiting, the translator has the engine
    compute it at once (a ContextPrimeRequest of exactly the next request's context), after the translation."""
    mt_engine, events = ScriptedMT(), []
    translator = await translate_lines(mt_engine, 9, events, one_by_one=True)
    contexts = [r.context for r in mt_engine.requests]
    assert [len(c) for c in contexts] == [0, 1, 2, 3, 4, 2, 3, 4, 2]
    assert [(p.source, p.target, p.context) for p in mt_engine.primed] == [
        ("en", "es", contexts[5]), ("en", "es", contexts[8])]
    assert mt_engine.calls == ["translate"] * 5 + ["prime"] + ["translate"] * 3 + ["prime", "translate"]
    assert translator.stats()["primes"] == 2 and translator.stats()["errors"] == 0
    assert [e.type for e in events] == ["translation.chunk"] * 9


async def test_a_final_that_arrives_during_a_prime_is_translated_without_waiting_for_it() -> None:
    """A prime computes the cut context ahead; a final that arrives first has its translation compute it anyway,
    so the translator gives the prime up (a prime still queued behind other rooms' work then never runs)."""
    mt_engine, events, held = ScriptedMT(), [], threading.Event()
    mt_engine.prime_gate = held  # the prime runs until the test lets it go
    worker = Worker()
    register(worker, "mt", mt_engine, concurrency=2)  # (the held prime leaves a thread for the translation)
    translator = FinalsTranslator(worker, "es", events.append, lambda: 20_000)
    translator.context = [(f"line {i}", f"[es] line {i}") for i in range(4)]
    task = asyncio.ensure_future(translator.run())
    try:
        for i in (4, 5):
            translator.push(line_final(i))
            await wait_until(lambda i=i: len(mt_engine.primed) == 1 and len(events) == i - 3, timeout=10)
        await asyncio.wait_for(translator.drained(), 10)
        assert not held.is_set() and [e.text for e in events] == ["[es] line 4", "[es] line 5"]
        assert mt_engine.requests[-1].context == mt_engine.primed[0].context  # what the prime was computing
        assert translator.stats()["primes"] == 0 and translator.stats()["primes_dropped"] == 1
    finally:
        held.set()
        task.cancel()
        await worker.close()


async def test_a_failed_prime_costs_no_translation_and_tells_no_listener() -> None:
    mt_engine, events = ScriptedMT(), []
    mt_engine.prime_error = EngineError("the model went away", code="engine_error")
    translator = await translate_lines(mt_engine, 6, events, one_by_one=True)
    assert len(mt_engine.primed) == 1 and translator.stats()["primes"] == 0
    assert [e.type for e in events] == ["translation.chunk"] * 6 and translator.stats()["errors"] == 0
