"""Text translation into any language (the worker's ``mt`` engine), by the best engine configured.

``mt_engine`` chooses one (``auto``, the default: ``ctranslate2`` when ``mt_model_dir`` is set, else ``openai`` when
``mt_url`` is set, else ``embedded``):

- ``ctranslate2``: a CTranslate2 translation model folder (OPUS-MT/Marian, one or many targets, or NLLB) at
  ``mt_model_dir`` (:mod:`.ctranslate2_engine`), beam ``mt_beam``;
- ``openai``: an OpenAI-compatible chat server (vLLM, Ollama) at ``mt_url`` with ``mt_model``/``mt_api_key``,
  through :class:`~rtc_agent.engines.llm.openai.OpenAIChatEngine` (:mod:`.chat`);
- ``embedded``: the packaged LLM with a translation prompt (:mod:`.chat`): the fallback, labelled with its measured
  quality (:mod:`.quality`). The model is ``mt_model``, else ``llm_model`` when the LLM engine is embedded, else the
  packaged default. When the LLM engine is the embedded one with that same model (the defaults), the translator
  runs on the worker's ``llm`` engine: the same loaded model, the same lane and thread (``EngineSpec.shares``), a
  translation taken before waiting agent turns (it is short, at most ``16 + 2 * len(text) // 3`` tokens, and a listener
  waits for it) but never interrupting one. Unlike an agent turn, which runs ahead of its speech, a translation
  does not step aside for ``tts`` and ``asr`` between its steps (it is what the listener waits for; stepping aside
  before every layer while captions decode made each take tens of seconds on a busy 2-core machine). Only a
  different model (or a remote LLM) loads a second copy, on the first translation. Translations waiting together
  (a caption final into each listener language) are taken as one batch of up to ``mt_max_batch`` (4) and decoded
  together (``SmolLMEngine.generate_many``: one forward per step for all of them);
- ``none``: no text translation.

Use::

    result = await worker.call("mt", TextTranslateRequest("Good morning", source="en", target="es"))
    result.text, result.engine     # "Buenos días", "ctranslate2:opus-mt-en-es"

:func:`translation_targets` tells which targets the configured engine produces and how well, without loading it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rtc_agent.config import SettingsError
from rtc_agent.engines.mt.base import ContextPrimeRequest, TextTranslateRequest, TextTranslation, TextTranslationEngine
from rtc_agent.engines.mt.chat import DEFAULT_MAX_BATCH, ChatTranslationEngine
from rtc_agent.engines.mt.ctranslate2_engine import CTranslate2TranslationEngine, read_layout
from rtc_agent.engines.mt.languages import AUTO, LANGUAGE_NAMES, check_language
from rtc_agent.engines.mt.quality import quality
from rtc_agent.worker import EngineSpec

__all__ = [
    "AUTO",
    "ENGINE_NAME",
    "KINDS",
    "PRIME_ENGINE_NAME",
    "CTranslate2TranslationEngine",
    "ChatTranslationEngine",
    "ContextPrimeRequest",
    "TextTranslateRequest",
    "TextTranslation",
    "TextTranslationEngine",
    "check_language",
    "describe",
    "engine_kind",
    "engine_specs",
    "shares_llm",
    "translation_targets",
]

ENGINE_NAME = "mt"
#: the embedded engine's background work (``ContextPrimeRequest``) on the same lane and model as ``mt``: its own
#: batches, taken after every other waiting request of the lane (translations, an agent's turns), and no voice or
#: recogniser steps aside for them
PRIME_ENGINE_NAME = "mt-prime"
KINDS = ("auto", "embedded", "openai", "ctranslate2", "none")
#: the worker's LLM engine (``rtc_agent.engines.register_engines`` registers it before this one)
LLM_ENGINE = "llm"


def _text(settings: Any, name: str) -> str:
    return str(getattr(settings, name, "") or "").strip()


def engine_kind(settings: Any) -> str:
    """The engine ``mt_engine`` selects, ``auto`` resolved (``SettingsError`` for an unknown one)."""
    kind = (_text(settings, "mt_engine") or "auto").lower()
    if kind not in KINDS:
        raise SettingsError(f"unknown mt_engine {kind!r}: use {', '.join(KINDS)}")
    if kind == "auto":
        return "ctranslate2" if _text(settings, "mt_model_dir") else "openai" if _text(settings, "mt_url") \
            else "embedded"
    return kind


def _embedded_model(settings: Any) -> str:
    from rtc_agent.engines.llm import EMBEDDED_NAMES

    if _text(settings, "mt_model"):
        return _text(settings, "mt_model")
    llm_kind = (_text(settings, "llm_engine") or "embedded").lower()
    return _text(settings, "llm_model") if llm_kind in EMBEDDED_NAMES else ""


def _model_key(model: str) -> str:
    """One spelling per embedded model: the packaged model's name, or the file's resolved path."""
    from rtc_agent.engines.llm.packaged import packaged_model

    packaged = packaged_model(model or None)
    return packaged.name if packaged is not None else str(Path(model).expanduser().resolve())


def shares_llm(settings: Any) -> bool:
    """Whether the embedded translator runs on the worker's ``llm`` engine: the LLM engine is the embedded one and
    its model is the translator's (see the module docstring)."""
    from rtc_agent.engines.llm import EMBEDDED_NAMES

    if engine_kind(settings) != "embedded":
        return False
    if (_text(settings, "llm_engine") or "embedded").lower() not in EMBEDDED_NAMES:
        return False
    return _model_key(_embedded_model(settings)) == _model_key(_text(settings, "llm_model"))


