"""Speech-translation engines behind the interpretation policy (DESIGN.md sections 5 and 6).

``st_engine`` chooses one:

- ``embedded`` (default): :class:`WhisperTranslator`, Whisper's translate task (any language to English) with
  LocalAgreement deciding EMIT/WAIT. It reuses the worker's ``asr`` engine: no model of its own.
- ``openai``: :class:`ChatTranslator`, an OpenAI-compatible ``/v1/chat/completions`` server with audio input
  (vLLM serving a speech LLM) at ``st_url`` with ``st_model``; registered with the worker as the ``st`` engine.
- ``cascade``: :class:`CascadeTranslator`, streaming ASR (``asr``) plus an LLM translating text: the ``st``
  engine when ``st_url`` is set (an OpenAI-compatible chat server), else the worker's ``llm`` engine.

:func:`engine_specs` gives the worker registrations (none for ``embedded``); :func:`create_translator` makes the
per-session translator. Neither loads a model.
"""

from __future__ import annotations

from typing import Any

from rtc_agent.config import SettingsError
from rtc_agent.engines.st.base import (
    LANGUAGE_NAMES,
    SAMPLE_RATE,
    SpeechTranslator,
    TranslateRequest,
    Translation,
    Turn,
    estimate_tokens,
    language_name,
)
from rtc_agent.engines.st.cascade import CascadeTranslator
from rtc_agent.engines.st.remote import MODES, ChatTranslator
from rtc_agent.engines.st.whisper import WHISPER_CONTEXT, WhisperTranslator
from rtc_agent.engines.st.whisper_stream import WhisperStream
from rtc_agent.worker import EngineSpec

__all__ = [
    "ENGINE_NAME",
    "KINDS",
    "LANGUAGE_NAMES",
    "MODES",
    "SAMPLE_RATE",
    "WHISPER_CONTEXT",
    "CascadeTranslator",
    "ChatTranslator",
    "SpeechTranslator",
    "TranslateRequest",
    "Translation",
    "Turn",
    "WhisperStream",
    "WhisperTranslator",
    "check_settings",
    "create_translator",
    "describe",
    "engine_specs",
    "english_only",
    "estimate_tokens",
    "language_name",
    "source_text_by_engine",
]

ENGINE_NAME = "st"
KINDS = ("embedded", "openai", "cascade")


def _kind(settings: Any) -> str:
    kind = (getattr(settings, "st_engine", "embedded") or "embedded").strip().lower()
    if kind not in KINDS:
        raise SettingsError(f"unknown st_engine {kind!r}: use {', '.join(KINDS)}")
    return kind


def _setting(settings: Any, name: str, default: Any) -> Any:
    value = getattr(settings, name, None)
    return default if value in (None, "") else value


def check_settings(settings: Any) -> None:
    """Refuse ``st_*`` settings that cannot work (``SettingsError`` naming the setting); called at start-up."""
    _kind(settings)
    mode = _setting(settings, "st_mode", "target")
    if mode not in MODES:
        raise SettingsError(f"st_mode must be one of {', '.join(MODES)}, got {mode!r}")
    chunk = _setting(settings, "st_chunk_ms", 800)
    if chunk not in (800, 1600):
        raise SettingsError(f"st_chunk_ms must be 800 or 1600 (the first chunk is always 1600), got {chunk!r}")
    window = float(_setting(settings, "st_window_s", 24.0))
    if window != 0 and not 2.0 <= window <= 3600.0:
        raise SettingsError(f"st_window_s must be 0 (off) or 2..3600 seconds, got {window}")
    if int(_setting(settings, "st_max_model_len", 8192)) < 512:
        raise SettingsError("st_max_model_len must be at least 512 tokens")
    if not 0.5 <= float(_setting(settings, "st_max_lag_s", 3.0)) <= 60:
        raise SettingsError("st_max_lag_s must be within 0.5..60 seconds")
    if int(_setting(settings, "st_max_upload_bytes", 1)) < 1024:
        raise SettingsError("st_max_upload_bytes must be at least 1024")


def engine_specs(settings: Any) -> list[EngineSpec]:
    """The worker registrations the configured ST engine needs (``[]`` for ``embedded``: it uses ``asr``).

    Raises ``SettingsError`` for an unknown engine, an ``openai`` engine without ``st_url`` or a bad URL.
    """
    kind = _kind(settings)
    check_settings(settings)
    url = (getattr(settings, "st_url", "") or "").strip()
    if kind == "embedded" or (kind == "cascade" and not url):
        return []
    if kind == "openai" and not url:
        raise SettingsError("st_engine 'openai' needs st_url (e.g. --st-url http://gpu-box:8000/v1)")
    from rtc_agent.engines.llm.openai import OpenAIChatEngine, chat_completions_url

    try:
        chat_completions_url(url)
    except ValueError as exc:
        raise SettingsError(f"st_url: {exc}") from None
    model = (getattr(settings, "st_model", "") or "").strip()
    api_key = _setting(settings, "st_api_key", "") or None

    def factory() -> OpenAIChatEngine:
        # audio turns make long prompts: allow a slow first token
        return OpenAIChatEngine(url, model, api_key=api_key, read_timeout=120.0)

    return [EngineSpec(name=ENGINE_NAME, factory=factory, max_queue=64, max_batch=1, concurrency=8)]


def english_only(settings: Any) -> bool:
    """True when the configured engine can only translate into English (Whisper's translate task)."""
    return _kind(settings) == "embedded"


def source_text_by_engine(settings: Any) -> bool:
    """True when the configured engine recognizes the source itself at no extra cost (``cascade``, ``openai``);
    the embedded Whisper engine needs a second decode for it (``source_text``)."""
    return _kind(settings) != "embedded"


def describe(settings: Any) -> str:
    """``kind:model`` for ``session.created``."""
    kind = _kind(settings)
    if kind == "embedded":
        return f"embedded:whisper-translate({getattr(settings, 'asr_model', '') or 'whisper-base'})"
    if kind == "openai":
        return f"openai:{getattr(settings, 'st_model', '') or 'default'}"
    llm = "st" if (getattr(settings, "st_url", "") or "").strip() else "llm"
    return f"cascade:asr+{llm}"


def create_translator(settings: Any, worker: Any, *, source_text: bool = False) -> SpeechTranslator:
    """A new per-session translator for the configured engine (see the module docstring)."""
    kind = _kind(settings)
    max_model_len = int(_setting(settings, "st_max_model_len", 8192))
    if kind == "embedded":
        return WhisperTranslator(worker, "asr", source_text=source_text)
    if kind == "openai":
        return ChatTranslator(worker, ENGINE_NAME, model=(getattr(settings, "st_model", "") or "").strip(),
                              mode=_setting(settings, "st_mode", "target"), max_model_len=max_model_len)
    url = (getattr(settings, "st_url", "") or "").strip()
    return CascadeTranslator(worker, llm_engine=ENGINE_NAME if url else "llm",
                             model=(getattr(settings, "st_model", "") or "").strip(), max_model_len=max_model_len)
