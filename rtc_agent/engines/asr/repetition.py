"""Detecting decoder loops in recognized text, and cutting them out.

Whisper sometimes falls into a loop: it writes one short piece of text again and again ("L.A.D.D.D.D.D.D...",
"Thank you. Thank you. Thank you. ..."). Two signals find it, as in openai-whisper and faster-whisper:

- :func:`compression_ratio` (gzip): above ``COMPRESSION_RATIO_LIMIT`` (2.4, their threshold) the text repeats
  itself. It misses short loops: zlib's own overhead keeps the ratio of a 20-character string low.
- :func:`looping_run`: a unit of 1 to ``MAX_UNIT_CHARS`` characters repeated back to back at least
  ``max(MIN_REPEATS, ceil(MIN_LOOP_CHARS / unit length))`` times (a one-character unit 12 times, ``"D."`` 6 times,
  a word or phrase 5 times). Speech that really repeats ("no, no, no, no", "very very very") stays below that,
  and so does a run the text goes on from with ``ESCAPE_WORDS`` words or more: a decoder that left the run and went
  on heard it said (michael's "words, words, words, words, words and that should be all"); Whisper's loops run to
  the end of the decode.
- the same with fewer copies when the text is faster than anyone speaks: where the audio's length is known and the
  text runs past ``MAX_CHARS_PER_S`` characters per second of it, a unit of at least ``FAST_MIN_UNIT_CHARS``
  characters ``FAST_MIN_REPEATS`` times (the last copy may lack its closing space or comma) is a loop too. This
  finds what Whisper hears in a breath or a click: "calm calm calm calm" in 0.6 s, "I'm sorry, I'm sorry, I'm
  sorry," in 0.7 s (the speech set's michael clip); people speak 10-20 characters a second.

:meth:`Transcript.without_loop <rtc_agent.engines.asr.base.Transcript.without_loop>` keeps the text before a loop
and one copy of the looping unit: the last resort of the engine after decoding again did not help.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

COMPRESSION_RATIO_LIMIT = 2.4
MAX_UNIT_CHARS = 24
MIN_REPEATS = 5
MIN_LOOP_CHARS = 12
MAX_CHARS_PER_S = 25.0
FAST_MIN_REPEATS = 3
FAST_MIN_UNIT_CHARS = 3
ESCAPE_WORDS = 3

__all__ = ["COMPRESSION_RATIO_LIMIT", "MAX_CHARS_PER_S", "Loop", "compression_ratio", "is_looping", "looping_run"]


@dataclass(frozen=True)
class Loop:
    """A run of ``repeats`` back-to-back copies of ``text[start:start + unit]`` ending at ``end`` (exclusive)."""

    start: int
    unit: int
    end: int

    @property
    def repeats(self) -> float:
        return (self.end - self.start) / self.unit


def compression_ratio(text: str) -> float:
    """UTF-8 length over zlib-compressed length (1.0 for empty text)."""
    data = text.encode()
    return len(data) / len(zlib.compress(data)) if data else 1.0


def _needed_run(unit: int) -> int:
    """Characters equal to the one ``unit`` before them that make a loop of the usual kind."""
    return (max(MIN_REPEATS, math.ceil(MIN_LOOP_CHARS / unit)) - 1) * unit


def _fast_run(unit: int) -> int:
    """The same for text faster than speech: ``FAST_MIN_REPEATS`` copies, the last two characters short."""
    return (FAST_MIN_REPEATS - 1) * unit - 2 if unit >= FAST_MIN_UNIT_CHARS else 1 << 30


def _earliest_run(text: str, needed: Callable[[int], int]) -> Loop | None:
    best: Loop | None = None
    n = len(text)
    for unit in range(1, min(MAX_UNIT_CHARS, n // 2) + 1):
        need = needed(unit)
        run = 0
        for j in range(n - unit):
            if text[j] == text[j + unit]:
                run += 1
                continue
            if run >= need:
                found = Loop(j - run, unit, j + unit)
                if best is None or found.start < best.start:
                    best = found
                break
            run = 0
        else:
            if run >= need:
                found = Loop(n - unit - run, unit, n)
                if best is None or found.start < best.start:
                    best = found
    return best


def _first_unescaped(text: str, offset: int) -> Loop | None:
    """The earliest run of the usual kind in ``text[offset:]`` that the text does not go on from with
    ``ESCAPE_WORDS`` words (times relative to ``text``)."""
    found = _earliest_run(text[offset:], _needed_run)
    if found is None:
        return None
    found = Loop(found.start + offset, found.unit, found.end + offset)
    if len(text[found.end:].split()) < ESCAPE_WORDS:
        return found
    return _first_unescaped(text, found.end)


def looping_run(text: str, audio_s: float = 0.0) -> Loop | None:
    """The earliest-starting loop in ``text`` (see the module docstring), or None. ``audio_s``: the seconds of
    audio the text was heard in (0: unknown, no rate rule). Cost: O(len(text) * ``MAX_UNIT_CHARS``) character
    comparisons (a 2,000-character text: a few milliseconds)."""
    found = _first_unescaped(text, 0)
    if found is None and audio_s > 0 and len(text.strip()) / audio_s > MAX_CHARS_PER_S:
        found = _earliest_run(text, _fast_run)
    return found


def is_looping(text: str, audio_s: float = 0.0) -> bool:
    """True when ``text`` compresses too well or holds a short loop (``audio_s`` as in :func:`looping_run`)."""
    return compression_ratio(text) > COMPRESSION_RATIO_LIMIT or looping_run(text, audio_s) is not None
