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
