"""Event-loop lag monitor: how late the loop wakes a periodic timer.

Lag is the best single signal that something heavy runs on the event loop (or holds the GIL too long):
WebRTC pacing (20 ms audio frames), heartbeats and every session share that loop. The monitor sleeps
``interval`` seconds in a loop and records how much later than asked it woke up.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from typing import Any

from rtc_agent.metrics import Metrics
from rtc_agent.tasks import cancel_and_wait

__all__ = ["LoopLagMonitor"]


class LoopLagMonitor:
    """Samples event-loop lag every ``interval`` seconds.

    Each sample goes into ``metrics.event_loop_lag`` (histogram, seconds) and ``metrics.event_loop_lag_last``
    (gauge) when ``metrics`` is given, and into a ring of the last ``window`` samples that :meth:`stats`
    summarises. ``start`` must be called on the running loop; ``stop`` is idempotent.
    """

    def __init__(self, metrics: Metrics | None = None, interval: float = 0.1, window: int = 3000) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval!r}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window!r}")
        self.metrics = metrics
        self.interval = interval
        self._samples: deque[float] = deque(maxlen=window)
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start sampling on the running loop (no-op when already running)."""
        if self.running:
            return
        self._task = asyncio.get_running_loop().create_task(self._sample(), name="rtc_agent.loop_lag")

    async def stop(self) -> None:
        """Stop sampling and wait for the sampler task to end. Samples are kept."""
        task, self._task = self._task, None
        await cancel_and_wait(task)

    def reset(self) -> None:
        """Forget the samples collected so far."""
        self._samples.clear()

    def record(self, lag: float) -> None:
        """Record one lag sample in seconds (used by the sampler; public for tests and other probes)."""
        lag = max(0.0, lag)
        self._samples.append(lag)
        if self.metrics is not None:
            self.metrics.event_loop_lag.observe(lag)
            self.metrics.event_loop_lag_last.set(lag)

    async def _sample(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(self.interval)
            self.record(loop.time() - start - self.interval)

    def sample_count(self) -> int:
        """Samples in the ring."""
        return len(self._samples)

    def recent_ms(self, seconds: float, q: float = 90) -> float:
        """The ``q``-th percentile (ms) of the samples of about the last ``seconds``; 0.0 with none."""
        samples = _recent(self._samples, max(1, round(seconds / self.interval)))
        return round(1000 * _percentile(sorted(samples), q), 3) if samples else 0.0

    def stats(self) -> dict[str, Any]:
        """``samples`` (in the ring), ``p50_ms``, ``p99_ms``, ``max_ms``, ``last_ms``, ``mean_ms``; all 0.0
        before the first sample. Percentiles are nearest-rank over the ring."""
        samples = list(self._samples)
        if not samples:
            return {"samples": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0, "last_ms": 0.0, "mean_ms": 0.0}
        ordered = sorted(samples)
        return {
            "samples": len(samples),
            "p50_ms": round(1000 * _percentile(ordered, 50), 3),
            "p99_ms": round(1000 * _percentile(ordered, 99), 3),
            "max_ms": round(1000 * ordered[-1], 3),
            "last_ms": round(1000 * samples[-1], 3),
            "mean_ms": round(1000 * sum(samples) / len(samples), 3),
        }


def _recent(samples: deque[float], count: int) -> list[float]:
    return list(samples)[-count:] if count < len(samples) else list(samples)


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty list."""
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]
