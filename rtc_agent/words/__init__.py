"""Word comparison: the agreement test of streaming policies and engines, and the scoring of transcripts.

- :func:`normalize` / :func:`common_prefix`: two hypotheses agree on a word when they match after Unicode
  normalization, lower-casing and dropping punctuation (LocalAgreement, context cuts, overlap guards).
- :func:`scoring_words` / :func:`wer` (:mod:`rtc_agent.words.scoring`): the words a transcript is scored on, with
  numbers, contractions, casual forms, British/American spellings and compounds folded, the same for the
  reference, the streaming captions and the offline transcript.
"""

from __future__ import annotations

import re
import unicodedata

from rtc_agent.words.scoring import join_compounds, scoring_text, scoring_words, wer

__all__ = ["common_prefix", "join_compounds", "normalize", "scoring_text", "scoring_words", "wer"]

_PUNCT = re.compile(r"[^\w']+", re.UNICODE)


def normalize(word: str) -> str:
    """``word`` in the form agreement compares: NFKC, lower case, no punctuation but apostrophes."""
    return _PUNCT.sub("", unicodedata.normalize("NFKC", word).lower())


def common_prefix(a: list[str], b: list[str]) -> int:
    """How many leading words ``a`` and ``b`` share (normalized)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if normalize(x) != normalize(y):
            break
        n += 1
    return n
