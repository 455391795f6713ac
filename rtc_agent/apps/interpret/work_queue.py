"""The waiting work of one session task: a FIFO that ``put`` never blocks on and the task awaits with ``get``.

The interpretation's speaker (texts waiting for synthesis) and the text route (caption finals waiting for
translation) both feed a task that sleeps while there is nothing to do; :class:`WorkQueue` is that queue and its
wake-up, in one place.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["WorkQueue"]

T = TypeVar("T")


class WorkQueue(Generic[T]):
    """Items waiting for one consumer task, oldest first. ``maxlen`` (None: unbounded; the caller bounds it
    itself then, e.g. with :meth:`popleft`): a ``put`` on a full queue pushes the oldest item out and returns it,
    so the caller can say what was dropped."""

    def __init__(self, maxlen: int | None = None) -> None:
        if maxlen is not None and maxlen < 1:
            raise ValueError(f"maxlen must be None or >= 1, got {maxlen!r}")
        self.maxlen = maxlen
        self._items: deque[T] = deque()
        self._wake = asyncio.Event()

    def put(self, item: T) -> T | None:
        """Append ``item`` (non-blocking) and wake the consumer; the item pushed out when full, else None."""
        pushed = self._items.popleft() if self.maxlen is not None and len(self._items) >= self.maxlen else None
        self._items.append(item)
        self._wake.set()
        return pushed

    async def get(self) -> T:
        """The oldest item, waiting for one when there is none."""
        await self.wait()
        return self._items.popleft()

    async def wait(self) -> None:
        """Return once an item waits (at once when one does), taking none."""
        while not self._items:
            self._wake.clear()
            await self._wake.wait()

    def popleft(self) -> T:
        """Take the oldest item now (``IndexError`` when empty)."""
        return self._items.popleft()

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)
