"""Which TTS worker engine speaks which language, from the settings (no engine is loaded here).

- The configured engine (worker name ``"tts"``: Piper, or the OpenAI-compatible server) speaks ``tts_language``
  (``en``) and, when remote, the languages of ``tts_voices`` (``es=nova,fr=echo``).
- The multilingual Kokoro voice (``"tts-kokoro"``) speaks :data:`~rtc_agent.engines.tts.kokoro.KOKORO_LANGUAGES`
  and the languages ``kokoro_voices`` adds (each needs an espeak-ng reading), as ``tts_multilingual`` says:
  ``auto`` (the default): for the languages the configured engine does not speak, when its packages and espeak-ng
  are installed; ``kokoro``: for every language it reads, before the configured engine (a missing package then
  fails its load with a message naming it); ``off``: never.

A language no engine speaks is text only: :func:`voice_for` returns ``None`` for it.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil
from typing import Any

from rtc_agent.config import SettingsError
from rtc_agent.engines.cpu import usable_cores
from rtc_agent.engines.tts.base import language_code
from rtc_agent.engines.tts.espeak_phonemes import espeak_voice
from rtc_agent.engines.tts.kokoro import DATA_PACKAGE, DEFAULT_VOICES, MODEL_PACKAGES, VOICE_NAMES

__all__ = ["ENGINE_NAME", "KOKORO_ENGINE_NAME", "MULTILINGUAL_MODES", "engine_languages", "kokoro_installed",
           "kokoro_threads", "kokoro_voices", "multilingual_mode", "neural_voices", "pairs", "speech_languages",
           "voice_for"]

ENGINE_NAME = "tts"
KOKORO_ENGINE_NAME = "tts-kokoro"
MULTILINGUAL_MODES = ("auto", "kokoro", "off")


def pairs(entries: Any, setting: str) -> dict[str, str]:
    """``LANG=VALUE`` entries (a list, each possibly comma-separated, or one string) as ``{lang: value}`` with the
    language codes normalised; ``SettingsError`` naming ``setting`` for an entry of another shape."""
    items = [entries] if isinstance(entries, str) else list(entries or [])
    out: dict[str, str] = {}
    for entry in (part.strip() for item in items for part in str(item).split(",")):
        if not entry:
            continue
        code, sep, value = (x.strip() for x in entry.partition("="))
        if not sep or not code.isalpha() or not 2 <= len(code) <= 3 or not value:
            raise SettingsError(f"{setting}: {entry!r} is not LANG=VOICE (LANG an ISO 639-1 code such as es)")
        out[language_code(code)] = value
    return out


def _setting(settings: Any, name: str, default: Any) -> Any:
    value = getattr(settings, name, None)
    return default if value is None else value


def engine_languages(settings: Any) -> dict[str, str]:
    """Language -> voice of the configured engine (``""``: its own voice, ``tts_voice`` or the Piper voice)."""
    own = language_code(str(_setting(settings, "tts_language", "en")) or "en")
    voices = {own: ""}
    if str(_setting(settings, "tts_engine", "embedded")).strip().lower() == "openai":
        voices.update(pairs(_setting(settings, "tts_voices", []), "tts_voices"))
    return voices


def kokoro_voices(settings: Any) -> dict[str, str]:
    """Language -> Kokoro voice: the measured defaults with ``kokoro_voices`` on top. ``SettingsError`` for a voice
    Kokoro lacks or a language espeak-ng gives it no reading of."""
    chosen = pairs(_setting(settings, "kokoro_voices", []), "kokoro_voices")
    for code, voice in chosen.items():
        if voice not in VOICE_NAMES:
            raise SettingsError(f"kokoro_voices: {voice!r} is not a Kokoro voice (use {', '.join(VOICE_NAMES)})")
        if espeak_voice(code) is None:
            raise SettingsError(f"kokoro_voices: Kokoro cannot read {code!r} (espeak-ng gives it no input here)")
    return {**DEFAULT_VOICES, **chosen}


def multilingual_mode(settings: Any) -> str:
    mode = str(_setting(settings, "tts_multilingual", "auto")).strip().lower()
    if mode not in MULTILINGUAL_MODES:
        raise SettingsError(f"tts_multilingual must be one of {', '.join(MULTILINGUAL_MODES)}, got {mode!r}")
    return mode


@functools.lru_cache(maxsize=1)
def kokoro_installed() -> bool:
    """True when the Kokoro packages and the espeak-ng program are installed (checked once per process)."""
    packages = (DATA_PACKAGE, *MODEL_PACKAGES)
    return all(importlib.util.find_spec(p) is not None for p in packages) and shutil.which("espeak-ng") is not None


def kokoro_threads(settings: Any) -> int:
    """``kokoro_threads``, with 0 meaning half the usable cores (at least 1)."""
    configured = int(_setting(settings, "kokoro_threads", 0))
    if configured < 0:
        raise SettingsError(f"kokoro_threads must be >= 0, got {configured}")
    return configured or max(1, usable_cores() // 2)


def neural_voices(settings: Any) -> int:
    """``tts_neural_voices``, with 0 meaning one per two usable cores (at least 1): Kokoro synthesizes one text
    at a time, a sentence in 0.35-0.64 of its length on one thread of a 2-core machine, so beside recognition and
    translation such a machine keeps one language's voice in time, not three (README, SFU rooms)."""
    configured = int(_setting(settings, "tts_neural_voices", 0))
    if configured < 0:
        raise SettingsError(f"tts_neural_voices must be >= 0, got {configured}")
    return configured or max(1, usable_cores() // 2)



def speech_languages(settings: Any) -> dict[str, str]:
    """Every language some engine speaks natively -> the worker engine name that speaks it (``"tts"`` or
    ``"tts-kokoro"``), for the capabilities the pages read. ``SettingsError`` for bad language settings."""
    own = dict.fromkeys(engine_languages(settings), ENGINE_NAME)
    mode = multilingual_mode(settings)
    if mode == "off" or (mode == "auto" and not kokoro_installed()):
        return own
    kokoro = dict.fromkeys(kokoro_voices(settings), KOKORO_ENGINE_NAME)
    return {**kokoro, **own} if mode == "auto" else {**own, **kokoro}


def voice_for(settings: Any, language: str) -> str | None:
    """The worker engine name that speaks ``language`` (ISO 639-1; ``es-MX`` counts as ``es``) natively: ``"tts"``
    (the configured engine, e.g. Piper for ``en``), ``"tts-kokoro"``, or ``None`` when no engine speaks it (that
    language is text only)."""
    if not isinstance(language, str) or not language.strip():
        return None
    return speech_languages(settings).get(language_code(language))
