"""``MemoryStore``: the state store in this process's memory (``state_url = "memory:"``, and tests).

Nothing survives the process. Every method runs without an await inside, so on one event loop each is atomic.
``clock`` (seconds, wall time by default) lets a test move time.
"""

from __future__ import annotations

import time

from rtc_agent.state.store import Clock, Limits, StateStore


class MemoryStore(StateStore):
    kind = "memory"

    def __init__(self, limits: Limits | None = None, *, clock: Clock = time.time) -> None:
        super().__init__(limits)
        self.url = "memory:"
        self.clock = clock
        self._values: dict[str, tuple[str, float]] = {}  # key -> (value, expires at)
        self._counters: dict[str, tuple[float, float]] = {}  # key -> (count or TAT, expires at)
        self._leases: dict[str, dict[str, float]] = {}  # key -> owner -> expires at
        self._lists: dict[str, tuple[list[str], float]] = {}  # key -> (items, expires at)

    def _live_value(self, key: str) -> str | None:
        entry = self._values.get(key)
        if entry is None:
            return None
        if entry[1] <= self.clock():
            del self._values[key]
            return None
        return entry[0]

    # --- values ---

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        self._check(key, value, ttl_s)
        self._values[key] = (value, self.clock() + ttl_s)

    async def get(self, key: str) -> str | None:
        self._check(key)
        return self._live_value(key)

    async def delete(self, key: str) -> bool:
        self._check(key)
        live = self._live_value(key) is not None
        self._values.pop(key, None)
        return live

    async def consume(self, key: str) -> str | None:
        self._check(key)
        value = self._live_value(key)
        self._values.pop(key, None)
        return value

    # --- counters ---

    async def increment(self, key: str, window_s: float, amount: int = 1) -> tuple[int, float]:
        self._check(key, ttl_s=window_s)
        now = self.clock()
        count, ends = self._counters.get(key, (0.0, 0.0))
        if ends <= now:
            count, ends = 0.0, now + window_s
        count += amount
        self._counters[key] = (count, ends)
        return int(count), ends - now

    async def pace(self, key: str, interval_s: float, burst: float) -> float:
        self._check(key, ttl_s=interval_s)
        now = self.clock()
        tat, _ = self._counters.get(key, (now, 0.0))
        after = max(tat, now) + interval_s
        wait = after - now - burst * interval_s
        if wait > 0:
            return wait
        self._counters[key] = (after, after)
        return 0.0

    # --- leases ---

    def _live_holders(self, key: str) -> dict[str, float]:
        now = self.clock()
        held = {owner: ends for owner, ends in self._leases.get(key, {}).items() if ends > now}
        if held:
            self._leases[key] = held
        else:
            self._leases.pop(key, None)
        return held

    async def acquire(self, key: str, owner: str, ttl_s: float, slots: int = 1) -> float:
        self._check(key, ttl_s=ttl_s)
        now = self.clock()
        held = self._leases.setdefault(key, {})
        if owner not in held and len(held) >= slots:
            held = self._live_holders(key)  # expired leases are dropped only when they would refuse someone
            if len(held) >= slots:
                return max(min(held.values()) - now, 1e-3)
        self._leases.setdefault(key, held)[owner] = now + ttl_s
        return 0.0

    async def renew(self, key: str, owner: str, ttl_s: float) -> bool:
        self._check(key, ttl_s=ttl_s)
        held, now = self._leases.get(key, {}), self.clock()
        if held.get(owner, now) <= now:
            return False
        held[owner] = now + ttl_s
        return True

    async def release(self, key: str, owner: str) -> bool:
        self._check(key)
        held = self._leases.get(key, {})
        ends = held.pop(owner, None)
        if not held:
            self._leases.pop(key, None)
        return ends is not None and ends > self.clock()

    async def holders(self, key: str) -> dict[str, float]:
        self._check(key)
        now = self.clock()
        return {owner: ends - now for owner, ends in self._live_holders(key).items()}

    # --- lists ---

    async def append(self, key: str, item: str, ttl_s: float, max_items: int | None = None) -> int:
        self._check(key, item, ttl_s)
        cap = self._list_cap(max_items)
        now = self.clock()
        items, ends = self._lists.get(key, ([], 0.0))
        if ends <= now:
            items = []
        if len(items) >= cap:
            raise self._full(len(items), cap)
        items.append(item)
        self._lists[key] = (items, now + ttl_s)
        return len(items)

    async def items(self, key: str) -> list[str]:
        self._check(key)
        items, ends = self._lists.get(key, ([], 0.0))
        return list(items) if ends > self.clock() else []

    # --- upkeep ---

    async def sweep(self) -> int:
        now = self.clock()
        dropped = 0
        for table in (self._values, self._counters, self._lists):
            expired = [k for k, entry in table.items() if entry[1] <= now]
            for k in expired:
                del table[k]
            dropped += len(expired)
        for key in list(self._leases):
            before = len(self._leases[key])
            dropped += before - len(self._live_holders(key))
        return dropped

    async def close(self) -> None:
        for table in (self._values, self._counters, self._leases, self._lists):
            table.clear()
