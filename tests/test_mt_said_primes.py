"""The text route computes a translation's prompt while its sentence is still being said
(apps/interpret/text_route.py ``FinalsTranslator.hint``, ``mt_prime_words``): scripted ``mt`` engine on a real worker
for the policy; the embedded LLM's batches on a tiny Llama model built from a config for what a prime saves."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rtc_agent.apps.interpret.text_route import DEFAULT_PRIME_WORDS, FinalsTranslator
from rtc_agent.protocol.events import CaptionFinal
from rtc_agent.worker import Worker
from tests.fakes import ScriptedMT, register
from tests.test_worker import wait_until


def final(segment: str, text: str) -> CaptionFinal:
    return CaptionFinal(segment_id=segment, text=text, audio_start_ms=0, audio_end_ms=900, language="en")


async def running(mt_engine: ScriptedMT, **options: Any) -> tuple[FinalsTranslator, asyncio.Task, Worker]:
    worker = Worker()
    register(worker, "mt", mt_engine)
    translator = FinalsTranslator(worker, "es", lambda event: None, lambda: 20_000, **options)
    return translator, asyncio.ensure_future(translator.run()), worker


async def stop(task: asyncio.Task, worker: Worker) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await worker.close()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.005)


async def test_every_few_committed_words_the_prompt_is_computed_up_to_them() -> None:
    mt_engine = ScriptedMT()
    translator, task, worker = await running(mt_engine)
    try:
        translator.context = [("Hello.", "Hola.")]
        said = ["thank", "you", "all", "for", "coming", "to", "the", "meeting", "today"]
        for n in range(1, len(said) + 1):  # a partial every word
            translator.hint(" ".join(said[:n]), "s1", "en")
            if n % DEFAULT_PRIME_WORDS == 0:  # (each due prime answered before the next word: as on a free lane)
                await wait_until(lambda n=n: len(mt_engine.primed) == n // DEFAULT_PRIME_WORDS, timeout=10)
        await settle()
        assert [(p.text, p.context, p.source) for p in mt_engine.primed] == [
            ("thank you all for", (("Hello.", "Hola."),), "en"), ("thank you all for coming to the meeting", (
                ("Hello.", "Hola."),), "en")]  # every DEFAULT_PRIME_WORDS (4) words, not every partial
        translator.push(final("s1", "Thank you all for coming to the meeting today."))
        await wait_until(lambda: len(mt_engine.requests) == 1, timeout=10)
        translator.hint("thank you all for coming to the meeting today", "s1")  # a late partial of that final
        translator.hint("and", "s2")  # the next sentence's first word
        await settle()
        assert len(mt_engine.primed) == 2
        translator.hint("and now the budget", "s2")
        await wait_until(lambda: len(mt_engine.primed) == 3, timeout=10)
        assert mt_engine.primed[-1].text == "and now the budget" and len(mt_engine.primed[-1].context) == 2
        assert translator.stats()["said_primes"] == 3 and translator.stats()["primes"] == 3
    finally:
        await stop(task, worker)
    assert DEFAULT_PRIME_WORDS == 4


async def test_a_waiting_final_goes_first_and_no_hint_primes_with_prime_words_0() -> None:
    mt_engine = ScriptedMT()
    translator, task, worker = await running(mt_engine, prime_words=0)
    try:
        translator.hint("one two three four five six", "s1")
        await settle()
        assert not mt_engine.primed
    finally:
        await stop(task, worker)
    with pytest.raises(ValueError):
        FinalsTranslator(worker, "es", lambda event: None, lambda: 0, prime_words=-1)
    mt_engine = ScriptedMT()
    translator, task, worker = await running(mt_engine)
    try:
        translator.push(final("s0", "An earlier sentence."))
        translator.hint("one two three four five six", "s1")  # (in the same moment: the final is translated first)
        await wait_until(lambda: len(mt_engine.requests) == 1 and len(mt_engine.primed) == 1, timeout=10)
        assert mt_engine.calls == ["translate", "prime"]
        assert mt_engine.primed[0].context == (("An earlier sentence.", "[es] An earlier sentence."),)
    finally:
        await stop(task, worker)


def test_mt_prime_words_is_a_validated_setting() -> None:
    import dataclasses

    from rtc_agent.config import Settings, SettingsError
    from rtc_agent.config.validation import validate

    assert Settings().mt_prime_words == DEFAULT_PRIME_WORDS
    for good in (0, 64):
        validate(dataclasses.replace(Settings(), mt_prime_words=good))
    for bad in (-1, 65):
        with pytest.raises(SettingsError, match="mt_prime_words"):
            validate(dataclasses.replace(Settings(), mt_prime_words=bad))


def test_a_translator_from_settings_takes_the_servers_limits() -> None:
    import dataclasses

    from rtc_agent.config import Settings

    settings = dataclasses.replace(Settings(), mt_timeout_s=12.0, room_mt_backlog=3, mt_prime_words=0)
    made = FinalsTranslator.from_settings(settings, None, "es", lambda e: None, lambda: 0, source_language="auto")
    assert (made.timeout_s, made.max_pending, made.prime_words, made.source_language) == (12.0, 3, 0, None)
    made = FinalsTranslator.from_settings(object(), None, "de", lambda e: None, lambda: 0, source_language="en")
    assert (made.timeout_s, made.max_pending, made.prime_words, made.source_language) == (
        30.0, 8, DEFAULT_PRIME_WORDS, "en")


async def test_a_call_room_primes_every_listen_language_as_its_speaker_talks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A speaker's caption partials reach each text-route pair of the room: the engine computes the prompt of
    every listen language up to the committed words (batched as the finals are), then translates the final."""
    import dataclasses

    from rtc_agent.apps.call.room_registry import RoomRegistry
    from rtc_agent.apps.interpret import deliverable
    from rtc_agent.config import Settings
    from rtc_agent.protocol.events import CaptionPartial
    from tests.test_call_translation import close_room, member

    monkeypatch.setattr(deliverable, "_voice_for", lambda settings, language: None)  # (text only)
    settings = dataclasses.replace(Settings(), max_room_participants=6, mt_engine="auto")
    worker = Worker()
    mt_engine = register(worker, "mt", ScriptedMT())
    registry = RoomRegistry(settings)
    speaker = member("ben", settings, worker, "en", "en")
    room = registry.join("r", speaker)
    for pid, listen in (("ana", "es"), ("dora", "de")):
        registry.join("r", member(pid, settings, worker, listen, listen))
    try:
        assert {key for key, pair in room.pairs.items() if pair.route == "text"} >= {("ben", "es"), ("ben", "de")}
        room.on_caption(speaker, CaptionPartial(segment_id="ben_0", committed="Good morning to", tentative="all",
                                                audio_start_ms=0, audio_end_ms=900, language="en"))
        room.on_caption(speaker, CaptionPartial(segment_id="ben_0", committed="Good morning to all of",
                                                tentative="you", audio_start_ms=0, audio_end_ms=1300, language="en"))
        await wait_until(lambda: len(mt_engine.primed) == 2, timeout=10)
        assert sorted((p.target, p.text) for p in mt_engine.primed) == [
            ("de", "Good morning to all of"), ("es", "Good morning to all of")]
        room.on_caption(speaker, CaptionFinal(segment_id="ben_0", text="Good morning to all of you.",
                                              audio_start_ms=0, audio_end_ms=1600, language="en"))
        await wait_until(lambda: len(mt_engine.requests) == 2, timeout=10)
        assert {r.target for r in mt_engine.requests} == {"es", "de"} and len(mt_engine.primed) == 2
    finally:
        await close_room(room)
        await worker.close()


