"""The session worker: owns loaded engines and schedules every model call off the event loop.

One :class:`Worker` per server (per event loop). For each registered engine it keeps:

- a bounded request queue (``EngineSpec.max_queue``); a call that finds it full fails at once with
  ``AtCapacity(code="engine_overloaded")``, so overload turns into fast, clear errors, not growing latency;
  requests with a true ``urgent`` attribute (a caption's final decode) are taken before the others;
- one dispatcher task that takes requests from that queue, merges requests from any sessions into batches
  of up to ``max_batch`` (waiting up to ``batch_window_ms`` for a batch to fill) and starts at most
  ``concurrency`` batches at once;
- one ``ThreadPoolExecutor`` with ``concurrency`` threads where ``load``, ``run_batch`` and ``close`` run
  (native engines such as CTranslate2 and torch release the GIL there): nothing heavy runs on the loop;
- lease slots (``capacity``) for engines that hold per-session state, e.g. one realtime VLM session per
  model instance.

A failing engine call fails only its own requests (``EngineError``); the worker keeps serving. There is no
unbounded queue anywhere: callers wait on futures that sit in the bounded queue or in a running batch.

The worker is the registry of engines; each engine's part lives in its :class:`~rtc_agent.worker.lane.EngineLane`
(queue, dispatcher, batches, counters), :class:`~rtc_agent.worker.loader.EngineLoader` and
:class:`~rtc_agent.worker.leases.EngineLeases`. An engine registered with ``EngineSpec.shares`` (the embedded text
translator over the embedded LLM) has no lane of its own: it runs on the lane of the engine it names, on that
engine's loaded model (:meth:`Worker.host_of` tells which), and keeps its own name, queue bound and counters.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractAsyncContextManager
from typing import Any

from rtc_agent.metrics import Metrics
from rtc_agent.worker.engine import Engine, EngineSpec
from rtc_agent.worker.failures import UnknownEngine
from rtc_agent.worker.lane import EngineLane
from rtc_agent.worker.priority import PriorityGate

logger = logging.getLogger("rtc_agent.worker")

__all__ = ["Worker"]


class Worker:
    """Schedules model calls of all sessions onto registered engines. See the module docstring.

    One worker belongs to one event loop: its dispatchers and load tasks are created lazily on the loop that
    first calls it. ``metrics`` defaults to a private :class:`Metrics`. Each engine's queue, dispatcher,
    batches and counters live in its :class:`~rtc_agent.worker.lane.EngineLane`.
    """

    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self._lanes: dict[str, EngineLane] = {}
        self._views: dict[str, str] = {}  # engine sharing a lane -> the lane's engine
        self._names: list[str] = []
        self._closed = False
        self.priority = PriorityGate()
        #: the captions' decode plan from the measured speed (:class:`~rtc_agent.worker.decode_plan.DecodePlanner`),
        #: set by the server; None: the apps use their settings and defaults
        self.decode_plans: Any = None

    # registration -------------------------------------------------------------------------------------------

    def add(self, spec: EngineSpec) -> None:
        """Register an engine (not loaded yet): on a lane of its own, or on the lane of ``spec.shares`` when that
        engine is registered (when it shares a lane itself: on that lane; see :class:`EngineSpec`). A duplicate
        name raises ``ValueError``."""
        if self._closed:
            raise RuntimeError("the worker is closed")
        if spec.name in self._names:
            raise ValueError(f"engine {spec.name!r} is already registered")
        host = self._views.get(spec.shares, spec.shares) if spec.shares is not None else None
        if host is not None and host in self._lanes:
            self._lanes[host].add_view(spec)
            self._views[spec.name] = host
        else:
            self._lanes[spec.name] = EngineLane(spec, self.metrics, self.priority, lambda: self._closed)
        self._names.append(spec.name)
        self.metrics.engine_queue_depth.labels(engine=spec.name).set(0)

    def names(self) -> list[str]:
        """Registered engine names, in registration order (those sharing a lane too)."""
        return list(self._names)

    def host_of(self, name: str) -> str:
        """The engine whose lane and loaded model ``name`` runs on: ``name`` itself, or the engine it shares."""
        self._route(name)
        return self._views.get(name, name)

    def _route(self, name: str) -> tuple[EngineLane, str | None]:
        """The lane of engine ``name`` and its view name there (None: the lane's own engine)."""
        if name in self._views:
            return self._lanes[self._views[name]], name
        try:
            return self._lanes[name], None
        except KeyError:
            known = ", ".join(self._names) or "none"
            raise UnknownEngine(f"unknown engine {name!r} (registered: {known})") from None

    # loading ------------------------------------------------------------------------------------------------

    async def load(self, name: str) -> Engine:
        """The loaded engine ``name``, loading it first if needed.

        The factory and ``Engine.load`` run once in the engine's thread; concurrent callers share that one
        load and later calls return the same instance. Progress messages are logged on ``rtc_agent.worker``
        with the engine name and the elapsed time. A failed load raises
        ``EngineError(code="engine_load_failed")`` (the original as ``__cause__``) and is retried by the next
        call. Cancelling a caller does not cancel the shared load. Raises ``UnknownEngine`` for an unknown name.
        An engine sharing another's lane loads that engine and returns its own adapted engine.
        """
        lane, view = self._route(name)
        engine = await lane.loader.load()
        return engine if view is None else lane.view_engine(view)

    async def load_all(self) -> None:
        """Load every registered engine concurrently (those sharing a lane with their host); after all finished,
        raise the first failure."""
        results = await asyncio.gather(*(self.load(n) for n in self._lanes), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    # calls and leases ---------------------------------------------------------------------------------------

    async def call(self, name: str, request: Any, *, timeout: float | None = None) -> Any:
        """Run ``request`` on engine ``name`` (batched with other callers) and return its result.

        Loads the engine if needed. ``timeout`` (seconds) covers queueing, loading and running.

        Raises:
            UnknownEngine: ``code="unknown_engine"``.
            AtCapacity: ``code="engine_overloaded"`` at once when the queue is full, with an estimated
                ``retry_after`` (seconds).
            EngineError: ``engine_error`` when the batch raised or this request's result is an ``Exception``
                (the original as ``__cause__``; an ``EngineError`` from the engine keeps its code);
                ``engine_timeout``; ``engine_load_failed``; ``worker_closed``.

        Cancelling the caller removes its request (if not started yet) or drops its result; other requests in
        the same batch are unaffected.
        """
        lane, view = self._route(name)
        return await lane.call(request, timeout, view)

    def lease(self, name: str, *, wait: float = 0.0) -> AbstractAsyncContextManager[None]:
        """Hold one of the engine's ``capacity`` slots for the ``async with`` block (None: unlimited).

        Waits up to ``wait`` seconds for a free slot, then raises ``AtCapacity(code="engine_capacity")``
        with ``retry_after`` estimated from how long past leases were held (1-60 s). Waiters are served first
        come, first served. Leases gate sessions, not calls: a holder still uses :meth:`call` or the loaded
        engine. Raises ``UnknownEngine`` at once for an unknown name. An engine sharing another's lane holds
        that engine's slots.
        """
        return self._route(name)[0].leases.hold(wait)

    # introspection and shutdown -----------------------------------------------------------------------------

    def recent_queue_delays_ms(self, seconds: float) -> dict[str, float]:
        """Per engine, the longest time (ms) a request waited in its queue over the last ``seconds``, counting
        requests still waiting now (a stalled engine shows up before any batch completes). Engines sharing a lane
        report that lane's (shared) queue."""
        return {name: self._route(name)[0].recent_queue_delay_ms(seconds) for name in self._names}

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per engine: ``loaded``, ``loading``, ``progress``, ``queue_depth``, ``max_queue``, ``in_flight``,
        ``leases``, ``capacity``, ``calls`` (accepted), ``errors``, ``rejected`` (overloaded), ``timeouts``,
        ``batches``, ``mean_batch_size``, ``mean_queue_delay_ms``, ``mean_run_ms``; a loaded engine with
        ``runtime_stats()`` also ``runtime`` (what it measures of itself); an engine sharing another's lane also
        ``shares`` (that engine's name), loads as it, and counts only its own requests. JSON-able."""
        out: dict[str, dict[str, Any]] = {}
        for name in self._names:
            lane, view = self._route(name)
            out[name] = lane.stats() if view is None else lane.view_stats(view)
        return out

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self, grace: float = 5.0) -> None:
        """Stop the worker: stop dispatchers, fail queued requests with ``EngineError(code="worker_closed")``,
        give running batches and loads up to ``grace`` seconds (then fail their callers too), close the
        engines in their threads and shut the thread pools down. Later calls raise ``worker_closed``.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        lanes = list(self._lanes.values())

        dispatchers = [lane.dispatcher for lane in lanes if lane.dispatcher is not None]
        for task in dispatchers:
            task.cancel()
        await asyncio.gather(*dispatchers, return_exceptions=True)
        for lane in lanes:
            lane.fail_queued()

        running: list[asyncio.Task[Any]] = [t for lane in lanes for t in lane.batches]
        running += [lane.loader.task for lane in lanes if lane.loader.task is not None]
        if running:
            _, late = await asyncio.wait(running, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

        await asyncio.gather(*(lane.loader.close(grace) for lane in lanes))
        for lane in lanes:
            lane.executor.shutdown(wait=False, cancel_futures=True)
        logger.info("worker closed (%d engines)", len(lanes))
