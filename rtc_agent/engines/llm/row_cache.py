"""Keys and values of the rows of recent batched decodes, so the next batch computes only what is new.

A conversation that goes on (the next caption final of the same speaker into the same language, its earlier
finals and their translations before it) sends a prompt that starts with the previous prompt and the reply the
model gave to it. :class:`RowCache` keeps, for the last ``size`` batch rows, the token ids a row's cache columns
hold and their keys and values per layer; :meth:`RowCache.take` finds the kept row with the longest common prefix
with a new prompt, and a batch (:func:`~rtc_agent.engines.llm.batch_decode.greedy_batch` with ``seed``/``keep``)
puts those keys and values in place (``LlamaBatchForward.seed``) and starts its prefill after them.

Keys are stored after the rotary embedding of their position in the row, which is the same in the next batch (a
position counts a row's real tokens, not its padding), so a kept row is valid in any batch. A prefix shorter than
``min_tokens`` is not worth the copy. Not thread-safe: the engine's batches run one at a time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rtc_agent.engines.llm.batch_forward import BatchForward, LlamaBatchForward

__all__ = ["KeptRow", "RowCache", "shared_prefix"]


@dataclass(frozen=True)
class KeptRow:
    """One row's ``ids`` and, per layer, its ``keys``/``values`` (``[kv_heads, len(ids), head_dim]``)."""

    ids: tuple[int, ...]
    keys: list[Any]
    values: list[Any]


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading token ids ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class RowCache:
    """The last ``size`` rows (see the module docstring); ``hits`` counts the rows :meth:`take` found,
    ``seeded_tokens`` the tokens :meth:`seed` put in place."""

    def __init__(self, size: int = 8, min_tokens: int = 8) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        self.size = size
        self.min_tokens = min_tokens
        self._rows: OrderedDict[tuple[int, ...], KeptRow] = OrderedDict()
        self.hits = 0
        self.seeded_tokens = 0

    def __len__(self) -> int:
        return len(self._rows)

    def take(self, prompt: Sequence[int]) -> tuple[KeptRow | None, int]:
        """The kept row sharing the longest prefix with ``prompt`` and how many of its tokens to reuse (at most
        ``len(prompt) - 1``: the last prompt token is computed, its logits choose the first new token); ``(None,
        0)`` below ``min_tokens``."""
        best, reuse = None, 0
        for row in self._rows.values():
            n = min(shared_prefix(row.ids, prompt), len(prompt) - 1)
            if n > reuse:
                best, reuse = row, n
        if best is None or reuse < self.min_tokens:
            return None, 0
        self._rows.move_to_end(best.ids)
        self.hits += 1
        return best, reuse

    def keep(self, ids: Sequence[int], keys: list[Any], values: list[Any]) -> None:
        """Keep a row (the least recently used goes past ``size``)."""
        if len(ids) < self.min_tokens:
            return
        row = KeptRow(tuple(int(i) for i in ids), keys, values)
        self._rows.pop(row.ids, None)
        self._rows[row.ids] = row
        while len(self._rows) > self.size:
            self._rows.popitem(last=False)

    def seed(self, forward: BatchForward, prompts: Sequence[Sequence[int]], pads: list[int]) -> int:
        """Seed each row of a lean batch with the kept row sharing its prompt's start; the first column to
        compute. A row with nothing kept is computed whole, and so is every row from its
        first real column on (the batch's prefill starts at one column for all)."""
        if not isinstance(forward, LlamaBatchForward):
            return 0
        found = [self.take(prompt) for prompt in prompts]
        first = min(pad + n for pad, (_, n) in zip(pads, found, strict=True))
        for b, (kept, _) in enumerate(found):
            if kept is not None and first > pads[b]:
                forward.seed(b, kept.keys, kept.values, first - pads[b])
                self.seeded_tokens += first - pads[b]
        return first

    def keep_batch(self, forward: BatchForward, pads: list[int], fed: list[list[int]]) -> None:
        """Keep every row of a finished lean batch (``fed``: the ids each row's columns hold)."""
        if isinstance(forward, LlamaBatchForward):
            for b, ids in enumerate(fed):
                self.keep(ids, *forward.row_cache(b, len(ids)))

    def clear(self) -> None:
        self._rows.clear()
