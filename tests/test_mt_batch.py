"""Batched translation (issue 25): translations waiting together (one caption final into each listener language)
reach the embedded translator as one ``run_batch`` and go to the chat engine as one ``generate_many`` of at most
``mt_max_batch``; a chat engine without ``generate_many`` gets them one at a time. Scripted chat engines (the real
``ChatEngine`` contract) on a real worker; the batched decode itself is tested in tests/test_llm_batch.py."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from rtc_agent.apps.interpret.text_route import FinalsTranslator
from rtc_agent.config import Settings, SettingsError
from rtc_agent.config.validation import validate
from rtc_agent.engines import mt
from rtc_agent.engines.llm import CancelToken, ChatJob, ChatRequest, ChatResult
from rtc_agent.engines.mt import ChatTranslationEngine, ContextPrimeRequest, TextTranslateRequest, TextTranslation
from rtc_agent.engines.mt.chat import context_messages, prime_messages, translation_messages
from rtc_agent.errors import EngineError, InvalidRequest
from rtc_agent.protocol.events import CaptionFinal
from rtc_agent.worker import EngineSpec, Worker
from tests.fakes import ScriptedChat
from tests.test_worker import wait_until

REPLIES = {"Spanish": "Buenos días.", "German": "Guten Morgen.", "Italian": "Buongiorno.", "French": "Bonjour."}


def settings(**values: object) -> Settings:
    return dataclasses.replace(Settings(), **values)


class BatchingChat(ScriptedChat):
    """A scripted chat engine with ``generate_many``: answers each request with the reply for the language its
    system prompt names, records the size of every batch, and can hold a generation until ``gate`` is set."""

    def __init__(self, *, fail: str | None = None) -> None:
        super().__init__(default="unused")
        self.batches: list[int] = []
        self.singles: list[str] = []
        self.fail = fail  # a language whose reply runs past its limit
        self.short: str | None = None  # a language whose reply comes before the gate opens
        self.gate = threading.Event()
        self.gate.set()
        self.running = threading.Event()

    def reply_for(self, request: ChatRequest) -> ChatResult:
        system = str(request.messages[0]["content"])
        language = next((name for name in REPLIES if f"into {name}" in system), "")
        finish = "length" if language == self.fail else "stop"
        return ChatResult(text=REPLIES.get(language, "ok"), finish_reason=finish, model=self.model_name)

    def generate(self, request, cancel):  # type: ignore[no-untyped-def]
        self.running.set()
        self.gate.wait(10)
        self.singles.append(str(request.messages[-1]["content"]))
        self.replies.append(self.reply_for(request).text)
        yield from super().generate(request, cancel)

    def generate_many(self, requests: Sequence[ChatRequest], cancel: CancelToken | None = None,
                      on_result: Any = None) -> list[ChatResult | Exception]:
        """Replies in order; with ``short`` set, the request into that language finishes first (``on_result``)
        and the others only once ``gate`` is set, as a batched decode's rows end a few tokens apart."""
        self.running.set()
        results = [self.reply_for(r) for r in requests]
        first = [i for i, r in enumerate(requests)
                 if self.short and f"into {self.short}" in str(r.messages[0]["content"])]
        for i in first:
            if on_result is not None:
                on_result(i, results[i])
        self.gate.wait(10)
        self.batches.append(len(requests))
        for i, result in enumerate(results):
            if on_result is not None and i not in first:
                on_result(i, result)
        return results


def request(target: str, text: str = "Good morning.") -> TextTranslateRequest:
    return TextTranslateRequest(text, "en", target)


