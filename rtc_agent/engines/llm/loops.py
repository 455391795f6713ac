"""When a greedy reply is stuck in a loop: its last tokens are one phrase said again and again.

A small model decoding greedily now and then repeats a phrase until its token limit ("a las ocho, a las ocho, a las
ocho, ..."); once it does, greedy decoding rarely leaves it, and every further step holds the batch its row is in.
:func:`ends_in_loop` tells when to stop: a phrase of at least ``MIN_PHRASE_TOKENS`` tokens said ``REPEATS`` times in
a row, or a shorter one ``SHORT_REPEATS`` times (so that "no, no, no" or "very, very" in a real reply is not one).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MAX_PHRASE_TOKENS", "MIN_PHRASE_TOKENS", "REPEATS", "SHORT_REPEATS", "ends_in_loop"]

MAX_PHRASE_TOKENS = 16
MIN_PHRASE_TOKENS = 4
REPEATS = 3
SHORT_REPEATS = 6


def ends_in_loop(ids: Sequence[int]) -> bool:
    """Whether ``ids`` end with one phrase of 1-``MAX_PHRASE_TOKENS`` tokens repeated (see the module docstring)."""
    n = len(ids)
    for unit in range(1, MAX_PHRASE_TOKENS + 1):
        span = unit * (REPEATS if unit >= MIN_PHRASE_TOKENS else SHORT_REPEATS)
        if span > n:
            continue
        if all(ids[n - i] == ids[n - i - unit] for i in range(1, span - unit + 1)):
            return True
    return False
