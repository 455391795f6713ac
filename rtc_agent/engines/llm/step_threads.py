"""How many intra-op threads each forward step of the embedded LLM uses, chosen from how busy the machine is.

A decode step splits every matrix product between the threads, and each product waits for its slowest part. With
a core to itself every thread is fast: on a 2-core Xeon three translations decode in 0.77 s on 2 threads against
1.27 s on 1. When another thread at normal priority wants a core (a Whisper decode, the event loop, another
process), one part waits for the scheduler at every product: the same batch took 8-11 s on 2 threads beside one
busy thread, and still 1.28-1.39 s on 1. (Beside a voice at nice 10 in the same process the two are even.) So the
engine runs on all its threads while the rest of the machine is idle and on one while it is not.
:class:`StepThreads` decides per step (wrap each forward in :meth:`StepThreads.step`):

- At more than one thread, a decode step (one token per row) slower than ``slow_ratio`` x the fastest recent
  decode step of the same batch size at that thread count, or slower than the fastest recent one-thread step,
  means another thread shares the cores: the next steps run on one thread, for at least ``hold_s``. The first
  decode step of a batch size after its first full-thread one runs on one thread, to have that comparison.
- At one thread, once the hold is over, the next step uses ``1 + floor(idle + 1 - idle_share)`` threads (at most
  ``max_threads``), ``idle`` being the cores the rest of the machine left idle while the recent steps ran (from
  ``/proc/stat`` over at least ``window_s`` and at most ``max_window_s``: a longer one spans a pause between
  generations, when this engine's own core idled too). Without that figure (not Linux) the full count is tried
  again.
- A drop that follows a raise within ``hold_s`` (the raise was wrong) doubles the hold, up to ``max_hold_s``; a
  raise that holds for twice the hold resets it.

Prefill steps (several tokens per row) run on the current choice and teach nothing. "Fastest recent" is a
running minimum that drifts up by ``drift`` per observation, so it follows a growing context. ``set_threads`` is
called from the thread that runs the forward (torch's thread count is that thread's OpenMP setting and
process-wide for MKL), and only when the count changes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["StepThreads", "proc_stat_idle_s"]


def proc_stat_idle_s(path: str = "/proc/stat") -> float | None:
    """Seconds all CPUs have been idle since boot (idle + iowait of the ``cpu`` line), None where unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            fields = f.readline().split()
        return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class StepThreads:
    """Chooses the threads of each forward step (see the module docstring). ``set_threads(n)`` applies a count;
    ``idle_s()`` is the machine's cumulative idle CPU seconds or None; ``clock`` is monotonic seconds."""

    def __init__(self, max_threads: int, set_threads: Callable[[int], object], *,
                 idle_s: Callable[[], float | None] = proc_stat_idle_s, clock: Callable[[], float] = time.monotonic,
                 slow_ratio: float = 1.4, idle_share: float = 0.75, hold_s: float = 0.5, max_hold_s: float = 8.0,
                 window_s: float = 0.1, max_window_s: float = 1.0, drift: float = 0.02) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be >= 1, got {max_threads!r}")
        self.max_threads = max_threads
        self.set_threads = set_threads
        self.idle_s = idle_s
        self.clock = clock
        self.slow_ratio = slow_ratio
        self.idle_share = idle_share
        self.base_hold_s = hold_s
        self.hold_s = hold_s
        self.max_hold_s = max_hold_s
        self.window_s = window_s
        self.max_window_s = max_window_s
        self.drift = drift
        self.threads = max_threads
        self.applied = max_threads  # what set_threads was last given (the count torch starts with)
        self.fastest: dict[tuple[int, int], float] = {}  # (rows, threads) -> fastest recent decode step, s
        self.changed_at = -1e9
        self.raised_at: float | None = None
        self.drops = 0
        self.raises = 0
        self.steps = 0
        self.reduced_steps = 0
        self._mark: tuple[float, float] | None = None  # (clock, idle_s) where the idle window starts

    @contextmanager
    def step(self, rows: int, decode: bool) -> Iterator[None]:
        """Run one forward step of ``rows`` rows inside the block; ``decode``: one token per row."""
        if self.max_threads == 1:
            yield
            return
        threads = self._choose()
        if decode and threads > 1 and (rows, threads) in self.fastest and (rows, 1) not in self.fastest:
            threads = 1  # one probe at one thread per batch size: what "slower than one thread" compares with
        self._apply(threads)
        start = self.clock()
        yield
        if decode:
            self._learn(rows, threads, self.clock() - start)

    def _apply(self, threads: int) -> None:
        if threads != self.applied:
            self.set_threads(threads)
            self.applied = threads

    def _choose(self) -> int:
        now = self.clock()
        if self.threads < self.max_threads:
            target = self._idle_target(now)  # the window runs during the hold too
            if now - self.changed_at >= self.hold_s and target is not None and target > self.threads:
                self.threads, self.changed_at, self.raised_at = target, now, now
                self.raises += 1
        elif self.raised_at is not None and now - self.raised_at >= 2 * self.hold_s:
            self.hold_s, self.raised_at = self.base_hold_s, None  # the last raise held: back to the short hold
        self.steps += 1
        self.reduced_steps += self.threads < self.max_threads
        return self.threads

    def _idle_target(self, now: float) -> int | None:
        """The thread count the idle cores of the recent window allow; None while the window is too short."""
        idle = self.idle_s()
        if idle is None:
            return self.max_threads
        if self._mark is None or not 0 < now - self._mark[0] <= self.max_window_s:
            self._mark = (now, idle)  # a window that spans a pause between generations says nothing of now
            return None
        since, idle_then = self._mark
        if now - since < self.window_s:
            return None
        self._mark = (now, idle)
        idle_cores = max(0.0, idle - idle_then) / (now - since)
        return max(1, min(self.max_threads, 1 + int(idle_cores + 1 - self.idle_share)))

    def _learn(self, rows: int, threads: int, seconds: float) -> None:
        key = (rows, threads)
        fastest = self.fastest.get(key)
        self.fastest[key] = seconds if fastest is None else min(fastest * (1 + self.drift), seconds)
        if threads == 1:
            return
        one = self.fastest.get((rows, 1))
        if (fastest is not None and seconds > self.slow_ratio * fastest) or (one is not None and seconds > one):
            now = self.clock()
            if self.raised_at is not None and now - self.raised_at < self.hold_s:
                self.hold_s = min(self.max_hold_s, 2 * self.hold_s)
            self.threads, self.changed_at, self.raised_at = 1, now, None
            self.drops += 1
            self._mark = None  # the next idle window starts at the drop

    def stats(self) -> dict[str, Any]:
        """``max_threads``, the current ``threads``, ``drops``/``raises``, ``reduced_share`` of the steps."""
        return {"max_threads": self.max_threads, "threads": self.threads, "drops": self.drops,
                "raises": self.raises, "hold_s": self.hold_s,
                "reduced_share": round(self.reduced_steps / self.steps, 3) if self.steps else 0.0}
