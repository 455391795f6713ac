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
from rtc_agent.engines.mt import TextTranslateRequest
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
