"""Language codes of text translation: the ISO 639-1 codes requests use, and how each model family spells them.

A request names languages as ISO 639-1 codes (``"en"``, ``"es"``; ``"yue"`` for Cantonese, which has none), the
codes of the engines' one language table (:mod:`rtc_agent.engines.languages`, shared with speech translation).
Marian/OPUS-MT multi-target models pick the target with a ``>>xxx<<`` token (ISO 639-1 or 639-3, whichever the
model's vocabulary holds: :func:`marian_tokens`); NLLB models with a FLORES-200 code such as ``spa_Latn``
(:data:`NLLB_CODES`).
"""

from __future__ import annotations

from rtc_agent.engines.languages import ISO3, LANGUAGE_NAMES, NLLB_CODES
from rtc_agent.errors import InvalidRequest

__all__ = ["AUTO", "ISO3", "LANGUAGE_NAMES", "NLLB_CODES", "check_language", "marian_tokens"]

#: ``source`` of a request whose source language is not known.
AUTO = "auto"


def check_language(code: object, field: str, *, allow_auto: bool = False) -> str:
    """``code`` lower-cased when it is a language we know (or ``auto`` where allowed); else ``InvalidRequest``
    (``code="unsupported_language"``, ``param=field``)."""
    value = code.strip().lower() if isinstance(code, str) else ""
    if value in LANGUAGE_NAMES or (allow_auto and value == AUTO):
        return value
    known = ", ".join(sorted(LANGUAGE_NAMES))
    extra = " or auto" if allow_auto else ""
    raise InvalidRequest(f"{field}: unknown language {code!r}; use an ISO 639-1 code ({known}){extra}",
                         code="unsupported_language", param=field)


def marian_tokens(code: str) -> tuple[str, ...]:
    """The ``>>xxx<<`` spellings an OPUS-MT model may use for ``code``, most common first."""
    three = ISO3.get(code, code)
    return (f">>{three}<<", f">>{code}<<", *((">>cmn_Hans<<", ">>zho_Hans<<") if code == "zh" else ()))
