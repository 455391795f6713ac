"""Keys and values of the rows of recent batched decodes, so the next batch computes only what is new.

A conversation that goes on (the next caption final of the same speaker into the same language, its earlier finals
and their translations before it) sends a prompt that starts with the previous prompt and the reply the model gave
to it. :class:`RowCache` keeps, for the last ``size`` batch rows, the token ids a row's cache columns hold and their
keys and values per layer; :meth:`RowCache.take` finds the kept row with the longest common prefix with a new
prompt, and a batch (:func:`~rtc_agent.engines.llm.batch_decode.greedy_batch` with ``seed``/``keep``) puts those
keys and values in place (``LlamaBatchForward.seed``) and starts its prefill after them.

Keys are stored after the rotary embedding of their position in the row, which is the same in the next batch (a
position counts a row's real tokens, not its padding), so a kept row is valid in any batch. A prefix shorter than
``min_tokens`` is not worth the copy. Not thread-safe: the engine's batches run one at a time.

The cache holds at most ``size`` rows and ``max_bytes`` of keys and values (the least recently used go first; a row
larger than the whole budget is not kept); a new row replaces the kept rows it starts with (any prompt they serve,
it serves as far), and those it differs from only in their last ``tail_tokens`` (a prime of a sentence's first words
ends in the chat's generation prompt, which the next prime of more of its words, or its translation, does not have
there: the new row serves the prompts the old one did, up to those few tokens). Each interpreted (speaker, language)
pair keeps one or two rows (its last translation's, or what a prime computed since), about 12 KB a token on
Qwen2.5-0.5B in bfloat16: a few hundred tokens, a few MB a row. A budget too small for every pair of the rooms that
run at once makes them evict each other's rows, and every translation computes its whole context again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rtc_agent.engines.llm.batch_forward import BatchForward, LlamaBatchForward

__all__ = ["DEFAULT_MAX_BYTES", "TAIL_TOKENS", "KeptRow", "RowCache", "shared_prefix"]


@dataclass(frozen=True)
class KeptRow:
    """One row's ``ids`` and, per layer, its ``keys``/``values`` (``[kv_heads, len(ids), head_dim]``)."""

    ids: tuple[int, ...]
    keys: list[Any]
    values: list[Any]

    @property
    def nbytes(self) -> int:
        """The bytes of its keys and values."""
        return sum(int(getattr(t, "nbytes", 0)) for t in (*self.keys, *self.values))


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading token ids ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


#: The default budget of keys and values (the ``llm_row_cache_mb`` setting).
DEFAULT_MAX_BYTES = 128 * 2**20
#: A kept row that a new one differs from only in this many last tokens is replaced by it (the chat's generation
#: prompt after a prime's text: five tokens in Qwen2.5's template).
TAIL_TOKENS = 8


class RowCache:
    """The most recent rows, at most ``size`` of them and ``max_bytes`` of keys and values (see the module
    docstring); ``hits`` counts the rows :meth:`take` found, ``seeded_tokens`` the tokens :meth:`seed` put in place,
    ``evicted`` the rows the bounds pushed out."""

    def __init__(self, size: int = 256, min_tokens: int = 8, max_bytes: int = DEFAULT_MAX_BYTES,
                 tail_tokens: int = TAIL_TOKENS) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes!r}")
        self.size = size
        self.min_tokens = min_tokens
        self.max_bytes = max_bytes
        self.tail_tokens = tail_tokens
        self._rows: OrderedDict[tuple[int, ...], KeptRow] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.seeded_tokens = 0
        self.evicted = 0

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
        """Keep a row (the least recently used go past ``size`` rows or ``max_bytes``)."""
        if len(ids) < self.min_tokens:
            return
        row = KeptRow(tuple(int(i) for i in ids), keys, values)
        # a kept row that starts this one (the same pair's previous translation), or does but for its last few
        # tokens (a prime's generation prompt), is served as well by it
        for kept in [k for k in self._rows if self._replaces(row.ids, k)]:
            self._drop(kept)
        if row.nbytes > self.max_bytes:
            return
        self._rows[row.ids] = row
        self.bytes += row.nbytes
        while len(self._rows) > self.size or self.bytes > self.max_bytes:
            self._drop(next(iter(self._rows)))
            self.evicted += 1

    def _replaces(self, new: tuple[int, ...], kept: tuple[int, ...]) -> bool:
        """Whether row ``new`` serves every prompt that ``kept`` serves, as far or up to its last ``tail_tokens``."""
        shared = shared_prefix(kept, new)
        return shared == len(kept) or (shared >= self.min_tokens and len(kept) - shared <= self.tail_tokens)

    def _drop(self, ids: tuple[int, ...]) -> None:
        row = self._rows.pop(ids, None)
        if row is not None:
            self.bytes -= row.nbytes

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

    def keep_batch(self, forward: BatchForward, pads: list[int], fed: Sequence[Sequence[int] | None]) -> None:
        """Keep the rows of a lean batch (``fed``: per row of the forward, the ids its columns hold, or None: not
        kept), as :func:`~rtc_agent.engines.llm.batch_decode.greedy_batch` hands them on."""
        if isinstance(forward, LlamaBatchForward):
            for b, ids in enumerate(fed):
                if ids is not None and len(ids) >= self.min_tokens:
                    self.keep(ids, *forward.row_cache(b, len(ids)))

    def clear(self) -> None:
        self._rows.clear()
        self.bytes = 0

    def stats(self) -> dict[str, int]:
        """``rows``, ``bytes`` and the budget ``max_bytes``; ``hits``, ``seeded_tokens`` and ``evicted`` so far."""
        return {"rows": len(self._rows), "bytes": self.bytes, "max_bytes": self.max_bytes, "hits": self.hits,
                "seeded_tokens": self.seeded_tokens, "evicted": self.evicted}
