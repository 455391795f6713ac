"""An engine that runs on another engine's lane (``EngineSpec.shares``): the engine its ``adapt`` made from the
host's loaded engine, its own step hooks, and its own counters, so ``Worker.stats()`` shows it as a row of its own.

Step hooks (:mod:`rtc_agent.worker.priority`): the host engine's ``checkpoint``/``step_done`` are the host's, made
from the host spec's ``yields_to``. While a batch of the view runs, :func:`hooks_of` swaps in the view's own, from
the view spec's ``yields_to``/``yield_max_s`` (none: its steps never wait), so a latency-critical request on a
background engine's model does not step aside as the background jobs do. The swap needs the host's batches one at a
time (``concurrency`` 1); on a host with more threads the view keeps the host's hooks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from rtc_agent.worker.engine import Engine, EngineSpec
from rtc_agent.worker.priority import PriorityGate

__all__ = ["EngineView", "hooks_of", "stats_row"]

Hooks = tuple[Callable[[], float], Callable[[], None]]


def _no_wait() -> float:
    return 0.0


def _no_step() -> None:
    return None


class Counted(Protocol):
    """What :func:`stats_row` reads: a lane's or a view's spec and request counters."""

    spec: EngineSpec
    in_flight: int
    calls: int
    errors: int
    rejected: int
    timeouts: int
    batch_count: int
    batch_items: int
    queue_delay_total: float
    run_time_total: float


def stats_row(counted: Counted, *, loaded: bool, loading: bool, progress: str, queue_depth: int, leases: int,
              capacity: int | None) -> dict[str, Any]:
    """One engine's row of :meth:`Worker.stats`: the loader's state and queue as given, the rest from ``counted``
    (means over its batches and their items, 0.0 before the first)."""
    batches, items = counted.batch_count, counted.batch_items
    return {
        "loaded": loaded,
        "loading": loading,
        "progress": progress,
        "queue_depth": queue_depth,
        "max_queue": counted.spec.max_queue,
        "in_flight": counted.in_flight,
        "leases": leases,
        "capacity": capacity,
        "calls": counted.calls,
        "errors": counted.errors,
        "rejected": counted.rejected,
        "timeouts": counted.timeouts,
        "batches": batches,
        "mean_batch_size": round(items / batches, 3) if batches else 0.0,
        "mean_queue_delay_ms": round(1000 * counted.queue_delay_total / items, 3) if items else 0.0,
        "mean_run_ms": round(1000 * counted.run_time_total / batches, 3) if batches else 0.0,
    }


@contextlib.contextmanager
def hooks_of(host: Engine, hooks: Hooks | None) -> Iterator[None]:
    """Within the block (in the engine thread), ``host``'s step hooks are ``hooks`` (None: left as they are)."""
    if hooks is None or not hasattr(host, "checkpoint"):
        yield
        return
    saved = (host.checkpoint, getattr(host, "step_done", None))  # type: ignore[attr-defined]
    host.checkpoint = hooks[0]  # type: ignore[attr-defined]
    if saved[1] is not None:
        host.step_done = hooks[1]  # type: ignore[attr-defined]
    try:
        yield
    finally:
        host.checkpoint = saved[0]  # type: ignore[attr-defined]
        if saved[1] is not None:
            host.step_done = saved[1]  # type: ignore[attr-defined]


class EngineView:
    """One engine sharing a lane: ``spec`` (with ``shares`` and ``adapt``), the adapted engine once the host has
    loaded (:meth:`engine_of`), and the counters of its own requests (the host's counters leave them out)."""

    def __init__(self, spec: EngineSpec, priority: PriorityGate, host_concurrency: int) -> None:
        self.spec = spec
        self.engine: Engine | None = None
        #: the host's step hooks while this view's batch runs (None: the host's own; see the module docstring)
        self.hooks: Hooks | None = None
        if host_concurrency == 1:
            self.hooks = priority.step_hooks(spec.yields_to, spec.yield_max_s) if spec.yields_to \
                else (_no_wait, _no_step)
        self.calls = 0
        self.errors = 0
        self.rejected = 0
        self.timeouts = 0
        self.in_flight = 0
        self.batch_count = 0
        self.batch_items = 0
        self.queue_delay_total = 0.0
        self.run_time_total = 0.0

    def engine_of(self, host: Engine) -> Engine:
        """This engine over the host's loaded engine ``host``: ``spec.adapt(host)``, made once."""
        if self.engine is None:
            assert self.spec.adapt is not None
            self.engine = self.spec.adapt(host)
        return self.engine

    def stats(self, host: dict[str, Any], queue_depth: int) -> dict[str, Any]:
        """The row of :meth:`Worker.stats` for this engine: loading as its host (``host``: the host's row), the
        rest its own, and ``shares``: the host's name."""
        return {**stats_row(self, loaded=host["loaded"], loading=host["loading"], progress=host["progress"],
                            queue_depth=queue_depth, leases=0, capacity=None), "shares": self.spec.shares}
