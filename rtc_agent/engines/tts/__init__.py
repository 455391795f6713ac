"""Text-to-speech engines: embedded Piper (joe medium voice, CPU) or an OpenAI-compatible ``/v1/audio/speech`` server.

``engine_spec(settings)`` builds the worker registration from the settings (``tts_engine``, ``tts_url``,
``tts_model``, DESIGN.md section 6); the apps talk to it through :class:`SpeechSynthesizer`, one request per
clause (see :mod:`rtc_agent.engines.tts.base` for the contract and :mod:`rtc_agent.engines.tts.text` for the
clause splitter).

Options beyond the three common switches are read from a ``Settings`` field when it exists, else from the
environment: ``tts_voice`` / ``RTC_AGENT_TTS_VOICE`` (remote voice, default ``alloy``),
``tts_api_key`` / ``RTC_AGENT_TTS_API_KEY``, ``tts_response_format`` / ``RTC_AGENT_TTS_RESPONSE_FORMAT`` (``wav``
or ``pcm``), ``tts_pcm_sample_rate`` (24000), ``tts_speed`` (base speed, 1.0), ``tts_timeout_s`` (30),
``tts_concurrency`` (remote requests at once, 4; Piper always 1: ONNX Runtime already uses every core),
``tts_threads`` (Piper's ONNX Runtime threads, 0 = one per core).

Languages: the configured engine speaks ``tts_language`` (``en``: Piper's joe, the remote ``tts_voice``) and, for
the remote engine, every language of ``tts_voices`` (``es=nova,...``). The multilingual Kokoro voice
(:mod:`rtc_agent.engines.tts.kokoro`, worker engine ``"tts-kokoro"``, loaded at first use) speaks the others it
reads well (``tts_multilingual``, ``kokoro_voices``, ``kokoro_threads``). :func:`voice_for` says which engine
speaks a language natively, :func:`speech_languages` lists them all; no text is ever read by a voice of another
language (engines refuse such requests with ``unsupported_language``). Where Kokoro speaks, the espeak-ng voice
(:mod:`rtc_agent.engines.tts.espeak`, ``"tts-espeak"``) is registered too, unless ``tts_catchup_voice`` is ``off``:
interpretation speaks with it what Kokoro fell too far behind on.
"""

from __future__ import annotations

import os
from typing import Any

from rtc_agent.config import Settings, SettingsError
from rtc_agent.engines.tts.base import (
    MAX_SPEED,
    MIN_SPEED,
    Synthesis,
    SynthesisRequest,
    TTSEngine,
    check_text,
    decode_wav,
    encode_wav,
    language_code,
)
from rtc_agent.engines.tts.espeak import ENGINE_NAME as ESPEAK_ENGINE_NAME
from rtc_agent.engines.tts.espeak import EspeakEngine
from rtc_agent.engines.tts.kokoro import KokoroEngine
from rtc_agent.engines.tts.languages import (
    ENGINE_NAME,
    KOKORO_ENGINE_NAME,
    MULTILINGUAL_MODES,
    engine_languages,
    kokoro_threads,
    kokoro_voices,
    speech_languages,
    voice_for,
)
from rtc_agent.engines.tts.openai import OpenAITTSEngine
from rtc_agent.engines.tts.piper import PiperEngine
from rtc_agent.engines.tts.stream import SpeechSynthesizer, spoken_text
from rtc_agent.engines.tts.text import ClauseSplitter, speakable, split_clauses
from rtc_agent.worker import EngineSpec

#: values of ``tts_catchup_voice``
CATCHUP_VOICES = ("espeak", "off")

