"""``StateStore``: the one interface to what the server keeps beyond a request (tokens, sign-ins, join links, rate
limits, room leases, transcripts), so that it can outlive a restart (SQLite) or be shared by several servers (Redis).

Every operation is atomic on its own: of two callers racing on one key, the store orders them. Every entry has a
time to live; an entry past it is gone for every read at once (sweeping only frees its space). Keys are short
text the caller namespaces (``tok:...``, ``rate:...``); values and list items are text (JSON, typically).

The primitives:

- values: :meth:`put` / :meth:`get` / :meth:`delete`, and :meth:`consume` (read and delete: of any number of
  concurrent calls on one key exactly one gets the value);
- counters: :meth:`increment` (a count within a fixed window that starts with its first increment) and
  :meth:`pace` (a token bucket, as GCRA: one timestamp per key, so a rate limit is one atomic step);
- leases: :meth:`acquire` / :meth:`renew` / :meth:`release` / :meth:`holders`: ``slots`` owners may hold a key at
  once, each until its own lease ends (one slot: a room owned by one node; many: a quota of live tokens);
- lists: :meth:`append` / :meth:`items`: append-only, bounded in length, the whole list expiring ``ttl_s`` after
  its last append (a transcript).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from rtc_agent.errors import AgentError

MAX_KEY_CHARS = 512


class StateLimitError(AgentError):
    """A value or list the store refuses to keep (past ``state_max_value_bytes`` / ``state_max_list_items``)."""

    code = "state_limit"
    status = 413


class StateUnavailable(AgentError):
    """The store cannot be reached (a Redis server down): the request is refused, nothing is half-written."""

    code = "state_unavailable"
    status = 503


@dataclass(frozen=True)
class Limits:
    """What one store keeps at most: bytes of one value or list item, items of one list."""

    max_value_bytes: int = 512 * 1024
    max_list_items: int = 20000


class StateStore(ABC):
    """See the module docstring. ``ttl_s`` arguments are seconds (> 0); the answers' seconds are floats."""

    url: str = ""  # how it was opened, secrets masked (for logs and /health)
    kind: str = ""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()

    # --- checks the implementations share ------------------------------------------------------------------

    def _check(self, key: str, value: str | None = None, ttl_s: float = 1.0) -> None:
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
            raise ValueError(f"a state key is 1-{MAX_KEY_CHARS} characters of text")
        if not (isinstance(ttl_s, int | float) and math.isfinite(ttl_s) and ttl_s > 0):
            raise ValueError(f"a time to live must be a finite number of seconds > 0, got {ttl_s!r}")
        if value is not None:
            if not isinstance(value, str):
                raise TypeError("state values are text (JSON, typically)")
            size = len(value.encode("utf-8"))
            if size > self.limits.max_value_bytes:
                raise StateLimitError(f"a value of {size} bytes is over the state store's limit of "
                                      f"{self.limits.max_value_bytes} (state_max_value_bytes)")

    def _list_cap(self, max_items: int | None) -> int:
        return self.limits.max_list_items if max_items is None else min(max_items, self.limits.max_list_items)

    @staticmethod
    def _full(key_items: int, cap: int) -> StateLimitError:
        return StateLimitError(f"this list holds {key_items} items, its most ({cap}; state_max_list_items)")

    # --- values ---------------------------------------------------------------------------------------------

    @abstractmethod
    async def put(self, key: str, value: str, ttl_s: float) -> None:
        """Keep ``value`` under ``key`` for ``ttl_s`` seconds (replacing what was there)."""

    @abstractmethod
    async def get(self, key: str) -> str | None:
        """The live value under ``key``, or None."""

    @abstractmethod
    async def delete(self, key: str) -> bool:
        """Drop ``key``; whether a live value was there."""

    @abstractmethod
    async def consume(self, key: str) -> str | None:
        """The live value under ``key``, deleted in the same step: exactly one of concurrent callers gets it."""

    # --- counters -------------------------------------------------------------------------------------------

    @abstractmethod
    async def increment(self, key: str, window_s: float, amount: int = 1) -> tuple[int, float]:
        """Add ``amount`` to the count under ``key`` in its window (a window of ``window_s`` seconds starts with the
        first increment after the last one ended): ``(count now, seconds left in the window)``."""

    @abstractmethod
    async def pace(self, key: str, interval_s: float, burst: float) -> float:
        """One action of a token bucket that refills one action every ``interval_s`` seconds, up to ``burst``:
        0.0 when it is allowed (and spent), else the seconds until it would be (nothing spent)."""

    # --- leases ---------------------------------------------------------------------------------------------

    @abstractmethod
    async def acquire(self, key: str, owner: str, ttl_s: float, slots: int = 1) -> float:
        """Hold one of ``key``'s ``slots`` for ``owner`` for ``ttl_s`` seconds (an owner holding one already
        renews it): 0.0 when held, else the seconds until the first other holder's lease ends (nothing held)."""

    @abstractmethod
    async def renew(self, key: str, owner: str, ttl_s: float) -> bool:
        """Extend ``owner``'s live lease on ``key`` to ``ttl_s`` from now; False if it holds none (any more)."""

    @abstractmethod
    async def release(self, key: str, owner: str) -> bool:
        """Give ``owner``'s lease on ``key`` up; whether it held a live one."""

    @abstractmethod
    async def holders(self, key: str) -> dict[str, float]:
        """The owners of live leases on ``key`` and the seconds each has left."""

    # --- lists ----------------------------------------------------------------------------------------------

    @abstractmethod
    async def append(self, key: str, item: str, ttl_s: float, max_items: int | None = None) -> int:
        """Add ``item`` at the end of the list under ``key``, which then lives ``ttl_s`` seconds; its length now.
        Raises :class:`StateLimitError` when it holds ``max_items`` (at most ``state_max_list_items``) already."""

    @abstractmethod
    async def items(self, key: str) -> list[str]:
        """The live list under ``key``, oldest first (empty when there is none)."""

    # --- upkeep ---------------------------------------------------------------------------------------------

    async def sweep(self) -> int:
        """Free the space of expired entries; how many were dropped (a store that expires by itself: 0)."""
        return 0

    @abstractmethod
    async def close(self) -> None:
        """Release connections and files; the store is unusable after."""


Clock = Callable[[], float]
