"""CPU priority between engines: long background jobs step aside while latency-critical engines run.

On a small CPU the embedded LLM (two threads, one token every ~30 ms) and the TTS or ASR engines slow each other
down when they run at once, and the first spoken clause waits for both. The LLM runs far ahead of speech, so its
next token can wait a few milliseconds while the clause is synthesized.

The worker marks an engine busy for each batch it runs (:meth:`PriorityGate.running`). An engine registered with
``EngineSpec.yields_to`` gets a ``checkpoint`` function (:meth:`PriorityGate.checkpoint_for`) that it calls
between the steps of a long job: it returns once none of those engines is busy, or after ``max_wait_s`` at the
latest, so a yielding job is slowed but never starved.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager


class PriorityGate:
    """Thread-safe busy marks per engine name, and waits on them (see the module docstring)."""

    def __init__(self) -> None:
        self._busy: Counter[str] = Counter()
        self._changed = threading.Condition()
        self.waits = 0
        self.waited_s = 0.0

    @contextmanager
    def running(self, name: str) -> Iterator[None]:
        """Mark ``name`` busy for the duration of the block (nested and concurrent blocks count)."""
        with self._changed:
            self._busy[name] += 1
        try:
            yield
        finally:
            with self._changed:
                self._busy[name] -= 1
                if self._busy[name] <= 0:
                    del self._busy[name]
                    self._changed.notify_all()

    def busy(self, names: Iterable[str]) -> bool:
        with self._changed:
            return any(self._busy.get(n) for n in names)

    def checkpoint_for(self, names: Iterable[str], max_wait_s: float) -> Callable[[], float]:
        """A function that blocks while any of ``names`` is busy (at most ``max_wait_s``); returns seconds waited."""
        watched = tuple(names)

        def checkpoint() -> float:
            with self._changed:
                if not any(self._busy.get(n) for n in watched):
                    return 0.0
                start = time.monotonic()
                self._changed.wait_for(lambda: not any(self._busy.get(n) for n in watched), timeout=max_wait_s)
                waited = time.monotonic() - start
                self.waits += 1
                self.waited_s += waited
                return waited

        return checkpoint