__all__ = [
    "CATCHUP_VOICES",
    "ENGINE_NAME",
    "ESPEAK_ENGINE_NAME",
    "KOKORO_ENGINE_NAME",
    "MAX_SPEED",
    "MIN_SPEED",
    "MULTILINGUAL_MODES",
    "ClauseSplitter",
    "EspeakEngine",
    "KokoroEngine",
    "OpenAITTSEngine",
    "PiperEngine",
    "SpeechSynthesizer",
    "Synthesis",
    "SynthesisRequest",
    "TTSEngine",
    "catchup_voice",
    "check_text",
    "decode_wav",
    "encode_wav",
    "engine_spec",
    "engine_specs",
    "espeak_spec",
    "kokoro_spec",
    "language_code",
    "speakable",
    "speech_languages",
    "split_clauses",
    "spoken_text",
    "voice_for",
]

_EMBEDDED = ("embedded", "piper", "")


def _option(settings: Settings, name: str, default: str) -> str:
    """``settings.tts_<name>`` when set, else ``default``."""
    value: Any = getattr(settings, f"tts_{name}", None)
    return str(value) if value not in (None, "") else default


def _number(settings: Settings, name: str, default: float) -> float:
    raw = _option(settings, name, str(default))
    try:
        return float(raw)
    except ValueError:
        raise SettingsError(f"tts_{name} must be a number, got {raw!r}") from None


def engine_spec(settings: Settings, *, name: str = ENGINE_NAME) -> EngineSpec:
    """The worker registration of the configured TTS engine (not loaded yet: the worker loads it on first use or
    in ``load_all``).

    - ``tts_engine = "embedded"`` (or ``"piper"``): Piper; ``tts_model`` may name another Piper ``.onnx`` voice
      file (its ``.onnx.json`` next to it), empty is the packaged joe medium voice. One batch at a time, one
      request per batch (so every clause is delivered the moment it is ready).
    - ``tts_engine = "openai"``: :class:`OpenAITTSEngine` at ``tts_url`` with ``tts_model`` (default ``tts-1``).

    Raises ``SettingsError`` for an unknown engine, a missing or bad URL or option, checked here so a bad
    configuration fails at startup rather than on the first spoken clause.
    """
    kind = settings.tts_engine.strip().lower()
    speed = _number(settings, "speed", 1.0)
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise SettingsError(f"tts_speed must be in [{MIN_SPEED}, {MAX_SPEED}], got {speed}")
    if kind in _EMBEDDED:
        model = settings.tts_model.strip() or None
        if model is not None and not os.path.exists(model):
            raise SettingsError(f"tts_model {model!r}: no such Piper voice file (leave it empty for the packaged "
                                "joe voice)")
        threads = int(_number(settings, "threads", 0)) or None
        if threads is not None and threads < 1:
            raise SettingsError(f"tts_threads must be >= 0, got {threads}")
        # on the same CPU, a recognition (captions, a user turn, an interpretation chunk) starts first
        language = next(iter(engine_languages(settings)))
        return EngineSpec(name=name, factory=lambda: PiperEngine(model, speed=speed, threads=threads,
                                                                 language=language),
                          max_queue=64, max_batch=1, concurrency=1, **_embedded_scheduling(settings))
    if kind == "openai":
        if not settings.tts_url.strip():
            raise SettingsError("tts_engine 'openai' needs tts_url (e.g. --tts-url http://host:8000/v1)")
        concurrency = int(_number(settings, "concurrency", 4))
        languages = engine_languages(settings)
        options: dict[str, Any] = {
            "model": settings.tts_model.strip() or "tts-1",
            "voice": _option(settings, "voice", "alloy"),
            "api_key": _option(settings, "api_key", ""),
            "speed": speed,
            "response_format": _option(settings, "response_format", "wav").lower(),
            "pcm_sample_rate": int(_number(settings, "pcm_sample_rate", 24000)),
            "timeout_s": _number(settings, "timeout_s", 30.0),
            "language": next(iter(languages)),
            "voices": {code: voice for code, voice in languages.items() if voice},
        }
        url = settings.tts_url.strip()
        try:
            OpenAITTSEngine(url, **options)  # validates the options now; cheap, no network
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        return EngineSpec(name=name, factory=lambda: OpenAITTSEngine(url, **options), max_queue=64, max_batch=1,
                          concurrency=max(1, concurrency))
    raise SettingsError(f"unknown tts_engine {settings.tts_engine!r}: use 'embedded' (Piper) or 'openai'")


