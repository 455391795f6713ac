"""Language codes of text translation: the ISO 639-1 codes requests use, and how each model family spells them.

A request names languages as ISO 639-1 codes (``"en"``, ``"es"``; ``"yue"`` for Cantonese, which has none), the
codes of :data:`~rtc_agent.engines.st.LANGUAGE_NAMES`. Marian/OPUS-MT multi-target models pick the target with a
``>>xxx<<`` token (ISO 639-1 or 639-3, whichever the model's vocabulary holds); NLLB models with a
FLORES-200 code such as ``spa_Latn`` (:data:`NLLB_CODES`).
"""

from __future__ import annotations

from rtc_agent.engines.st.base import LANGUAGE_NAMES
from rtc_agent.errors import InvalidRequest

__all__ = ["AUTO", "ISO3", "LANGUAGE_NAMES", "NLLB_CODES", "check_language", "marian_tokens"]

#: ``source`` of a request whose source language is not known.
AUTO = "auto"

#: ISO 639-3 (OPUS-MT's ``>>xxx<<`` spelling) of every ISO 639-1 code we accept.
ISO3 = {
    "ar": "ara", "bg": "bul", "ca": "cat", "cs": "ces", "da": "dan", "de": "deu", "el": "ell", "en": "eng",
    "es": "spa", "et": "est", "fa": "fas", "fi": "fin", "fr": "fra", "he": "heb", "hi": "hin", "hr": "hrv",
    "hu": "hun", "id": "ind", "it": "ita", "ja": "jpn", "ko": "kor", "lt": "lit", "lv": "lav", "ms": "msa",
    "nl": "nld", "no": "nob", "pl": "pol", "pt": "por", "ro": "ron", "ru": "rus", "sk": "slk", "sl": "slv",
    "sr": "srp", "sv": "swe", "th": "tha", "tr": "tur", "uk": "ukr", "ur": "urd", "vi": "vie", "yue": "yue",
    "zh": "zho",
}

#: FLORES-200 codes (NLLB's language tokens).
NLLB_CODES = {
    "ar": "arb_Arab", "bg": "bul_Cyrl", "ca": "cat_Latn", "cs": "ces_Latn", "da": "dan_Latn", "de": "deu_Latn",
    "el": "ell_Grek", "en": "eng_Latn", "es": "spa_Latn", "et": "est_Latn", "fa": "pes_Arab", "fi": "fin_Latn",
    "fr": "fra_Latn", "he": "heb_Hebr", "hi": "hin_Deva", "hr": "hrv_Latn", "hu": "hun_Latn", "id": "ind_Latn",
    "it": "ita_Latn", "ja": "jpn_Jpan", "ko": "kor_Hang", "lt": "lit_Latn", "lv": "lvs_Latn", "ms": "zsm_Latn",
    "nl": "nld_Latn", "no": "nob_Latn", "pl": "pol_Latn", "pt": "por_Latn", "ro": "ron_Latn", "ru": "rus_Cyrl",
    "sk": "slk_Latn", "sl": "slv_Latn", "sr": "srp_Cyrl", "sv": "swe_Latn", "th": "tha_Thai", "tr": "tur_Latn",
    "uk": "ukr_Cyrl", "ur": "urd_Arab", "vi": "vie_Latn", "yue": "yue_Hant", "zh": "zho_Hans",
}


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
