"""What this server can deliver to a listener, per language: translated text, and speech of it.

A listener's language is served as **text** when the speech-translation engine produces it from the audio (the
embedded Whisper translate task: English only; a cascade or remote ST engine: any language), or else when the text
translation engine (``engines.mt``) translates caption finals into it. It is served as **speech** when a TTS voice
speaks it (``engines.tts.voice_for``). :func:`listen_options` is the table the pages offer
(``client_config.capabilities.listen``); :func:`check_listen` is the rule sessions are held to (an
``unsupported_language`` error naming the language).

A misconfigured text-translation or TTS engine serves nothing here (logged); the server reports the setting
itself at start-up.
"""

from __future__ import annotations

import logging
from typing import Any

from rtc_agent.engines import st
from rtc_agent.engines.mt import (
    ENGINE_NAME,
    PRIME_ENGINE_NAME,
    ContextPrimeRequest,
    TextTranslateRequest,
    translation_targets,
)
from rtc_agent.engines.tts import voice_for
from rtc_agent.errors import InvalidRequest

__all__ = ["ROUTE_SPEECH", "ROUTE_TEXT", "check_listen", "listen_options", "prime_engine", "prime_request",
           "route_for", "text_request", "voice_of"]

log = logging.getLogger(__name__)

ROUTE_SPEECH = "speech"  # speech translation of the speaker's audio
ROUTE_TEXT = "text"  # text translation of the speaker's caption finals


def _base(language: str) -> str:
    return language.split("-")[0].lower()


def _mt_targets(settings: Any) -> dict[str, dict[str, Any]]:
    """``engines.mt.translation_targets(settings)``: {language: {engine, quality, chrf}} ({} when misconfigured)."""
    try:
        return dict(translation_targets(settings) or {})
    except Exception:  # a misconfigured MT engine serves nothing; the server logs why at start-up
        log.exception("text translation targets unavailable")
        return {}


def _voice_for(settings: Any, language: str) -> Any:
    """``engines.tts.voice_for(settings, language)``: the worker engine that speaks it natively, or None."""
    try:
        return voice_for(settings, language)
    except Exception:
        log.exception("no voice for %s", language)
        return None


def voice_of(settings: Any, language: str) -> dict[str, Any] | None:
    """The voice for ``language`` as ``{engine, voice, quality}`` (``engine``: the worker engine name), or None."""
    found = _voice_for(settings, language)
    if found is None:
        return None
    if isinstance(found, str):
        return {"engine": found, "voice": None, "quality": None}
    get = found.get if isinstance(found, dict) else (lambda key, default=None: getattr(found, key, default))
    engine = get("engine")
    if not engine:
        return None
    return {"engine": str(engine), "voice": get("voice"), "quality": get("quality")}


def _st_produces(settings: Any, language: str) -> bool:
    try:
        return _base(language) == "en" or not st.english_only(settings)
    except Exception:  # a misconfigured ST engine: sessions get a clear error anyway
        return _base(language) == "en"


def route_for(settings: Any, target: str) -> tuple[str, dict[str, Any]] | None:
    """How ``target`` text is made: ``(ROUTE_SPEECH, {engine, quality})`` or ``(ROUTE_TEXT, {engine, quality,
    chrf})``; None when nothing here produces it."""
    if _st_produces(settings, target):
        return ROUTE_SPEECH, {"engine": st.describe(settings), "quality": None}
    targets = _mt_targets(settings)
    info = targets.get(target) or targets.get(_base(target))
    if info is not None:
        return ROUTE_TEXT, dict(info)
    return None


def listen_options(settings: Any, languages: tuple[str, ...] | list[str]) -> dict[str, dict[str, Any]]:
    """Per language: ``{text, speech, engine, voice, quality, reason}`` (``reason``: why not, when text or speech
    is false; ``engine``/``quality`` of the text, ``voice`` of the speech)."""
    out: dict[str, dict[str, Any]] = {}
    for language in languages:
        route = route_for(settings, language)
        voice = voice_of(settings, language) if route is not None else None
        entry: dict[str, Any] = {"text": route is not None, "speech": voice is not None,
                                 "engine": route[1].get("engine") if route else None,
                                 "voice": voice.get("voice") or voice["engine"] if voice else None,
                                 "quality": route[1].get("quality") if route else None, "reason": None}
        if route is None:
            entry["reason"] = (f"no engine on this server translates into {language!r}: speech translation gives "
                               "English only, and no text translation model covers it")
        elif voice is None:
            entry["reason"] = f"no voice on this server speaks {language!r}: translations are shown as text"
        out[language] = entry
    return out


def check_listen(settings: Any, listen: str, spoken: str | None = None, *, key: str = "listen_language") -> None:
    """Raise 400 ``unsupported_language`` when nothing here delivers ``listen`` as text (a listener who listens
    in the language it speaks, ``spoken``, needs no translation and is always served)."""
    if spoken is not None and spoken != "auto" and _base(spoken) == _base(listen):
        return
    if route_for(settings, listen) is None:
        raise InvalidRequest(f"{key} {listen!r} cannot be served here: speech translation gives English only and no "
                             "text translation engine translates into it (see client_config.capabilities.listen)",
                             code="unsupported_language")


def text_request(text: str, source: str | None, target: str, context: list[tuple[str, str]]) -> Any:
    """The ``mt`` engine's request (``engines.mt.TextTranslateRequest``; ``source`` None: ``auto``; ``context``:
    recent ``(source, translation)`` pairs, oldest first)."""
    return TextTranslateRequest(text, source or "auto", target, tuple(context))


def prime_request(source: str | None, target: str, context: list[tuple[str, str]], text: str = "") -> Any:
    """The ``mt`` engine's request to compute a conversation's next prompt start ahead of its text, up to that
    text's first words ``text`` when given (``engines.mt.ContextPrimeRequest``; arguments as
    :func:`text_request`'s)."""
    return ContextPrimeRequest(source or "auto", target, tuple(context), text)


def prime_engine(worker: Any, engine: str) -> str:
    """Where a ``ContextPrimeRequest`` for the translations ``engine`` makes goes: the embedded translator's
    background engine (``engines.mt.PRIME_ENGINE_NAME``, on the same model) when ``worker`` has it, else ``engine``
    itself (which answers at once when it keeps nothing)."""
    names = worker.names() if hasattr(worker, "names") else []
    return PRIME_ENGINE_NAME if engine == ENGINE_NAME and PRIME_ENGINE_NAME in names else engine