def _embedded_scheduling(settings: Settings) -> dict[str, Any]:
    """How the worker runs an embedded voice beside the other engines.

    A clause starts only once no text translation decodes (``mt``, the engine of :mod:`rtc_agent.engines.mt`),
    waiting at most ``yield_max_s``: a listener waits for that text, and on a small CPU the two running at once
    slow each other down several times over (measured on 2 cores: a batch of three translations 2.5 s alone,
    7.5 s beside Kokoro clauses). And the voice's threads run ``tts_nice`` lower in CPU priority, so the clause in
    progress when a translation or a recognition starts (or one past its wait) takes only the idle cores; that
    translation starts at once rather than waiting for the clause (a clause takes seconds).
    """
    nice = _number(settings, "nice", 10)
    if nice != int(nice) or not 0 <= nice <= 19:
        raise SettingsError(f"tts_nice must be an integer in 0..19, got {nice}")
    return {"yields_to": ("mt",), "yield_max_s": 3.0, "nice": int(nice)}


def kokoro_spec(settings: Settings) -> EngineSpec:
    """The worker registration of the multilingual Kokoro voice (``"tts-kokoro"``; loads at first use): the
    languages and voices of ``kokoro_voices``, ``kokoro_threads`` CPU threads, one clause at a time."""
    voices = kokoro_voices(settings)
    threads = kokoro_threads(settings)
    speed = _number(settings, "speed", 1.0)
    cache_dir = settings.cache_dir
    bits = int(getattr(settings, "kokoro_weight_bits", 0))

    def factory() -> KokoroEngine:
        return KokoroEngine(cache_dir=cache_dir, voices=voices, languages=tuple(voices), speed=speed,
                            threads=threads, weight_bits=bits)

    try:
        factory()  # validates every option now (the engine's constructor is their one check); loads nothing
    except ValueError as exc:
        raise SettingsError(f"Kokoro settings: {exc}") from exc
    return EngineSpec(name=KOKORO_ENGINE_NAME, factory=factory, max_queue=64, max_batch=1, concurrency=1,
                      **_embedded_scheduling(settings))


def catchup_voice(settings: Settings) -> bool:
    """Whether the espeak-ng voice speaks what a neural voice fell too far behind on (``tts_catchup_voice``)."""
    value = str(getattr(settings, "tts_catchup_voice", "espeak") or "off").strip().lower()
    if value not in CATCHUP_VOICES:
        raise SettingsError(f"tts_catchup_voice must be one of {', '.join(CATCHUP_VOICES)}, got {value!r}")
    return value == "espeak"


def espeak_spec(settings: Settings) -> EngineSpec:
    """The worker registration of the espeak-ng catch-up voice (``"tts-espeak"``; a clause costs ~10-20 ms, so it
    neither yields nor waits: a voice that is already late must not wait longer)."""
    speed = _number(settings, "speed", 1.0)
    return EngineSpec(name=ESPEAK_ENGINE_NAME, factory=lambda: EspeakEngine(speed=speed), max_queue=64, max_batch=1,
                      concurrency=2, nice=_embedded_scheduling(settings)["nice"])


def engine_specs(settings: Settings) -> list[EngineSpec]:
    """The configured engine's registration, plus Kokoro's when :func:`speech_languages` routes a language to it
    (and then the espeak-ng catch-up voice's, unless ``tts_catchup_voice`` is off)."""
    specs = [engine_spec(settings)]
    if KOKORO_ENGINE_NAME in speech_languages(settings).values():
        specs.append(kokoro_spec(settings))
        if catchup_voice(settings):
            specs.append(espeak_spec(settings))
    return specs
