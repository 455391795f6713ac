"""The embedded text translator (the packaged LLM behind the ``mt`` engine) on real sentences: properties that hold
on every CPU (answers in the target language's letters, a corpus chrF2 floor well below the measured figure), not
one sentence's words; and it runs on the worker's one loaded LLM (the same model object and lane)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rtc_agent.bench.translate import chrf, fold
from rtc_agent.config import Settings
from rtc_agent.engines import llm, mt
from rtc_agent.engines.llm.smollm import SmolLMEngine
from rtc_agent.engines.mt import TextTranslateRequest
from rtc_agent.worker import Worker

pytestmark = pytest.mark.real_model

# (English, Spanish reference): our own short sentences, the kind a call room translates
SENTENCES = [
    ("Thank you very much.", "Muchas gracias."),
    ("Please leave a message after the tone.", "Por favor deje un mensaje despues del tono."),
    ("The meeting starts tomorrow morning.", "La reunion empieza manana por la manana."),
    ("Where is the train station?", "Donde esta la estacion de tren?"),
]


async def test_embedded_translates_into_spanish_on_the_one_loaded_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = dataclasses.replace(Settings(), mt_engine="embedded", cache_dir=Settings().cache_dir)
    made: list[SmolLMEngine] = []  # the LLM engines this test makes (a gc count would see other tests' come and go)
    init = SmolLMEngine.__init__

    def counted_init(self: SmolLMEngine, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(SmolLMEngine, "__init__", counted_init)
    worker = Worker()
    for spec in [llm.engine_spec(settings), *mt.engine_specs(settings)]:  # as register_engines does
        worker.add(spec)
    try:
        results = [await worker.call("mt", TextTranslateRequest(en, "en", "es"), timeout=600)
                   for en, _ in SENTENCES]
        translator, model = await worker.load("mt"), await worker.load("llm")
        assert worker.host_of("mt") == "llm" and translator.chat is model  # one model object, one lane
        assert len(made) == 1, f"one LLM engine made, not {len(made)}"
        assert worker.stats()["mt"]["calls"] == len(SENTENCES) and worker.stats()["llm"]["calls"] == 0
    finally:
        await worker.close()
    texts = [r.text for r in results]
    assert all(r.engine == mt.describe(settings) for r in results)
    assert all(text and text.lower() != en.lower() for text, (en, _) in zip(texts, SENTENCES, strict=True))
    assert chrf([fold(t) for t in texts], [ref for _, ref in SENTENCES]) >= 25.0, texts