async def test_the_interpret_app_primes_the_words_its_source_captions_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """/interpret on the text route: the source captions' partials (a scripted Whisper hearing a five-word sentence
    as it grows) have the engine compute the prompt up to their committed words before the final's translation."""
    from rtc_agent.apps.interpret import InterpretApp, deliverable
    from rtc_agent.engines.asr.base import Segment, TranscribeRequest, Transcript
    from rtc_agent.rtc.speech_output import SpeechOutput
    from tests.fakes import ScriptedAppContext, ScriptedASR, ScriptedTTS, ScriptedVAD, loud_above
    from tests.test_interpret_text_route import stop, utterance

    sentence = "good morning everyone and welcome to the meeting"

    def heard(request: TranscribeRequest) -> Transcript:  # (the words said so far: one every 0.25 s)
        audio_s = len(request.audio) / 16000
        text = " ".join(sentence.split()[:max(1, int(audio_s / 0.25))])
        return Transcript(text=text, segments=[Segment(0.0, audio_s, f" {text}")], language="en", language_prob=0.97,
                          language_probs=[("en", 0.97)], prefix_applied=False, audio_s=audio_s)

    monkeypatch.setattr(deliverable, "_voice_for", lambda settings, language: "tts" if language in ("en", "es")
                        else None)
    worker = Worker()
    register(worker, "asr", ScriptedASR(heard, delay_s=0.002), max_queue=64, concurrency=4)
    mt_engine = register(worker, "mt", ScriptedMT())
    register(worker, "tts", ScriptedTTS(seconds=lambda text: 0.05))
    register(worker, "vad", ScriptedVAD(loud_above(0.01), delay_s=0.002), max_queue=64)
    ctx = ScriptedAppContext(worker, close_reason="deleted", speech=SpeechOutput(), st_engine="embedded",
                             mt_engine="auto")
    app = InterpretApp(ctx, InterpretApp.validate_config({"direction": "en-es"}, ctx.settings))  # type: ignore
    assert app.route == "text"
    await app.start()
    try:
        await utterance(app, ctx, lambda: mt_engine.requests)
    finally:
        await stop(app, ctx)
    assert mt_engine.primed and mt_engine.calls.index("prime") < mt_engine.calls.index("translate")
    said = mt_engine.primed[-1].text
    assert len(said.split()) >= DEFAULT_PRIME_WORDS and sentence.startswith(said)
    assert mt_engine.requests[0].text.startswith(said) and app.stats()["text_route"]["said_primes"] >= 1


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rtc_agent.engines.mt.base import ContextPrimeRequest, TextTranslateRequest  # noqa: E402
from rtc_agent.engines.mt.chat import ChatTranslationEngine  # noqa: E402
from tests.test_llm_batch import folder, loaded  # noqa: E402,F401
from tests.test_llm_row_cache import widths  # noqa: E402

