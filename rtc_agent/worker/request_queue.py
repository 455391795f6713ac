"""The bounded, single-consumer request queue of one engine: urgent requests first, background ones last, abandoned
ones skipped."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: ``view`` of :meth:`RequestQueue.get` that takes a request of any engine on the lane
ANY: Any = object()


@dataclass(slots=True)
class PendingRequest:
    """One queued request: its payload, the caller's future and when it was queued (``time.monotonic``);
    ``view``: the engine sharing the lane it is for (``EngineSpec.shares``; None: the lane's own engine);
    ``urgent``: taken before the non-urgent ones, whatever the request says; ``background``: taken after every
    other kind (work nobody waits for, such as computing a translation context ahead)."""

    request: Any
    future: asyncio.Future[Any]
    enqueued: float
    view: str | None = None
    urgent: bool = False
    background: bool = False


class RequestQueue:
    """A bounded queue of pending requests with a single consumer (the dispatcher): urgent requests (a request
    whose ``urgent`` attribute is true: a result a person is waiting for, such as a caption's final decode; or a
    pending request marked ``urgent``) come out before the others and requests marked ``background`` after all the
    others, each kind in arrival order.

    Requests whose caller has gone (future done: cancelled or timed out) are skipped by ``get`` and purged
    when the queue is full, so abandoned requests never hold queue slots or reach the engine.
    """

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._urgent: deque[PendingRequest] = deque()
        self._items: deque[PendingRequest] = deque()
        self._background: deque[PendingRequest] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return sum(map(len, self._tiers()))

    def _tiers(self) -> tuple[deque[PendingRequest], ...]:
        """The kinds of request in the order they are taken."""
        return self._urgent, self._items, self._background

    def _all(self) -> Iterator[PendingRequest]:
        for items in self._tiers():
            yield from items

    def live(self) -> int:
        """Requests still waiting for a caller."""
        return sum(1 for p in self._all() if not p.future.done())

    def live_of(self, view: str | None) -> int:
        """Requests still waiting for a caller, for ``view`` (None: the lane's own engine)."""
        return sum(1 for p in self._all() if p.view == view and not p.future.done())

    def oldest_age(self, now: float) -> float:
        """Seconds the oldest live request other than a background one has waited (0.0 when none)."""
        ages = [now - p.enqueued for p in self._all() if not p.future.done() and not p.background]
        return max(0.0, max(ages)) if ages else 0.0

    def put_nowait(self, pending: PendingRequest) -> bool:
        """Queue ``pending``; False when the queue is full of live requests."""
        if len(self) >= self.maxsize:
            for items in self._tiers():
                self._drop_done(items)
            if len(self) >= self.maxsize:
                return False
        if pending.urgent or getattr(pending.request, "urgent", False):
            self._urgent.append(pending)
        else:
            (self._background if pending.background else self._items).append(pending)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        return True

    def get_nowait(self, view: Any = ANY) -> PendingRequest | None:
        """The oldest live urgent request, else the oldest live other one, else the oldest live background one,
        or None. With ``view`` (an engine sharing the lane, or None for the lane's own): the first of those of that
        engine, the others staying where they are."""
        for items in self._tiers():
            if view is not ANY:
                self._drop_done(items)
                for index, pending in enumerate(items):
                    if pending.view == view:
                        del items[index]
                        return pending
                continue
            while items:
                pending = items.popleft()
                if not pending.future.done():
                    return pending
        return None

    @staticmethod
    def _drop_done(items: deque[PendingRequest]) -> None:
        if any(p.future.done() for p in items):
            live = [p for p in items if not p.future.done()]
            items.clear()
            items.extend(live)

    async def get(self, timeout: float | None = None, view: Any = ANY) -> PendingRequest | None:
        """The next live request (see :meth:`get_nowait`, ``view`` included), waiting up to ``timeout`` seconds
        (forever if None); None on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            pending = self.get_nowait(view)
            if pending is not None:
                return pending
            if deadline is not None and loop.time() >= deadline:
                return None
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiter = waiter
            handle = None
            if deadline is not None:
                handle = loop.call_at(deadline, lambda w=waiter: w.done() or w.set_result(None))
            try:
                await waiter
            finally:
                self._waiter = None
                if handle is not None:
                    handle.cancel()

    def drain(self) -> list[PendingRequest]:
        """Remove and return everything queued."""
        items = list(self._all())
        for tier in self._tiers():
            tier.clear()
        return items

