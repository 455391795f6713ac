"""Word comparison: the agreement test of streaming policies and engines, and the scoring of transcripts.

- :func:`normalize` / :func:`normalized` / :func:`common_prefix` / :func:`contains_run`: two hypotheses agree on a
  word when they match after Unicode normalization, lower-casing and dropping punctuation (LocalAgreement, context
  cuts, overlap guards, echo rules).
- :func:`scoring_words` / :func:`wer` (:mod:`rtc_agent.words.scoring`): the words a transcript is scored on, with
  numbers, contractions, casual forms, British/American spellings and compounds folded, the same for the
  reference, the streaming captions and the offline transcript.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from rtc_agent.words.scoring import join_compounds, scoring_text, scoring_words, wer

__all__ = ["common_prefix", "contains_run", "join_compounds", "normalize", "normalized", "scoring_text",
           "scoring_words", "wer"]

_PUNCT = re.compile(r"[^\w']+", re.UNICODE)


def normalize(word: str) -> str:
    """``word`` in the form agreement compares: NFKC, lower case, no punctuation but apostrophes."""
    return _PUNCT.sub("", unicodedata.normalize("NFKC", word).lower())


def normalized(words: Iterable[str]) -> list[str]:
    r"""Each of ``words`` :func:`normalize`\ d."""
    return [normalize(w) for w in words]


def contains_run(words: list[str], run: list[str]) -> bool:
    """Whether ``run`` (non-empty) occurs in ``words`` as consecutive items (compared as they are: pass
    :func:`normalized` lists)."""
    k = len(run)
    return k > 0 and any(words[i:i + k] == run for i in range(len(words) - k + 1))


def common_prefix(a: list[str], b: list[str]) -> int:
    """How many leading words ``a`` and ``b`` share (normalized)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if normalize(x) != normalize(y):
            break
        n += 1
    return n
