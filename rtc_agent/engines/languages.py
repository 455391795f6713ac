"""The one table of the languages the engines know: per ISO 639-1 code (``yue`` for Cantonese, which has none), its
English name (for prompts and messages), its ISO 639-3 code (OPUS-MT's ``>>xxx<<`` spelling) and its FLORES-200
code (NLLB's language token).

Speech translation (:mod:`rtc_agent.engines.st`) and text translation (:mod:`rtc_agent.engines.mt`) both read
their language tables from here; a language is added by adding one row.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["ISO3", "LANGUAGES", "LANGUAGE_NAMES", "NLLB_CODES", "Language", "language_name"]


class Language(NamedTuple):
    """One row of :data:`LANGUAGES`."""

    name: str
    iso3: str
    flores: str


#: ISO 639-1 code -> (English name, ISO 639-3, FLORES-200).
LANGUAGES: dict[str, Language] = {
    "ar": Language("Arabic", "ara", "arb_Arab"), "bg": Language("Bulgarian", "bul", "bul_Cyrl"),
    "ca": Language("Catalan", "cat", "cat_Latn"), "cs": Language("Czech", "ces", "ces_Latn"),
    "da": Language("Danish", "dan", "dan_Latn"), "de": Language("German", "deu", "deu_Latn"),
    "el": Language("Greek", "ell", "ell_Grek"), "en": Language("English", "eng", "eng_Latn"),
    "es": Language("Spanish", "spa", "spa_Latn"), "et": Language("Estonian", "est", "est_Latn"),
    "fa": Language("Persian", "fas", "pes_Arab"), "fi": Language("Finnish", "fin", "fin_Latn"),
    "fr": Language("French", "fra", "fra_Latn"), "he": Language("Hebrew", "heb", "heb_Hebr"),
    "hi": Language("Hindi", "hin", "hin_Deva"), "hr": Language("Croatian", "hrv", "hrv_Latn"),
    "hu": Language("Hungarian", "hun", "hun_Latn"), "id": Language("Indonesian", "ind", "ind_Latn"),
    "it": Language("Italian", "ita", "ita_Latn"), "ja": Language("Japanese", "jpn", "jpn_Jpan"),
    "ko": Language("Korean", "kor", "kor_Hang"), "lt": Language("Lithuanian", "lit", "lit_Latn"),
    "lv": Language("Latvian", "lav", "lvs_Latn"), "ms": Language("Malay", "msa", "zsm_Latn"),
    "nl": Language("Dutch", "nld", "nld_Latn"), "no": Language("Norwegian", "nob", "nob_Latn"),
    "pl": Language("Polish", "pol", "pol_Latn"), "pt": Language("Portuguese", "por", "por_Latn"),
    "ro": Language("Romanian", "ron", "ron_Latn"), "ru": Language("Russian", "rus", "rus_Cyrl"),
    "sk": Language("Slovak", "slk", "slk_Latn"), "sl": Language("Slovenian", "slv", "slv_Latn"),
    "sr": Language("Serbian", "srp", "srp_Cyrl"), "sv": Language("Swedish", "swe", "swe_Latn"),
    "th": Language("Thai", "tha", "tha_Thai"), "tr": Language("Turkish", "tur", "tur_Latn"),
    "uk": Language("Ukrainian", "ukr", "ukr_Cyrl"), "ur": Language("Urdu", "urd", "urd_Arab"),
    "vi": Language("Vietnamese", "vie", "vie_Latn"), "yue": Language("Cantonese", "yue", "yue_Hant"),
    "zh": Language("Chinese", "zho", "zho_Hans"),
}

#: ISO 639-1 code -> English name.
LANGUAGE_NAMES: dict[str, str] = {code: row.name for code, row in LANGUAGES.items()}
#: ISO 639-1 code -> ISO 639-3 code.
ISO3: dict[str, str] = {code: row.iso3 for code, row in LANGUAGES.items()}
#: ISO 639-1 code -> FLORES-200 code.
NLLB_CODES: dict[str, str] = {code: row.flores for code, row in LANGUAGES.items()}


def language_name(code: str | None) -> str:
    """An English name for a language code, for prompts (``None``: 'the spoken language'; an unknown code: itself)."""
    if not code:
        return "the spoken language"
    return LANGUAGE_NAMES.get(code, code)
