"""Batched translation on the real embedded model (issue 25): one sentence into Spanish, German and Italian at once
goes to the model as one batch on the worker's one loaded LLM, and each translation is the one the model gives that
request alone (up to the rounding of int4/bfloat16 kernels on different row counts: measured by chrF, not by
string equality, so it holds on every CPU)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from rtc_agent.bench.translate import chrf
from rtc_agent.config import Settings
from rtc_agent.engines import llm, mt
from rtc_agent.engines.llm import ChatRequest
from rtc_agent.engines.mt import ChatTranslationEngine, ContextPrimeRequest, TextTranslateRequest
from rtc_agent.engines.mt.chat import context_messages
from rtc_agent.worker import Worker
from tests.test_worker import wait_until

pytestmark = pytest.mark.real_model

SENTENCE = "Good morning everyone, today we will review the quarterly results and plan the next steps."
TARGETS = ("es", "de", "it")


async def test_three_languages_at_once_are_one_batch_and_match_one_at_a_time() -> None:
    settings = dataclasses.replace(Settings(), mt_engine="embedded")
    worker = Worker()
    for spec in [llm.engine_spec(settings), *mt.engine_specs(settings)]:  # as register_engines does
        worker.add(spec)
    try:
        together = await asyncio.gather(*(worker.call("mt", TextTranslateRequest(SENTENCE, "en", t), timeout=600)
                                          for t in TARGETS))
        await wait_until(lambda: worker.stats()["mt"]["batches"] == 1)  # counted once the batch ends
        assert worker.stats()["mt"]["mean_batch_size"] == 3.0
        alone = [await worker.call("mt", TextTranslateRequest(SENTENCE, "en", t), timeout=600) for t in TARGETS]
        await wait_until(lambda: worker.stats()["mt"]["batches"] == 4)
    finally:
        await worker.close()
    texts, references = [r.text for r in together], [r.text for r in alone]
    assert all(text and text.lower() != SENTENCE.lower() for text in texts), texts
    assert chrf(texts, references) >= 60.0, (texts, references)


CONTEXTS = {"es": (("The meeting starts at ten.", "La reunión empieza a las diez."),
                   ("Please bring the report.", "Por favor, trae el informe.")),
            "de": (("The meeting starts at ten.", "Die Besprechung beginnt um zehn."),
                   ("Please bring the report.", "Bitte bring den Bericht mit.")),
            "it": (("The meeting starts at ten.", "La riunione inizia alle dieci."),
                   ("Please bring the report.", "Per favore, porta il rapporto."))}
NEXT = "We will discuss the budget after lunch."


def test_a_primed_context_is_not_computed_again_and_changes_no_translation() -> None:
    """After ContextPrimeRequests (what a call room sends after cutting its context back), the next translations
    with those contexts take the primed prompts' keys and values from the row cache (each row computes little more
    than its own text) and come out as they do computed whole."""
    chat = llm.engine_spec(dataclasses.replace(Settings(), mt_engine="embedded")).factory()
    chat.load(lambda message: None)
    engine = ChatTranslationEngine(chat, kind="embedded")
    try:
        following = [TextTranslateRequest(NEXT, "en", t, CONTEXTS[t]) for t in TARGETS]
        whole = engine.run_batch(following)
        chat.rows.clear()
        primes = [ContextPrimeRequest("en", t, CONTEXTS[t]) for t in TARGETS]
        assert engine.run_batch(primes) == [True, True, True]
        seeded = chat.rows.seeded_tokens
        primed = engine.run_batch(following)
        seeded = chat.rows.seeded_tokens - seeded
        context_tokens = [len(chat._prompt(ChatRequest(messages=context_messages(p), max_tokens=1))[0])
                          for p in primes]
    finally:
        chat.close()
    # every row starts after its primed context, less the few tokens where the prime's reply header differs
    assert seeded >= 3 * (min(context_tokens) - 4), (seeded, context_tokens)
    texts, references = [r.text for r in primed], [r.text for r in whole]
    assert all(text and text.lower() != NEXT.lower() for text in texts), texts
    assert chrf(texts, references) >= 60.0, (texts, references)


def test_the_words_said_primed_are_not_computed_again_and_change_no_translation() -> None:
    """Primes of a sentence's first words as a speaker says them (what the text route sends for each caption
    partial's committed words, every 4): the final's translations reuse every token of the primed words and come
    out as they do computed whole (chrF against them, which holds on every CPU's kernels)."""
    chat = llm.engine_spec(dataclasses.replace(Settings(), mt_engine="embedded")).factory()
    chat.load(lambda message: None)
    engine = ChatTranslationEngine(chat, kind="embedded")
    words = NEXT.split()
    try:
        final = [TextTranslateRequest(NEXT, "en", t, CONTEXTS[t]) for t in TARGETS]
        whole = engine.run_batch(final)
        chat.rows.clear()
        for n in (4, len(words) - 1):  # "We will discuss the", then all but the last word
            said = [ContextPrimeRequest("en", t, CONTEXTS[t], text=" ".join(words[:n])) for t in TARGETS]
            assert engine.run_batch(said) == [True, True, True]
        seeded = chat.rows.seeded_tokens
        primed = engine.run_batch(final)
        seeded = chat.rows.seeded_tokens - seeded
        through_said = [len(chat._prompt(engine.chat_request(TextTranslateRequest(" ".join(words[:-1]), "en", t,
                                                                                  CONTEXTS[t])))[0]) for t in TARGETS]
        rows = len(chat.rows)
    finally:
        chat.close()
    # every row starts after the words said (less the said prompt's turn end and generation prompt: 5 tokens)
    assert seeded >= 3 * (min(through_said) - 6), (seeded, through_said)
    assert rows == 3  # each language's prime rows were replaced, by the next prime and by the translation
    texts, references = [r.text for r in primed], [r.text for r in whole]
    assert all(text and text.lower() != NEXT.lower() for text in texts), texts
    assert chrf(texts, references) >= 60.0, (texts, references)
