"""Interpretation options, shared by the WebRTC session ``config``, ``session.update`` and
``POST /v1/translate/stream`` (the same keys everywhere).

- ``source_language``: a Whisper language code or ``auto`` (default ``auto``).
- ``target_language``: a language code (default ``en``); the embedded engine (Whisper translate) only does ``en``.
  Where the caller has the text route (``text_route=True``: the WebRTC interpret app, which then translates the
  recognised text with the ``mt`` engine), any language ``client_config.capabilities.listen`` offers as text.
- ``direction``: shorthand ``es-en`` for the two above (``auto-en`` allowed); it must agree with them if both
  are given.
- ``chunk_ms``: 800 or 1600 (the first chunk is always 1600); default ``st_chunk_ms``.
- ``speak``: speak the translation on the outgoing track (default true; WebRTC only).
- ``max_lag_s``: speech lag before the spoken translation catches up (default ``st_max_lag_s``).
- ``source_text``: also recognize the source speech for display (embedded engine only; default false; cascade
  and source+target engines always give it). In a WebRTC session the source is recognized by the captions pipeline
  (``caption.*`` events, on the same Whisper, with the captions' language rule); over ``POST /v1/translate/stream``
  by a second Whisper decode per turn (``translation.chunk.source_text``, about 1.7 times the compute).
- ``language_prior``: with ``source_language: auto``, the language to expect (a BCP 47 tag such as the browser's
  ``en-GB``; the same meaning and validation as the captions' ``language_prior``). Default none.

Errors are :class:`~rtc_agent.errors.InvalidRequest` with code ``invalid_config``, or ``unsupported_language``
for a target the configured engine cannot produce.
"""

from __future__ import annotations

import re
from typing import Any

from rtc_agent.apps.captions.app import LANGUAGE_CODES, language_prior
from rtc_agent.apps.interpret.deliverable import check_listen
from rtc_agent.apps.limits import show, show_keys
from rtc_agent.engines import st
from rtc_agent.errors import InvalidRequest

__all__ = ["CONFIG_KEYS", "resolve_config"]

CONFIG_KEYS = frozenset({"source_language", "target_language", "direction", "chunk_ms", "speak", "max_lag_s",
                         "source_text", "language_prior"})
_TARGET = re.compile(r"^[a-z]{2,3}(-[A-Za-z]{2,4})?$")


def _bad(message: str, code: str = "invalid_config") -> InvalidRequest:
    return InvalidRequest(message, code=code)


def _source(value: Any) -> str:
    if not isinstance(value, str) or (value != "auto" and value not in LANGUAGE_CODES):
        raise _bad(f"source_language must be 'auto' or a Whisper language code such as 'es', got {show(value)}")
    return value


def _target(value: Any, settings: Any, text_route: bool) -> str:
    if not isinstance(value, str) or not _TARGET.match(value):
        raise _bad(f"target_language must be a language code such as 'en', got {show(value)}")
    if value != "en" and settings is not None and text_route:
        check_listen(settings, value, key="target_language")  # unsupported_language where nothing makes it
        return value
    if value != "en" and settings is not None and st.english_only(settings):
        raise _bad(f"the embedded speech-translation engine (Whisper) translates into English only, not "
                   f"{show(value)}; start the server with --st-engine cascade or --st-engine openai for other targets",
                   code="unsupported_language")
    return value


def _direction(value: Any) -> tuple[str, str]:
    if not isinstance(value, str) or value.count("-") != 1:
        raise _bad(f"direction must look like 'es-en' (source-target), got {show(value)}")
    source, target = value.split("-")
    return source, target


def resolve_config(config: dict[str, Any], settings: Any, base: dict[str, Any] | None = None, *,
                   text_route: bool = False) -> dict[str, Any]:
    """Validate ``config`` (unknown keys are refused) over ``base`` (the current values) or the server defaults.
    ``text_route``: the caller translates recognised text where speech translation cannot make the target, so
    any target the server delivers as text is accepted (see the module docstring)."""
    if not isinstance(config, dict):
        raise _bad("the interpretation config must be an object")
    unknown = set(config) - CONFIG_KEYS
    if unknown:
        raise _bad(f"unknown interpret config keys: {show_keys(unknown)} (known: {sorted(CONFIG_KEYS)})")
    defaults = {
        "source_language": "auto",
        "target_language": "en",
        "chunk_ms": int(getattr(settings, "st_chunk_ms", 800) or 800),
        "speak": True,
        "max_lag_s": float(getattr(settings, "st_max_lag_s", 3.0) or 3.0),
        "source_text": False,
        "language_prior": None,
    }
    out = dict(base or defaults)
    given = dict(config)
    if "direction" in given:
        source, target = _direction(given.pop("direction"))
        for key, value in (("source_language", source), ("target_language", target)):
            if key in given and given[key] != value:
                raise _bad(f"direction says {key}={show(value)} but {key}={show(given[key])} was given too")
            given[key] = value
    out.update(given)
    if "language_prior" in given:
        out["language_prior"] = language_prior(given["language_prior"])
    out["source_language"] = _source(out["source_language"])
    out["target_language"] = _target(out["target_language"], settings, text_route)
    if out["chunk_ms"] not in (800, 1600) or isinstance(out["chunk_ms"], bool):
        raise _bad(f"chunk_ms must be 800 or 1600 (the first chunk is always 1600), got {show(out['chunk_ms'])}")
    for key in ("speak", "source_text"):
        if not isinstance(out[key], bool):
            raise _bad(f"{key} must be true or false, got {show(out[key])}")
    lag = out["max_lag_s"]
    if isinstance(lag, bool) or not isinstance(lag, int | float) or not 0.5 <= lag <= 60:
        raise _bad(f"max_lag_s must be a number from 0.5 to 60, got {show(lag)}")
    out["max_lag_s"] = float(lag)
    return out
