"""The clauses played of the latest assistant items: what ``conversation.item.truncate`` cuts an item to."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import NamedTuple

from rtc_agent.apps.agent.conversation import Item
from rtc_agent.engines.tts.base import Synthesis

__all__ = ["Clause", "SpokenItems"]


class Clause(NamedTuple):
    """What :func:`~rtc_agent.engines.tts.stream.spoken_text` needs of a played clause (not its audio)."""

    text: str
    duration_s: float


class SpokenItems:
    """The clauses of the last ``keep`` assistant items that were spoken, oldest forgotten first."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._clauses: OrderedDict[str, list[Clause]] = OrderedDict()  # item id -> its clauses, in order

    def remember(self, clauses: Iterable[tuple[Item, Synthesis]]) -> None:
        """Add the clauses a response played, each to its item's list (that item becomes the newest)."""
        for item, synthesis in clauses:
            self._clauses.setdefault(item.id, []).append(Clause(synthesis.text, synthesis.duration_s))
            self._clauses.move_to_end(item.id)
        while len(self._clauses) > self.keep:
            self._clauses.popitem(last=False)

    def clauses(self, item_id: str) -> list[Clause] | None:
        """The clauses played of ``item_id``; None when the item was not spoken or is forgotten."""
        return self._clauses.get(item_id)
