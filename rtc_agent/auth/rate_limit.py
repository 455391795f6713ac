"""Per-client rate limits: one token bucket per (action, client), bounded in how many clients it tracks."""

from __future__ import annotations

import time
from collections import OrderedDict

MAX_CLIENTS = 10000  # buckets kept per action; the least recently used go first


class RateLimiter:
    """``per_minute`` actions a minute per client, with bursts of up to ``burst`` (default: half a minute's)."""

    def __init__(self, per_minute: int, burst: int | None = None, *, clock=time.monotonic) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst if burst is not None else max(5, per_minute // 2))
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # client -> (tokens, at)

    def take(self, client: str) -> float | None:
        """Spend one action for ``client``: None when allowed, else the seconds until one is allowed."""
        now = self._clock()
        tokens, at = self._buckets.pop(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens >= 1.0:
            self._buckets[client] = (tokens - 1.0, now)
            wait = None
        else:
            self._buckets[client] = (tokens, now)
            wait = (1.0 - tokens) / self.rate
        while len(self._buckets) > MAX_CLIENTS:
            self._buckets.popitem(last=False)
        return wait
