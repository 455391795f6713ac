"""Word comparison shared by streaming policies and engines: two hypotheses agree on a word when they match after
Unicode normalization, lower-casing and dropping punctuation."""

from __future__ import annotations

import re
import unicodedata

_PUNCT = re.compile(r"[^\w']+", re.UNICODE)


def normalize(word: str) -> str:
    return _PUNCT.sub("", unicodedata.normalize("NFKC", word).lower())


def common_prefix(a: list[str], b: list[str]) -> int:
    """How many leading words ``a`` and ``b`` share (normalized)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if normalize(x) != normalize(y):
            break
        n += 1
    return n
