"""The engine contract the worker schedules, and the spec that registers one engine with a :class:`Worker`.

An engine is a blocking object that the worker only ever touches from its own threads: ``load`` once, then
``run_batch`` many times (at most ``EngineSpec.concurrency`` batches at once), then ``close``. Nothing in an
engine runs on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

#: where :func:`deliver_early` hands a result in this thread (set by the worker around ``run_batch``)
_early_results: ContextVar[Callable[[int, Any], object] | None] = ContextVar("rtc_agent_early_results",
                                                                            default=None)


class Engine(Protocol):
    """A model backend as the worker sees it.

    Contract:

    - ``load(progress)`` is blocking and may be slow (reading weights, connecting to a server). It may
      call ``progress("loading weights 3/5")`` any number of times from its own thread; the worker logs each
      message with the engine name and elapsed time. Raising means the load failed; the worker may later
      retry with a fresh instance from the factory.
    - ``run_batch(requests)`` is blocking and returns exactly one result per request, in order. An item of
      the result list may be an ``Exception`` instance: that request failed, the others succeeded. Raising
      fails the whole batch. With ``concurrency > 1`` it is called from several threads at once.
    - ``close()`` is optional (the worker looks it up with ``getattr``) and releases resources; it is called
      once, from a worker thread, after the last batch.
    - ``runtime_stats()`` is optional (looked up with ``getattr``): a JSON-able dict of what the loaded engine
      measures of itself (caches, thread choices), shown as the ``runtime`` of its row in ``Worker.stats()``; called
      from the event loop while batches run, so it only reads counters.
    - While ``run_batch`` runs, :func:`deliver_early` (from the same thread) hands one request's result to its
      caller before the batch ends (e.g. the shortest of several translations decoded together); the returned
      list still holds every result, and the worker ignores those already delivered.
    """

    def load(self, progress: Callable[[str], None]) -> None:
        """Load weights or connect; blocking. Report steps through ``progress``."""
        ...

    def run_batch(self, requests: list[Any]) -> list[Any]:
        """Run one batch; blocking. One result (or ``Exception`` instance) per request, in order."""
        ...

    def close(self) -> None:
        """Release resources. Optional: engines without it are fine, the worker uses ``getattr``."""
        ...


@dataclass
class EngineSpec:
    """How the worker schedules one engine.

    - ``name``: unique within a worker; used in metrics labels, logs and errors.
    - ``factory``: builds the (not yet loaded) engine; called in a worker thread on the first load.
    - ``max_queue``: bound of the request queue; a call that finds it full fails at once with
      ``AtCapacity(code="engine_overloaded")``.
    - ``max_batch``: at most this many requests (from any sessions) go into one ``run_batch`` call.
    - ``batch_window_ms``: after the first request of a batch, how long the dispatcher waits for more requests
      before running a partial batch (0: take only what is already queued).
    - ``concurrency``: batches running at once, each in its own thread.
    - ``capacity``: lease slots (see :meth:`Worker.lease`), e.g. one realtime VLM session per model instance;
      ``None`` means unlimited.
    - ``yields_to``: engine names this engine's long jobs step aside for (see
      :mod:`~rtc_agent.worker.priority`): an engine with a ``checkpoint`` attribute gets a function it calls
      between steps, which waits (at most ``yield_max_s``) while any of those engines runs a batch, and one
      with a ``step_done`` attribute a function it calls when it stops computing before the next step.
    - ``nice``: how much lower than the process's the OS scheduling priority of this engine's threads is (0-19,
      Linux thread niceness; see :func:`~rtc_agent.worker.priority.lower_thread_priority`): an engine whose long
      jobs can wait (speech synthesis far ahead of the listener) takes only the CPU time that the others leave when
      their threads are ready to run, instead of an equal share of the cores. Its step in progress holds up no
      batch of the engines it yields to (their batches start at once: the OS gives them the cores).
    - ``shares``: the name of an engine registered earlier whose lane this one runs on (that engine's host's, when
      it shares one itself), so one loaded model serves two kinds of request (the embedded text translator on the
      embedded LLM): its queue, its threads, its loaded engine and its priority hooks. ``adapt(host)`` makes this
      engine from the lane's loaded engine, once, on the event loop (a thin wrapper: it must not load or block);
      ``max_queue`` bounds this engine's share of the host's queue; with ``urgent`` its requests are taken before
      the host's own waiting requests (never interrupting a running batch), with ``background`` after every other
      waiting request of the lane (work nobody waits for: an agent's turn overtakes it); its ``max_batch`` and
      ``batch_window_ms`` bound the batches of its own requests (a batch on a shared lane holds one engine's
      requests). When no engine of that name is registered, the spec gets a lane of its own from ``factory`` like
      any other (``adapt`` unused), so a worker with only this engine still serves it.
    """

    name: str
    factory: Callable[[], Engine]
    max_queue: int = 32
    max_batch: int = 1
    batch_window_ms: float = 0.0
    concurrency: int = 1
    capacity: int | None = None
    yields_to: tuple[str, ...] = ()
    yield_max_s: float = 0.5
    nice: int = 0
    shares: str | None = None
    adapt: Callable[[Engine], Engine] | None = None
    urgent: bool = False
    background: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("EngineSpec.name must not be empty")
        if self.urgent and self.background:
            raise ValueError(f"EngineSpec {self.name!r}: a request kind is urgent or background, not both")
        if self.shares is not None and (self.shares == self.name or not callable(self.adapt)):
            raise ValueError(f"EngineSpec {self.name!r}: shares needs another engine's name and a callable adapt")
        if not callable(self.factory):
            raise ValueError(f"EngineSpec {self.name!r}: factory must be callable")
        for field_name in ("max_queue", "max_batch", "concurrency"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"EngineSpec {self.name!r}: {field_name} must be an int >= 1, got {value!r}")
        if isinstance(self.nice, bool) or not isinstance(self.nice, int) or not 0 <= self.nice <= 19:
            raise ValueError(f"EngineSpec {self.name!r}: nice must be an int in 0..19, got {self.nice!r}")
        if self.batch_window_ms < 0:
            raise ValueError(
                f"EngineSpec {self.name!r}: batch_window_ms must be >= 0, got {self.batch_window_ms!r}"
            )
        if self.capacity is not None and (not isinstance(self.capacity, int) or self.capacity < 1):
            raise ValueError(
                f"EngineSpec {self.name!r}: capacity must be None or an int >= 1, got {self.capacity!r}"
            )


def run_each(requests: list[Any], handle: Callable[[Any], Any], *, kind: type | None = None) -> list[Any]:
    """``run_batch`` for engines that serve requests one at a time: ``handle(request)`` for each, in order, with
    a failure (or a request that is not a ``kind``) becoming that request's ``Exception`` result."""
    results: list[Any] = []
    for request in requests:
        try:
            if kind is not None and not isinstance(request, kind):
                raise TypeError(f"expected a {kind.__name__}, got {type(request).__name__}")
            results.append(handle(request))
        except Exception as exc:
            results.append(exc)
    return results


def deliver_early(index: int, result: Any) -> None:
    """Hand ``result`` (a result or an ``Exception`` instance) of request ``index`` of the batch this thread runs
    to its caller now, before ``run_batch`` returns (see :class:`Engine`). Outside a worker's batch (an engine
    called directly) it does nothing."""
    deliver = _early_results.get()
    if deliver is not None:
        deliver(index, result)


@contextmanager
def early_results(deliver: Callable[[int, Any], object]) -> Iterator[None]:
    """Within the block, :func:`deliver_early` in this thread calls ``deliver(index, result)`` (the worker's side)."""
    token = _early_results.set(deliver)
    try:
        yield
    finally:
        _early_results.reset(token)