def test_translate_many_is_one_batched_generate() -> None:
    chat = BatchingChat()
    engine = ChatTranslationEngine(chat, kind="embedded", max_batch=4)
    results = engine.run_batch([request("es"), request("de"), request("it")])
    assert chat.batches == [3] and not chat.singles
    assert [r.text for r in results] == ["Buenos días.", "Guten Morgen.", "Buongiorno."]
    assert {r.engine for r in results} == {"embedded:scripted"}
    chat.batches.clear()
    five = engine.run_batch([request(t) for t in ("es", "de", "it", "fr", "es")])
    assert chat.batches == [4, 1] and len(five) == 5  # max_batch bounds one generate_many
    # the same language, a bad request and a failed reply fail only themselves
    mixed = engine.run_batch([request("es"), "not a request", request("en"), request("de")])
    assert mixed[0].text == "Buenos días." and isinstance(mixed[1], TypeError)
    assert mixed[2].text == "Good morning." and mixed[3].text == "Guten Morgen."
    failing = ChatTranslationEngine(BatchingChat(fail="German"), kind="embedded")
    out = failing.run_batch([request("es"), request("de")])
    assert out[0].text == "Buenos días." and isinstance(out[1], EngineError) and out[1].code == "mt_bad_output"
    with pytest.raises(ValueError):
        ChatTranslationEngine(chat, kind="embedded", max_batch=0)


def test_a_failed_batch_fails_each_request_and_a_chat_without_batches_goes_one_by_one() -> None:
    class Broken(BatchingChat):
        def generate_many(self, requests, cancel=None, on_result=None):  # type: ignore[no-untyped-def]
            raise RuntimeError("out of memory")

    out = ChatTranslationEngine(Broken(), kind="embedded").run_batch([request("es"), request("de")])
    assert all(isinstance(r, RuntimeError) for r in out)
    plain = ScriptedChat("Buenos días.", "Guten Morgen.")  # no generate_many: one chat call per translation
    results = ChatTranslationEngine(plain, kind="openai").run_batch([request("es"), request("de")])
    assert [r.text for r in results] == ["Buenos días.", "Guten Morgen."] and len(plain.requests) == 2


class KeepingChat(BatchingChat):
    """A :class:`BatchingChat` that says it keeps computed prompts (the embedded LLM's ``prefix_cache``) and
    records every ``generate_many`` call's requests."""

    prefix_cache = True

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[ChatRequest]] = []

    def generate_many(self, requests, cancel=None, on_result=None):  # type: ignore[no-untyped-def]
        self.calls.append(list(requests))
        return super().generate_many(requests, cancel, on_result)


CONTEXT = (("Good morning.", "Buenos días."), ("See you soon.", "Hasta pronto."))