def _layout(settings: Any) -> Any:
    try:
        return read_layout(_text(settings, "mt_model_dir"))
    except (OSError, ValueError) as exc:
        raise SettingsError(f"mt_model_dir: {exc}") from None


def describe(settings: Any) -> str:
    """``kind:model`` of the configured engine (``none`` when off), as ``TextTranslation.engine`` will say."""
    kind = engine_kind(settings)
    if kind == "none":
        return "none"
    if kind == "ctranslate2":
        return f"ctranslate2:{_layout(settings).name}"
    if kind == "openai":
        return f"openai:{_text(settings, 'mt_model') or 'default'}"
    from rtc_agent.engines.llm.packaged import embedded_model_name

    return f"embedded:{embedded_model_name(_embedded_model(settings) or None)}"


def translation_targets(settings: Any) -> dict[str, dict[str, Any]]:
    """Per target language code the configured engine can produce: ``{"engine", "quality", "chrf"}`` (quality
    from the measured table of :mod:`.quality`; ``chrf`` None where unmeasured). ``{}`` for ``none``."""
    kind = engine_kind(settings)
    if kind == "none":
        return {}
    label = describe(settings)
    codes = sorted(_layout(settings).targets) if kind == "ctranslate2" else sorted(LANGUAGE_NAMES)
    return {code: quality(label, code) for code in codes}


def engine_specs(settings: Any) -> list[EngineSpec]:
    """The worker registration of the configured engine (``[]`` for ``none``); nothing loads until first use.

    Raises ``SettingsError`` for an unknown engine, ``openai`` without ``mt_url`` or with a bad one, or an
    ``mt_model_dir`` that is not a usable CTranslate2 translation model.
    """
    kind = engine_kind(settings)
    max_chars = int(getattr(settings, "mt_max_chars", 2000))
    if kind == "none":
        return []
    if kind == "ctranslate2":
        model_dir, beam = str(_layout(settings).path), int(getattr(settings, "mt_beam", 2))
        return [EngineSpec(name=ENGINE_NAME, max_queue=64, max_batch=8, concurrency=1, factory=lambda: (
            CTranslate2TranslationEngine(model_dir, beam=beam, max_chars=max_chars)))]
    if kind == "openai":
        from rtc_agent.engines.llm.openai import OpenAIChatEngine, chat_completions_url

        url, model = _text(settings, "mt_url"), _text(settings, "mt_model")
        if not url:
            raise SettingsError("mt_engine 'openai' needs mt_url (e.g. --mt-url http://gpu-box:8000/v1)")
        try:
            chat_completions_url(url)
        except ValueError as exc:
            raise SettingsError(f"mt_url: {exc}") from None
        api_key, timeout = _text(settings, "mt_api_key") or None, float(getattr(settings, "mt_timeout_s", 30.0))
        return [EngineSpec(name=ENGINE_NAME, max_queue=64, concurrency=8, factory=lambda: ChatTranslationEngine(
            OpenAIChatEngine(url, model, api_key=api_key, read_timeout=timeout), kind="openai", model=model,
            max_chars=max_chars))]
    from rtc_agent.engines.llm import engine_spec as llm_engine_spec

    max_batch = int(getattr(settings, "mt_max_batch", DEFAULT_MAX_BATCH))

    def adapt(chat: Any) -> ChatTranslationEngine:
        return ChatTranslationEngine(chat, kind="embedded", max_chars=max_chars, max_batch=max_batch)

    chat_spec = llm_engine_spec(dataclasses.replace(settings, llm_engine="embedded",
                                                    llm_model=_embedded_model(settings)), name=ENGINE_NAME)
    # translations waiting together (one final into each listener language) go as one batched decode
    own = dataclasses.replace(chat_spec, max_queue=32, max_batch=max_batch, yields_to=(),
                              factory=lambda: adapt(chat_spec.factory()))
    if shares_llm(settings):  # one model in memory: the LLM's (its own copy only where no llm engine is registered)
        own = dataclasses.replace(own, shares=LLM_ENGINE, adapt=adapt, urgent=True)

    def adapt_prime(host: Any) -> ChatTranslationEngine:  # the lane's engine: the LLM's, or mt's own copy
        return host if isinstance(host, ChatTranslationEngine) else adapt(host)

    prime = dataclasses.replace(own, name=PRIME_ENGINE_NAME, shares=ENGINE_NAME, adapt=adapt_prime, urgent=False,
                                background=True, max_queue=16)
    return [own, prime]
