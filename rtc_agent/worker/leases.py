"""One engine's lease slots: at most ``EngineSpec.capacity`` sessions hold the engine at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from rtc_agent.errors import AtCapacity
from rtc_agent.worker.engine import EngineSpec
from rtc_agent.worker.failures import closed_error


class EngineLeases:
    """The lease slots of one engine (``capacity`` None: unlimited) and how long past leases were held.

    ``is_closed`` tells whether the worker has closed (then no lease is granted).
    """

    def __init__(self, spec: EngineSpec, is_closed: Callable[[], bool]) -> None:
        self.spec = spec
        self.held = 0  # leases held now
        self.done = 0  # leases released
        self.time_total = 0.0  # seconds the released leases were held, together
        self._slots = asyncio.Semaphore(spec.capacity) if spec.capacity is not None else None
        self._is_closed = is_closed

    @asynccontextmanager
    async def hold(self, wait: float) -> AsyncIterator[None]:
        """Hold one slot for the ``async with`` block, waiting up to ``wait`` seconds for a free one.

        Raises ``AtCapacity(code="engine_capacity")`` when none came free in time, with ``retry_after``
        estimated from how long past leases were held (1-60 s); ``EngineError(code="worker_closed")`` after
        close. Waiters are served first come, first served.
        """
        if self._is_closed():
            raise closed_error(self.spec.name)
        sem = self._slots
        if sem is not None:
            if wait <= 0:
                if sem.locked():
                    raise self._capacity_error()
                await sem.acquire()  # free: returns without suspending
            else:
                try:
                    async with asyncio.timeout(wait):
                        await sem.acquire()
                except TimeoutError:
                    raise self._capacity_error() from None
        self.held += 1
        start = time.monotonic()
        try:
            yield
        finally:
            self.held -= 1
            self.done += 1
            self.time_total += time.monotonic() - start
            if sem is not None:
                sem.release()

    def _capacity_error(self) -> AtCapacity:
        mean_hold = self.time_total / self.done if self.done else 5.0
        return AtCapacity(
            f"engine {self.spec.name!r} is at capacity ({self.spec.capacity} sessions)",
            code="engine_capacity", retry_after=round(min(60.0, max(1.0, mean_hold)), 1),
        )
