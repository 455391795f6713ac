"""Regular-expression pieces for numbers as people type or say them: ``17``, ``1,200``, ``3.5``, ``seventeen``,
``twenty-three``, ``two hundred and five``. Used by the request matchers of the tool guard."""

from __future__ import annotations

__all__ = ["NUMBER", "plain"]

_SMALL = ("zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
          "sixteen|seventeen|eighteen|nineteen")
_TENS = "twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
_SCALE = "hundred|thousand|million|billion"
_WORD = rf"(?:{_TENS}|{_SMALL}|{_SCALE})"
#: One number: digits (with thousands commas and a decimal part) or number words joined by spaces, hyphens or
#: "and" ("two hundred and five"). Matched case-insensitively, between word boundaries.
NUMBER = (rf"(?:(?<![\w.])(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?(?![\w.]*\d)|(?<![\w.])\.\d+|"
          rf"\b{_WORD}(?:(?:[-\s]+|\s+and\s+){_WORD})*\b)")

# curly apostrophes, multiplication and division signs, minus sign
_PLAIN = str.maketrans({"\u2019": "'", "\u2018": "'", "\u00d7": "*", "\u00f7": "/", "\u2212": "-"})


def plain(text: str | None) -> str:
    """``text`` with typographic apostrophes and arithmetic signs as their ASCII forms (what the matchers read)."""
    return (text or "").translate(_PLAIN)
