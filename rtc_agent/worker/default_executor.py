"""Start asyncio's default executor at full size, so the server's thread count stays fixed while it runs.

aiortc encodes every outgoing audio frame in the loop's default executor (``run_in_executor(None, ...)``), and
``asyncio.to_thread`` calls (tools, uploads) run there too. ``ThreadPoolExecutor`` starts its threads lazily and,
even under strictly sequential use, keeps adding one now and then until it reaches ``max_workers``: the worker
thread marks itself idle only after the caller already has the result, so a call submitted right away finds no
idle thread and starts a new one. Over a long run the pool creeps to its maximum (min(32, cores + 4) threads), which
reads as thread growth in a soak. Starting all of them at start-up gives the same pool, with a constant count.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading

BARRIER_TIMEOUT_S = 5.0


def default_executor_size() -> int:
    """``ThreadPoolExecutor``'s default ``max_workers`` (what ``loop.run_in_executor(None, ...)`` gets)."""
    cpus = getattr(os, "process_cpu_count", os.cpu_count)() or 1
    return min(32, cpus + 4)


async def prestart_default_executor(size: int | None = None) -> int:
    """Have the running loop's default executor start ``size`` threads now (its default size if None); returns
    ``size``. Idempotent: threads that already exist are reused."""
    size = size or default_executor_size()
    barrier = threading.Barrier(size, timeout=BARRIER_TIMEOUT_S)  # every thread busy at once: none reused

    def wait() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):  # a smaller pool than expected: no hang
            barrier.wait()

    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(None, wait) for _ in range(size)))
    return size
