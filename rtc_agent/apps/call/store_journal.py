"""``StoreJournal``: writes to the state store made from synchronous code (a room's caption callback), in order,
without holding up the event loop and without a store failure reaching the call.

A room hears a caption in a plain method; the state store is async (SQLite on its own thread, Redis over the
network). :meth:`StoreJournal.submit` queues one write (a coroutine function) and returns at once; one task writes
them in submission order, so a transcript line is always stored before its translations. The queue is bounded
(``room_store_queue``): past it a write is dropped and counted. A write that fails (a Redis server down, a full
list) is counted too; the first failure and the first drop are logged (once each, until the journal works again),
and :meth:`stats` says so (``/health`` shows it). Whoever queued the write keeps its in-memory copy either way.

:meth:`flush` waits (bounded) until everything queued so far is written, so a read of the store right after sees
this process's own writes; :meth:`close` flushes and stops the task.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rtc_agent.redact import redact_text
from rtc_agent.tasks import cancel_and_wait

log = logging.getLogger(__name__)

Write = Callable[[], Awaitable[Any]]


class StoreJournal:
    """Ordered write-behind to the state store (see the module). ``max_queued`` bounds the writes waiting."""

    def __init__(self, max_queued: int = 1000) -> None:
        self.max_queued = max(1, int(max_queued))
        self._queue: asyncio.Queue[tuple[str, Write]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._submitted = 0
        self._finished = 0  # written, failed or dropped after being queued
        self._progress: asyncio.Condition | None = None
        self.written = 0
        self.failed = 0
        self.dropped = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self._logged_failure = False
        self._logged_drop = False
        self._closed = False

    # --- queueing ---------------------------------------------------------------------------------------------

    def submit(self, label: str, write: Write) -> bool:
        """Queue ``write`` (``label`` names it in logs); False when it was dropped (queue full, journal closed, or
        no running event loop)."""
        if self._closed:
            return self._drop(label, "the journal is closed")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._drop(label, "no running event loop")
        if self._queue is None:
            self._queue = asyncio.Queue(self.max_queued)
            self._progress = asyncio.Condition()
        try:
            self._queue.put_nowait((label, write))
        except asyncio.QueueFull:
            return self._drop(label, f"{self.max_queued} writes are waiting (room_store_queue)")
        self._submitted += 1
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="state-journal")
        return True

    def _drop(self, label: str, why: str) -> bool:
        self.dropped += 1
        if not self._logged_drop:
            self._logged_drop = True
            log.warning("state store: a %s write was dropped (%s); the server keeps its copy in memory only "
                        "(logged once; /health state.meetings counts them)", label, why)
        return False

    async def _run(self) -> None:
        assert self._queue is not None and self._progress is not None
        while True:
            label, write = await self._queue.get()
            try:
                await write()
                self.written += 1
                if self._logged_failure:
                    log.info("state store: writes work again")
                self._logged_failure = self._logged_drop = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failure(label, exc)
            finally:
                self._finished += 1
                async with self._progress:
                    self._progress.notify_all()

    def failure(self, label: str, exc: BaseException) -> None:
        """Count (and log, once until writes work again) a failed store operation ``label``; also used by readers
        of the store, whose failure falls back to the in-memory copy."""
        self.failed += 1
        self.last_error = redact_text(f"{label}: {type(exc).__name__}: {exc}")[:300]
        self.last_error_at = time.time()
        if not self._logged_failure:
            self._logged_failure = True
            log.warning("state store: %s failed (%s); the call goes on with the server's in-memory copy "
                        "(logged once; /health state.meetings says so)", label, self.last_error)

    # --- waiting and stopping ---------------------------------------------------------------------------------

    @property
    def queued(self) -> int:
        """Writes submitted and not finished yet."""
        return self._submitted - self._finished

    async def flush(self, timeout: float = 5.0) -> bool:
        """Wait up to ``timeout`` seconds until every write submitted so far has finished; whether they have."""
        target = self._submitted
        if self._progress is None or self._finished >= target:
            return True
        progress = self._progress

        async def reached() -> None:
            async with progress:
                await progress.wait_for(lambda: self._finished >= target or self._task is None
                                        or self._task.done())

        try:
            await asyncio.wait_for(reached(), timeout)
        except TimeoutError:
            return False
        return self._finished >= target

    async def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (up to ``timeout`` seconds), then stop; later submits are dropped."""
        await self.flush(timeout)
        self._closed = True
        task, self._task = self._task, None
        await cancel_and_wait(task)
        left = self.queued
        if left > 0:
            self.dropped += left
            self._finished += left
            log.warning("state store: %d meeting writes were not written before shutdown", left)

    def stats(self) -> dict[str, Any]:
        """``{ok, queued, written, failed, dropped, last_error, last_error_at}``: ``ok`` is false once a write
        failed or was dropped (then the store may lack what the server holds in memory)."""
        return {"ok": self.failed == 0 and self.dropped == 0, "queued": self.queued, "written": self.written,
                "failed": self.failed, "dropped": self.dropped, "last_error": self.last_error,
                "last_error_at": self.last_error_at}
