"""CPU priority between engines: long background jobs step aside while latency-critical engines run.

On a small CPU the embedded LLM (two threads, one token every ~30 ms) and the TTS or ASR engines slow each other
down when they run at once: each engine's thread pool expects the cores to itself, and a token and a clause that
overlap can both take several times as long (measured: a 140 ms clause took 330 ms while a token ran beside it).
The LLM runs far ahead of speech, so its next token can wait while the clause is synthesized.

The worker marks an engine busy for each batch it runs (:meth:`PriorityGate.running`). An engine registered with
``EngineSpec.yields_to`` gets a ``checkpoint`` function (:meth:`PriorityGate.step_hooks`) that it calls
between the steps of a long job: it returns once none of those engines is busy, or after ``max_wait_s`` at the
latest, so a yielding job is slowed but never starved. The handshake goes both ways: a batch of an engine that
others yield to starts once the step in progress of a job that yields to it has finished (at most
``step_wait_s`` later), so the two never overlap; a job that yields to other engines only, or whose steps run at
a lower OS priority (``hold=False``: a clause of a voice takes seconds, and its threads take only the CPU the
batch leaves idle), holds up no batch. A job that stops computing between steps (handing a result on, which may
block) ends its step first with the ``step_done`` function of :meth:`PriorityGate.step_hooks`.

The gate orders whole steps; within a step, the operating system decides. An engine registered with
``EngineSpec.nice`` runs its threads at a lower OS priority (:func:`lower_thread_priority`), so the step in
progress when a latency-critical batch starts, or a job past its ``max_wait_s``, takes only the CPU time that
engine leaves idle.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

#: The longest a latency-critical batch waits for a yielding engine's step in progress to finish.
STEP_WAIT_S = 0.25


class PriorityGate:
    """Thread-safe busy marks per engine name, and waits on them (see the module docstring)."""

    def __init__(self, step_wait_s: float = STEP_WAIT_S) -> None:
        self.step_wait_s = step_wait_s
        self._busy: Counter[str] = Counter()
        self._yielded_to: set[str] = set()  # engine names some checkpoint waits for
        # threads of yielding jobs between a checkpoint and the next -> the engine names they yield to
        self._stepping: dict[int, frozenset[str]] = {}
        self._changed = threading.Condition()
        self.waits = 0
        self.waited_s = 0.0
        self.step_waits = 0
        self.step_waited_s = 0.0

    @contextmanager
    def running(self, name: str) -> Iterator[None]:
        """Mark ``name`` busy for the duration of the block (nested and concurrent blocks count). When a job
        that yields to ``name`` (and holds, see :meth:`step_hooks`) is in a step, the block starts after that step
        (at most ``step_wait_s``). Ends the step of a yielding job that ran in this thread."""
        with self._changed:
            self._busy[name] += 1
            if name in self._yielded_to and self._stepping_for(name):
                start = time.monotonic()
                self._changed.wait_for(lambda: not self._stepping_for(name), timeout=self.step_wait_s)
                self.step_waits += 1
                self.step_waited_s += time.monotonic() - start
        try:
            yield
        finally:
            with self._changed:
                self._busy[name] -= 1
                if self._busy[name] <= 0:
                    del self._busy[name]
                self._stepping.pop(threading.get_ident(), None)
                self._changed.notify_all()

    def _stepping_for(self, name: str) -> bool:
        """Whether a job that yields to ``name`` is in a step (call holding ``_changed``)."""
        return any(name in watched for watched in self._stepping.values())

    def busy(self, names: Iterable[str]) -> bool:
        with self._changed:
            return any(self._busy.get(n) for n in names)

    def step_hooks(self, names: Iterable[str], max_wait_s: float,
                   hold: bool = True) -> tuple[Callable[[], float], Callable[[], None]]:
        """``(checkpoint, step_done)`` for a job that yields to ``names``.

        ``checkpoint()`` blocks while any of ``names`` is busy (at most ``max_wait_s``) and returns the seconds
        waited; with ``hold``, the caller's next step counts as in progress (a batch of one of ``names`` waits for
        it) from then until ``step_done()``, the next ``checkpoint()`` or the end of the caller's batch."""
        watched = tuple(names)
        marks = frozenset(watched)
        with self._changed:
            self._yielded_to.update(watched)

        def checkpoint() -> float:
            me = threading.get_ident()
            with self._changed:
                self._stepping.pop(me, None)
                waited = 0.0
                if any(self._busy.get(n) for n in watched):
                    self._changed.notify_all()  # a batch may be waiting for this step to end
                    start = time.monotonic()
                    self._changed.wait_for(lambda: not any(self._busy.get(n) for n in watched),
                                           timeout=max_wait_s)
                    waited = time.monotonic() - start
                    self.waits += 1
                    self.waited_s += waited
                if hold:
                    self._stepping[me] = marks
                return waited

        def step_done() -> None:
            me = threading.get_ident()
            with self._changed:
                if self._stepping.pop(me, None) is not None:
                    self._changed.notify_all()

        return checkpoint, step_done


def lower_thread_priority(nice: int) -> None:
    """Lower the calling thread's OS scheduling priority by ``nice`` (Linux: each thread has its own niceness, and
    threads it starts inherit it; an engine thread pool's initializer). Where the system refuses or has no
    per-thread priority, logs it and leaves the priority as it is."""
    if nice <= 0:
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except (AttributeError, OSError) as exc:
        log.warning("could not lower the priority of thread %s by %d: %s", threading.current_thread().name, nice, exc)
