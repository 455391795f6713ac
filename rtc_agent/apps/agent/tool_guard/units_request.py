"""Does a user's turn ask for a unit conversion (what ``convert_units`` answers)?

Phrasings around the units ``convert_units`` knows: "convert 5 km to miles", "10 miles in kilometres", "what is
100 °F in Celsius", "how many feet are in a meter", "how many pounds is 3 kg", "how many ounces in two cups". Not:
"I walked 5 km to the station", "how many people live in Tokyo", "convert this sentence to French".
"""

from __future__ import annotations

import functools
import re

from rtc_agent.apps.agent.builtin_units import unit_aliases
from rtc_agent.apps.agent.tool_guard.spoken_numbers import NUMBER, plain

__all__ = ["asks_for_conversion"]

_INTO = r"(?:to|in|into|as|in\s+terms\s+of)"


@functools.cache
def _patterns() -> tuple[re.Pattern[str], ...]:
    # word-like aliases only (the ' and " marks of feet and inches are too common in text), longest first so
    # "fluid ounces" wins over "ounces"
    names = sorted((a for a in unit_aliases() if re.search(r"\w", a)), key=len, reverse=True)
    unit = r"(?:degrees?\s+|deg\s+|°\s*)?(?:" + "|".join(re.escape(n).replace(r"\ ", r"\s+") for n in names) + r")"
    unit = rf"(?<!\w){unit}(?!\w)"
    amount = rf"(?:{NUMBER}|an?|one)"
    return tuple(re.compile(p, re.IGNORECASE) for p in (
        rf"{NUMBER}\s*{unit}\s+(?:is\s+|are\s+|equals?\s+)?(?:how\s+many\s+|what\s+)?{_INTO}\s+{unit}",
        rf"\bconvert(?:ing)?\b.{{0,60}}?{unit}.{{0,60}}?\b{_INTO}\s+{unit}",
        rf"\bhow\s+(?:many|much)\s+{unit}\s+(?:are\s+|is\s+|make\s+|makes\s+)?(?:there\s+)?"
        rf"(?:in|per|to|make|makes|is|are|equals?)\s+{amount}\s*{unit}",
        rf"\bhow\s+(?:many|much)\s+{unit}\s+(?:is|are|make|makes|equals?)\s+{amount}\s*{unit}",
    ))


def asks_for_conversion(text: str) -> bool:
    """True when ``text`` asks to convert an amount between two units (see the module docstring)."""
    text = plain(text)
    return any(p.search(text) for p in _patterns())
