"""``FramePacer``: one clock for an outgoing track.

aiortc pulls frames as fast as ``recv`` returns them, so every outgoing track sleeps until its next frame is due.
Timestamps come from a sample (or tick) counter, never from wall time, so they stay steady; if the event loop
stalled far behind, pacing restarts from now instead of sending a burst.
"""

from __future__ import annotations

import asyncio
import time

RESYNC_AFTER_S = 0.5


class FramePacer:
    """Counts frames of ``step`` ticks at ``rate`` ticks per second and waits until each is due."""

    def __init__(self, rate: int, step: int) -> None:
        self.rate = rate
        self.step = step
        self.pts = 0
        self.resyncs = 0
        self._start: float | None = None

    @property
    def started_at(self) -> float | None:
        """``time.monotonic()`` of the first frame (shifted by resyncs), or None before it."""
        return self._start

    async def next_pts(self) -> int:
        """Wait until the next frame is due and return its timestamp (0 for the first frame)."""
        now = time.monotonic()
        if self._start is None:
            self._start = now
            return self.pts
        self.pts += self.step
        wait = self._start + self.pts / self.rate - now
        if wait > 0:
            await asyncio.sleep(wait)
        elif wait < -RESYNC_AFTER_S:
            self._start = now - self.pts / self.rate
            self.resyncs += 1
        return self.pts
