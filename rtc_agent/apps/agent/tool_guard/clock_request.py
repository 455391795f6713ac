"""Does a user's turn ask for the current time or date (what ``get_current_time`` answers)?

English phrasings: "what time is it (in Tokyo)", "what's the time", "the current/local time in Paris", "tell me
the time", "what's the date", "what's today's date", "what day is it", "what year is it". Not: times of events
("what time does the train leave"), "I had a great time", "the date of the French Revolution".
"""

from __future__ import annotations

import re

from rtc_agent.apps.agent.tool_guard.spoken_numbers import plain

__all__ = ["asks_for_time"]

_ASKS = re.compile(
    r"\bwhat\s+time\s+is\s+it\b"
    r"|\bwhat\s+time\s+it\s+is\b"
    r"|\bwhat(?:'s|\s+is)\s+the\s+(?:current\s+|local\s+|exact\s+)?time\b(?!\s+(?:of|for|when|to)\b)"
    r"|\bwhat\s+time\s+(?:is\s+it\s+)?(?:now|right\s+now)\b"
    r"|\b(?:current|local|exact)\s+(?:date\s+and\s+)?time\b"
    r"|\btime\s+(?:is\s+it\s+)?(?:right\s+)?now\s+in\b"
    r"|\btell\s+me\s+the\s+(?:current\s+)?(?:time|date)\b"
    r"|\bwhat(?:'s|\s+is)\s+(?:the\s+|today'?s\s+)?date\b(?!\s+(?:of|for|when)\b)"
    r"|\bwhat\s+(?:date|day|year|month)\s+is\s+(?:it|today)\b"
    r"|\bwhat\s+day\s+of\s+the\s+(?:week|month)\s+is\b"
    r"|\btoday'?s\s+date\b"
    r"|\bwhich\s+day\s+is\s+(?:it|today)\b",
    re.IGNORECASE,
)


def asks_for_time(text: str) -> bool:
    """True when ``text`` asks for the current time or date somewhere (a city or zone may follow)."""
    return bool(_ASKS.search(plain(text)))
