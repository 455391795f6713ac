"""Per-client rate limits: one token bucket per (action, client), counted in the state store (:meth:`StateStore.pace`,
one atomic step), so several servers sharing a Redis store share each client's budget and a restart keeps it.

Each bucket is one timestamp in the store that expires once the bucket is full again, so the store holds only the
clients that acted within the last ``burst / rate`` seconds."""

from __future__ import annotations

import time
from collections.abc import Callable

from rtc_agent.state import MemoryStore, StateStore

KEY_PREFIX = "rate:"


class RateLimiter:
    """``per_minute`` actions a minute per client, with bursts of up to ``burst`` (default: half a minute's).
    ``name`` keeps this action's buckets apart from others' in ``store`` (by default one in memory with ``clock``)."""

    def __init__(self, per_minute: int, burst: int | None = None, *, store: StateStore | None = None,
                 name: str = "default", clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst if burst is not None else max(5, per_minute // 2))
        self.name = name
        self.store = store if store is not None else MemoryStore(clock=clock)

    async def take(self, client: str) -> float | None:
        """Spend one action for ``client``: None when allowed, else the seconds until one is allowed."""
        wait = await self.store.pace(f"{KEY_PREFIX}{self.name}:{client}", 1.0 / self.rate, self.burst)
        return wait or None
