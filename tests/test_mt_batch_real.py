"""Batched translation on the real embedded model (issue 25): one sentence into Spanish, German and Italian at once
goes to the model as one batch on the worker's one loaded LLM, and each translation is the one the model gives that
request alone (up to the rounding of int4/bfloat16 kernels on different row counts: measured by chrF, not by
string equality, so it holds on every CPU); and with ``llm_batch_int8`` the batch's decode steps take int8 x int8
products and translate as the int4 kernel does, up to 8-bit rounding."""

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
    # batching itself, on the same kernels: the int8 path of batched steps is compared below
    settings = dataclasses.replace(Settings(), mt_engine="embedded", llm_batch_int8="off")
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


SENTENCES = ("Please hold while I try to connect your call.",
             "Your conference will begin when the leader joins.",
             "The weather tomorrow will be sunny with a light wind from the west.",
             "I would like to book a table for four people on Friday evening.",
             "We are sorry, the number you have dialed is not in service.",
             "To repeat this menu, press the star key at any time.",
             "The train to the airport leaves every twenty minutes from platform four.",
             "Please remember to switch off the lights when you leave the office tonight.",
             "We have received your message and will call you back as soon as possible.",
             "Our new office opens next week, so bring your questions to the meeting on Friday.",
             "She bought three tickets for the concert, but her brother could not come.",
             "Thank you for calling, all of our agents are busy helping other customers.")


def _translate_all(mode: str) -> tuple[list[list[str]], int, str]:
    """Each of SENTENCES into TARGETS, three rows per batch, with the embedded model's ``llm_batch_int8`` ``mode``;
    returns the texts per sentence, how many products took the int8 x int8 path, and the engine's mode."""
    from rtc_agent.engines.llm import precision

    settings = dataclasses.replace(Settings(), mt_engine="embedded", llm_batch_int8=mode)
    chat = llm.engine_spec(settings).factory()
    chat.load(lambda message: None)
    engine = ChatTranslationEngine(chat, kind="embedded")
    products = 0
    original = precision.matmul

    def counted(*args: object) -> object:
        nonlocal products
        products += 1
        return original(*args)

    precision.matmul = counted
    try:
        texts = [[r.text for r in engine.run_batch([TextTranslateRequest(s, "en", t) for t in TARGETS])]
                 for s in SENTENCES]
    finally:
        precision.matmul = original
        chat.close()
    return texts, products, chat.load_info["batch_int8"]


def test_batched_decode_steps_in_int8_translate_as_the_int4_kernel_does() -> None:
    """With ``llm_batch_int8`` the decode steps of three rows take the int8 x int8 products (where this torch runs
    them) and the translations stay those of the int4 kernel, up to the rounding of 8-bit inputs: chrF between
    the two over twelve sentences into three languages, per language."""
    import torch

    from rtc_agent.engines.llm import batch_int8

    if not batch_int8.available(torch):
        pytest.skip("no x86/FBGEMM dynamic int8 linear with AVX2 kernels here (ATEN_CPU_CAPABILITY=default?)")
    fast, products, mode = _translate_all("on")
    assert mode == "on" and products > 0
    kernel, none, mode = _translate_all("off")
    assert mode == "off" and none == 0
    for b, target in enumerate(TARGETS):
        texts, references = [row[b] for row in fast], [row[b] for row in kernel]
        assert all(text and text.lower() not in (s.lower() for s in SENTENCES) for text in texts), texts
        assert chrf(texts, references) >= 60.0, (target, texts, references)