# (the tiny model's word tokenizer knows these words; the system prompts of the three languages are the same
# unknown words there, so each pair's context differs instead)
CONTEXTS = {t: (("good morning everyone", f"w{30 + i} w{40 + i} w{50 + i}"),) for i, t in enumerate(("es", "de", "it"))}
SENTENCE = "thank you very much the meeting starts now w60 w61 w62 w63 w64 w65"


def test_a_prime_of_the_words_said_leaves_the_final_only_the_rest_to_compute(folder: Path) -> None:  # noqa: F811
    """Three languages' translations of one final, after a prime of its first words: the same answers as without
    the prime, and a prefill that starts after those words (each pair keeps one row: the prime's generation prompt
    is replaced by the next row). (A random tiny model's replies are no translations: compared as chat results.)"""
    targets = ("es", "de", "it")
    engine = ChatTranslationEngine(loaded(folder), kind="embedded")
    chats = [engine.chat_request(TextTranslateRequest(SENTENCE, "en", t, CONTEXTS[t])) for t in targets]
    expected = loaded(folder, prefix_cache=False).generate_many(chats)
    chat = engine.chat
    seen = widths(chat)
    assert engine.run_batch([ContextPrimeRequest("en", t, CONTEXTS[t]) for t in targets]) == [True] * 3
    said = " ".join(SENTENCE.split()[:8])
    assert engine.run_batch([ContextPrimeRequest("en", t, CONTEXTS[t], text=said) for t in targets]) == [True] * 3
    rows_after_prime = len(chat.rows)
    seen.clear()
    got = chat.generate_many(chats)
    assert [(r.text, r.finish_reason) for r in got] == [(r.text, r.finish_reason) for r in expected]
    # (one token a word here) the final computes the six words after the eight said and its generation prompt,
    # where after a prime of the context alone it would compute its user turn's tag and all fourteen words too
    assert seen[0] == len(SENTENCE.split()) - 8 + 1
    assert rows_after_prime == 3 and len(chat.rows) == 3  # each pair's row replaced, not piled up
