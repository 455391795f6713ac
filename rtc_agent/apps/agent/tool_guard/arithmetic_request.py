"""Does a user's turn ask for arithmetic (what ``calculate`` answers)?

A number, an operator and a number: ``17 * 23``, ``17 times 23``, ``seventeen times twenty-three``, ``12 plus
5``, ``100 divided by 7``, ``2 to the power of 10``, ``15 percent of 80``, ``the square root of 144``. Symbols
that also write dates and ranges (``3/4``, ``10-3``) count with spaces around them or in a question that asks for
a result ("what is 144/12"). Not: "two times a day", "three plus years", "24/7 support".
"""

from __future__ import annotations

import re

from rtc_agent.apps.agent.tool_guard.spoken_numbers import NUMBER, plain

__all__ = ["asks_for_arithmetic"]

_WORD_OPS = (r"plus|minus|times|multiplied\s+by|divided\s+by|over|mod(?:ulo)?|to\s+the\s+power\s+of|"
             r"raised\s+to(?:\s+the\s+power\s+of)?|percent\s+of|per\s+cent\s+of")
_SPACED_OPS = r"(?:[+*^]|\*\*|%\s+of|(?<=\s)[-/x](?=\s))"
_BARE_OPS = r"[-/x]"
_EXPRESSION = re.compile(rf"{NUMBER}\s*(?:{_SPACED_OPS}|\b(?:{_WORD_OPS})\b)\s*{NUMBER}", re.IGNORECASE)
_BARE = re.compile(rf"{NUMBER}{_BARE_OPS}{NUMBER}", re.IGNORECASE)
_ROOT = re.compile(rf"\b(?:square\s+root|cube\s+root|sqrt)\s*(?:of\s+)?\(?\s*{NUMBER}"
                   rf"|{NUMBER}\s+(?:squared|cubed)\b", re.IGNORECASE)
_RESULT_QUESTION = re.compile(r"\b(?:what(?:'s|\s+is|\s+are)|how\s+much\s+is|calculate|compute|work\s+out|"
                              r"evaluate|equals?)\b|=\s*\?", re.IGNORECASE)


def asks_for_arithmetic(text: str) -> bool:
    """True when ``text`` holds an arithmetic expression to evaluate (see the module docstring)."""
    text = plain(text)
    if _EXPRESSION.search(text) or _ROOT.search(text):
        return True
    return bool(_BARE.search(text) and _RESULT_QUESTION.search(text))
