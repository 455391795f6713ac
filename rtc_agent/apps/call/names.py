"""Display names in a room: unique among its live participants.

A participant who joins (or renames itself) with a name another live participant already uses, compared without
regard to case, gets the first free suffix: ``Ana`` -> ``Ana (2)`` -> ``Ana (3)``; the name is shortened to keep
the suffix within :data:`MAX_NAME` characters. The room then announces, transcribes and labels captions with the
final name; the participant learns it from its own ``room.joined`` entry and its session config.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_NAME = 40  # characters of a display name (the call app cuts longer ones)


def unique_name(name: str, taken: Iterable[str], max_chars: int = MAX_NAME) -> str:
    """``name``, or ``name (n)`` with the smallest ``n >= 2`` that no name in ``taken`` already is."""
    used = {t.casefold() for t in taken}
    if name.casefold() not in used:
        return name
    n = 2
    while True:
        suffix = f" ({n})"
        candidate = name[: max(1, max_chars - len(suffix))].rstrip() + suffix
        if candidate.casefold() not in used:
            return candidate
        n += 1