def test_a_context_prime_reads_the_next_prompts_start_after_the_translations() -> None:
    """Primes in a batch go after its translations, as one-token chat calls of exactly what the next translation
    with that context starts with (its messages without the text); an engine that keeps nothing answers False."""
    chat = KeepingChat()
    engine = ChatTranslationEngine(chat, kind="embedded")
    primes = [ContextPrimeRequest("en", "es", CONTEXT), ContextPrimeRequest("en", "de", CONTEXT[:1])]
    out = engine.run_batch([primes[0], request("es"), primes[1], request("it")])
    assert out[0] is True and out[2] is True
    assert isinstance(out[1], TextTranslation) and out[1].text == "Buenos días." and out[3].text == "Buongiorno."
    translations, primed = chat.calls
    assert [r.messages[-1]["content"] for r in translations] == ["Good morning.", "Good morning."]
    assert [r.max_tokens for r in primed] == [1, 1] and [list(r.messages) for r in primed] == [
        context_messages(p) for p in primes]
    following = TextTranslateRequest("Thank you.", "en", "es", CONTEXT)
    assert translation_messages(following)[:-1] == list(primed[0].messages)
    assert primed[0].messages[-1]["role"] == "assistant"
    # no prefix cache (a remote model, a chat without batches): nothing to compute, nothing sent
    for chat_engine in (BatchingChat(), ScriptedChat("unused")):
        assert ChatTranslationEngine(chat_engine, kind="openai").run_batch(primes) == [False, False]
        assert not getattr(chat_engine, "batches", []) and not chat_engine.requests
    with pytest.raises(InvalidRequest):
        ContextPrimeRequest("en", "xx", CONTEXT)
    with pytest.raises(InvalidRequest):
        ContextPrimeRequest("en", "es", CONTEXT, text=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        ContextPrimeRequest("en", "es", (("only one",),))  # type: ignore[arg-type]


def test_mt_max_batch_is_a_validated_setting_on_the_embedded_spec() -> None:
    assert Settings().mt_max_batch == 4
    for good in (1, 16):
        validate(settings(mt_max_batch=good))
    for bad in (0, 17, -1):
        with pytest.raises(SettingsError, match="mt_max_batch"):
            validate(settings(mt_max_batch=bad))
    spec, *_ = mt.engine_specs(settings(mt_max_batch=6))
    assert spec.max_batch == 6 and spec.shares == "llm"
    assert spec.adapt is not None and spec.adapt(BatchingChat()).max_batch == 6  # type: ignore[attr-defined]
    own, *_ = mt.engine_specs(settings(mt_max_batch=2, mt_model="smollm2-135m"))  # a model of its own
    assert own.shares is None and own.max_batch == 2


def shared_worker(chat: BatchingChat, **values: object) -> Worker:
    """``chat`` as the worker's ``llm`` engine and the default embedded ``mt`` specs (``mt``, ``mt-prime``) on its
    lane."""
    worker = Worker()
    worker.add(EngineSpec(name="llm", factory=lambda: chat, max_queue=16, yields_to=("tts", "asr")))
    for spec in mt.engine_specs(settings(**values)):
        worker.add(spec)
    return worker


async def test_a_room_primes_its_cut_context_on_the_background_engine_no_voice_steps_aside_for() -> None:
    """A translator that cut its context back sends the prime to ``mt-prime``: on the same lane and model, its own
    batch after the translation, marked busy under its own name (a voice yields to ``mt``, not to it)."""
    marks: list[tuple[int, bool, bool]] = []

    def mark(request: ChatRequest) -> None:
        marks.append((request.max_tokens, worker.priority.busy(["mt"]), worker.priority.busy(["mt-prime"])))

    class MarkingChat(KeepingChat):
        def generate(self, request, cancel):  # type: ignore[no-untyped-def]  # a lone translation
            mark(request)
            yield from super().generate(request, cancel)

        def generate_many(self, requests, cancel=None, on_result=None):  # type: ignore[no-untyped-def]
            for r in requests:
                mark(r)
            return super().generate_many(requests, cancel, on_result)

    chat = MarkingChat()
    worker = shared_worker(chat)
    translator = FinalsTranslator(worker, "es", lambda event: None, lambda: 20_000, source_language="en")
    task = asyncio.ensure_future(translator.run())
    try:
        for i in range(5):
            translator.push(CaptionFinal(segment_id=f"s{i}", text=f"Line {i}.", audio_start_ms=i * 1000,
                                         audio_end_ms=i * 1000 + 900, language="en"))
            await asyncio.wait_for(translator.drained(), 10)
        stats = worker.stats()
        assert stats["mt"]["calls"] == 5 and stats["mt-prime"]["calls"] == 1 and translator.stats()["primes"] == 1
        assert stats["mt-prime"]["shares"] == "mt" and worker.host_of("mt-prime") == "llm"  # (mt's host)
        # the prime: one token, on its own engine's mark; the translations on mt's
        assert [m for m in marks if m[0] == 1] == [(1, False, True)]
        assert all(busy_mt and not busy_prime for tokens, busy_mt, busy_prime in marks if tokens != 1)
    finally:
        task.cancel()
        await worker.close()
    # a translator with a model of its own: the background engine runs on mt's lane and engine
    own = shared_worker(BatchingChat(), mt_model="smollm2-135m")
    try:
        assert own.host_of("mt-prime") == "mt" and own.host_of("mt") == "mt"
    finally:
        await own.close()


async def test_translations_waiting_together_go_as_one_batch_on_the_shared_lane() -> None:
    chat = BatchingChat()
    worker = shared_worker(chat)
    try:
        results = await asyncio.gather(*(worker.call("mt", request(t), timeout=10) for t in ("es", "de", "it")))
        assert [r.text for r in results] == ["Buenos días.", "Guten Morgen.", "Buongiorno."]
        await wait_until(lambda: worker.stats()["mt"]["batches"] == 1)  # counted when the batch ends
        assert chat.batches == [3]
        # an agent turn holds the lane: what queues meanwhile goes as batches of mt_max_batch, never with the
        # agent's waiting turn, and before it
        chat.gate.clear()
        chat.running.clear()
        turn = ChatJob(ChatRequest(messages=[{"role": "user", "content": "agent turn"}]))
        first = asyncio.ensure_future(worker.call("llm", turn, timeout=10))
        while not chat.running.is_set():
            await asyncio.sleep(0.005)
        waiting = asyncio.ensure_future(worker.call("llm", ChatRequest(messages=[{"role": "user", "content": "next"}]),
                                                    timeout=10))
        await asyncio.sleep(0.01)
        calls = [asyncio.ensure_future(worker.call("mt", request(t), timeout=10))
                 for t in ("es", "de", "it", "fr", "es")]
        await asyncio.sleep(0.05)
        chat.gate.set()
        await asyncio.gather(first, waiting, *calls)
        # four in one batch, the fifth alone (a lone translation is one chat call), all before the waiting turn
        assert chat.batches == [3, 4] and chat.singles == ["agent turn", "Good morning.", "next"]
        await wait_until(lambda: worker.stats()["mt"]["batches"] == 3)
        assert worker.stats()["llm"]["batches"] == 2 and worker.stats()["mt"]["mean_batch_size"] == round(8 / 3, 3)
    finally:
        chat.gate.set()
        await worker.close()


async def test_a_translation_that_finishes_first_reaches_its_caller_before_the_batch_ends() -> None:
    """A batched decode's rows end a few tokens apart: the shortest translation is handed on (``deliver_early``)
    while the longer ones still decode; the worker counts the batch once."""
    chat = BatchingChat()
    chat.short = "German"
    chat.gate.clear()
    worker = shared_worker(chat)
    try:
        calls = {t: asyncio.ensure_future(worker.call("mt", request(t), timeout=10)) for t in ("es", "de", "it")}
        german = await asyncio.wait_for(calls["de"], 5)
        assert german.text == "Guten Morgen." and not calls["es"].done() and not calls["it"].done()
        assert chat.batches == []  # the batch is still running
        chat.gate.set()
        assert [(await calls[t]).text for t in ("es", "it")] == ["Buenos días.", "Buongiorno."]
        await wait_until(lambda: worker.stats()["mt"]["batches"] == 1)  # counted when the batch ends
        assert chat.batches == [3] and worker.stats()["mt"]["errors"] == 0
        # a reply that fails as it finishes early fails only its caller, once
        chat.fail, chat.short = "Italian", "Italian"
        chat.gate.clear()
        calls = {t: asyncio.ensure_future(worker.call("mt", request(t), timeout=10)) for t in ("es", "it")}
        with pytest.raises(EngineError, match="token limit"):
            await asyncio.wait_for(calls["it"], 5)
        assert not calls["es"].done()
        chat.gate.set()
        assert (await calls["es"]).text == "Buenos días."
        await wait_until(lambda: worker.stats()["mt"]["batches"] == 2)
        assert worker.stats()["mt"]["errors"] == 1
    finally:
        chat.gate.set()
        await worker.close()


async def test_one_final_into_three_languages_is_one_batch() -> None:
    """The text route: a speaker's final, translated for its Spanish, German and Italian listeners (one
    ``FinalsTranslator`` per language, as a call room makes them), reaches the model as one batch."""
    chat = BatchingChat()
    worker = shared_worker(chat)
    events: list[Any] = []
    translators = [FinalsTranslator(worker, target, events.append, lambda: 5_000) for target in ("es", "de", "it")]
    tasks = [asyncio.ensure_future(t.run()) for t in translators]
    try:
        final = CaptionFinal(segment_id="s1", text="Good morning.", audio_start_ms=0, audio_end_ms=1_000, language="en")
        for translator in translators:
            translator.push(final)
        await asyncio.wait_for(asyncio.gather(*(t.drained() for t in translators)), 10)
        chunks = sorted(e.text for e in events if e.type == "translation.chunk")
        assert chunks == ["Buenos días.", "Buongiorno.", "Guten Morgen."] and chat.batches == [3]
    finally:
        for task in tasks:
            task.cancel()
        await worker.close()


async def test_mt_max_batch_1_translates_one_at_a_time() -> None:
    chat = BatchingChat()
    worker = shared_worker(chat, mt_max_batch=1)
    try:
        await asyncio.gather(*(worker.call("mt", request(t), timeout=10) for t in ("es", "de", "it")))
        await wait_until(lambda: worker.stats()["mt"]["batches"] == 3)
        assert not chat.batches and len(chat.singles) == 3
    finally:
        await worker.close()


async def test_the_queue_hands_out_one_engines_requests_and_leaves_the_others_in_order() -> None:
    from rtc_agent.worker.request_queue import PendingRequest, RequestQueue

    loop = asyncio.get_running_loop()
    queue = RequestQueue(8)
    items = [PendingRequest(name, loop.create_future(), 0.0, view=view, urgent=urgent)
             for name, view, urgent in (("turn 1", None, False), ("mt 1", "mt", True), ("turn 2", None, False),
                                        ("mt 2", "mt", True), ("mt 3", "mt", False))]
    for pending in items:
        queue.put_nowait(pending)
    items[3].future.cancel()  # its caller went away
    assert queue.get_nowait("mt").request == "mt 1"
    assert queue.get_nowait("mt").request == "mt 3"  # urgent ones first, the abandoned one skipped
    assert queue.get_nowait("mt") is None and await queue.get(0.01, "mt") is None
    assert [queue.get_nowait().request for _ in range(2)] == ["turn 1", "turn 2"] and queue.get_nowait() is None


@pytest.mark.parametrize(("reply", "kept"), [
    ("Buenos días, buenos días, buenos días, buenos dí", "Buenos días,"),
    ("El tren sale a las ocho, a las ocho, a las ocho, a las ocho, a las", "El tren sale a las ocho,"),
    ("Hola. Hola. Hola. Hola.", "Hola."),
    ("a b c a b c a b c a b", "a b c"),
])
def test_a_reply_that_loops_to_its_token_limit_keeps_the_text_before_the_repetition(reply: str, kept: str) -> None:
    from rtc_agent.engines.mt.chat import cut_loop

    class Looping(BatchingChat):
        def reply_for(self, request: ChatRequest) -> ChatResult:
            result = super().reply_for(request)
            return dataclasses.replace(result, text=reply) if result.finish_reason == "length" else result

    assert cut_loop(reply) == kept
    engine = ChatTranslationEngine(Looping(fail="Spanish"), kind="embedded")
    looped, german = engine.run_batch([request("es"), request("de")])
    assert looped.text == kept and german.text == "Guten Morgen."


def test_a_reply_cut_by_its_token_limit_without_a_loop_is_still_an_error() -> None:
    from rtc_agent.engines.mt.chat import cut_loop

    for unfinished in ("Das ist gut, sehr gut", "sí sí", "la casa, la casa", ""):
        assert cut_loop(unfinished) is None
    out = ChatTranslationEngine(BatchingChat(fail="German"), kind="embedded").run_batch([request("es"), request("de")])
    assert out[0].text == "Buenos días." and isinstance(out[1], EngineError) and out[1].code == "mt_bad_output"


def test_a_prime_of_the_words_said_reads_the_next_prompt_up_to_them() -> None:
    """A prime with the first words of a sentence still being said computes the next translation's messages with
    those words as its text: the final's prompt starts the same way, as far as the words agree."""
    chat = KeepingChat()
    engine = ChatTranslationEngine(chat, kind="embedded")
    said = ContextPrimeRequest("en", "es", CONTEXT, text="Thank you for")
    assert engine.run_batch([said]) == [True]
    [[primed]] = chat.calls
    assert list(primed.messages) == translation_messages(TextTranslateRequest("Thank you for", "en", "es", CONTEXT))
    assert prime_messages(ContextPrimeRequest("en", "es", CONTEXT, text="  ")) == context_messages(said)

