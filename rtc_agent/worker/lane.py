"""One engine's lane through the worker: its bounded queue, the dispatcher that forms batches, the batches
running in its thread pool, and its counters. See :mod:`rtc_agent.worker.worker` for the contract.

Engines registered with ``EngineSpec.shares`` run on the lane of the engine they name (:meth:`EngineLane.add_view`):
their requests wait in the same queue (urgent ones first) and run in the same threads on the same loaded model,
each batch holding the requests of one engine only (a batch that starts with a view's request takes up to that
view's ``max_batch`` of its requests, within its ``batch_window_ms``); their counters are their own
(:class:`~rtc_agent.worker.views.EngineView`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rtc_agent.errors import AtCapacity, EngineError
from rtc_agent.metrics import Metrics
from rtc_agent.worker.engine import Engine, EngineSpec, early_results
from rtc_agent.worker.failures import closed_error, engine_failure
from rtc_agent.worker.leases import EngineLeases
from rtc_agent.worker.loader import EngineLoader
from rtc_agent.worker.priority import PriorityGate, lower_thread_priority
from rtc_agent.worker.request_queue import ANY, PendingRequest, RequestQueue
from rtc_agent.worker.views import EngineView, hooks_of, stats_row

logger = logging.getLogger("rtc_agent.worker")


def _run_in_thread(engine: Engine, requests: list[Any], gate: PriorityGate, name: str,
                   host: Engine | None = None, hooks: Any = None,
                   deliver: Callable[[int, Any], object] | None = None) -> tuple[Any, float, float]:
    """Runs in an engine thread: the outcome (result list or the exception raised) and the start/end times.
    ``name`` (the engine's own, a view's included: a translation on the LLM's lane is ``mt``) is marked busy in
    ``gate`` meanwhile, for the engines that yield to it. For a view, ``host`` is the lane's engine and ``hooks``
    the view's step hooks (:func:`hooks_of`). ``deliver`` receives what the engine hands on early
    (:func:`~rtc_agent.worker.engine.deliver_early`)."""
    start = time.monotonic()
    try:
        with gate.running(name), \
                hooks_of(host, hooks) if host is not None else contextlib.nullcontext(), \
                early_results(deliver) if deliver is not None else contextlib.nullcontext():
            outcome: Any = engine.run_batch(requests)
    except Exception as exc:
        outcome = exc
    return outcome, start, time.monotonic()


class EngineLane:
    """Everything the worker keeps for one engine, and the scheduling of its calls.

    It owns the engine's thread pool (``concurrency`` threads), shared with its :class:`EngineLoader`
    (``loader``); ``leases`` are its :class:`EngineLeases`. ``is_closed`` tells whether the worker has closed.
    The dispatcher task starts lazily on the loop of the first :meth:`call`.
    """

    def __init__(self, spec: EngineSpec, metrics: Metrics, priority: PriorityGate,
                 is_closed: Callable[[], bool]) -> None:
        self.spec = spec
        self.executor = ThreadPoolExecutor(max_workers=spec.concurrency, thread_name_prefix=f"engine-{spec.name}",
                                           initializer=lower_thread_priority, initargs=(spec.nice,))
        self.loader = EngineLoader(spec, self.executor, priority, is_closed)
        self.leases = EngineLeases(spec, is_closed)
        self.queue = RequestQueue(spec.max_queue)
        self.run_slots = asyncio.Semaphore(spec.concurrency)
        self.dispatcher: asyncio.Task[None] | None = None
        self.batches: set[asyncio.Task[None]] = set()
        self.in_flight = 0
        # counters
        self.calls = 0
        self.errors = 0
        self.rejected = 0
        self.timeouts = 0
        self.batch_count = 0
        self.batch_items = 0
        self.queue_delay_total = 0.0
        self.recent_delays: deque[tuple[float, float]] = deque(maxlen=256)  # (taken at, delay) per request
        self.run_time_total = 0.0
        self.views: dict[str, EngineView] = {}
        self._metrics = metrics
        self._priority = priority
        self._is_closed = is_closed

    def mean_run(self) -> float | None:
        """Mean seconds a batch ran, None before the first batch."""
        return self.run_time_total / self.batch_count if self.batch_count else None

    def add_view(self, spec: EngineSpec) -> None:
        """Serve the engine of ``spec`` (``spec.shares`` names this lane's) on this lane; the queue grows by its
        ``max_queue``, which bounds its requests."""
        self.views[spec.name] = EngineView(spec, self._priority, self.spec.concurrency)
        self.queue.maxsize += spec.max_queue

    def view_engine(self, view: str) -> Engine:
        """The engine ``view`` over this lane's loaded engine (load it first)."""
        assert self.loader.engine is not None
        return self.views[view].engine_of(self.loader.engine)

    def _owner(self, view: str | None) -> EngineLane | EngineView:
        """Whose counters a request of ``view`` moves: this lane's (None) or the view's."""
        return self if view is None else self.views[view]

    # calls --------------------------------------------------------------------------------------------------

    async def call(self, request: Any, timeout: float | None, view: str | None = None) -> Any:
        """Queue ``request`` (for the engine ``view`` sharing this lane; None: the lane's own), wait for its
        result and return it (see :meth:`Worker.call`)."""
        owner = self._owner(view)
        spec = self.spec if view is None else self.views[view].spec
        name = spec.name
        if self._is_closed():
            raise closed_error(name)
        loop = asyncio.get_running_loop()
        pending = PendingRequest(request, loop.create_future(), time.monotonic(), view=view, urgent=spec.urgent,
                                 background=spec.background)
        own_full = bool(self.views) and self.queue.live_of(view) >= spec.max_queue  # each its own share
        if own_full or not self.queue.put_nowait(pending):
            owner.rejected += 1
            raise AtCapacity(
                f"engine {name!r} is overloaded ({spec.max_queue} requests queued)",
                code="engine_overloaded", retry_after=self._overload_retry_after(),
            )
        owner.calls += 1
        self.set_depth()
        self._ensure_dispatcher()
        if timeout is None:
            return await pending.future
        try:
            async with asyncio.timeout(timeout):
                return await pending.future
        except TimeoutError:
            owner.timeouts += 1
            owner.errors += 1
            raise EngineError(
                f"engine {name!r} did not answer within {timeout:.3g} s", code="engine_timeout"
            ) from None

    def _overload_retry_after(self) -> float:
        """Seconds until the queue has likely drained: queued batches times the mean batch run time."""
        mean_run = self.mean_run() or 1.0
        batches_ahead = len(self.queue) / (self.spec.max_batch * self.spec.concurrency) + 1
        return round(max(0.1, batches_ahead * mean_run), 2)

    def set_depth(self) -> None:
        """Publish the live queue depth of this lane's engine and of each view as the ``engine_queue_depth``
        metric."""
        self._metrics.engine_queue_depth.labels(engine=self.spec.name).set(self.queue.live_of(None))
        for name in self.views:
            self._metrics.engine_queue_depth.labels(engine=name).set(self.queue.live_of(name))

    def _ensure_dispatcher(self) -> None:
        if self.dispatcher is None or self.dispatcher.done():
            self.dispatcher = asyncio.get_running_loop().create_task(
                self._dispatch(), name=f"rtc_agent.worker.dispatch.{self.spec.name}"
            )

    def fail(self, items: list[PendingRequest], make: Callable[[str], EngineError]) -> None:
        """Fail each request of ``items`` whose caller still waits with a fresh error from ``make(name)``, ``name``
        being the engine the request was for."""
        for pending in items:
            if not pending.future.done():
                pending.future.set_exception(make(self._name_of(pending.view)))
                self._owner(pending.view).errors += 1

    def _name_of(self, view: str | None) -> str:
        return self.spec.name if view is None else view

    def fail_queued(self) -> None:
        """Fail everything still queued with ``worker_closed``."""
        self.fail(self.queue.drain(), closed_error)
        self.set_depth()

    # dispatching --------------------------------------------------------------------------------------------

    async def _dispatch(self) -> None:
        """The engine's dispatcher: forms batches and starts them, at most ``concurrency`` at once. Never
        raises except when cancelled (by ``close``), and then fails the requests it was holding."""
        name = self.spec.name
        loop = asyncio.get_running_loop()
        while True:
            # wait for a free thread first: meanwhile requests pile up in the queue and form a fuller batch
            await self.run_slots.acquire()
            batch: list[PendingRequest] = []
            started = False
            try:
                await self._collect(batch)
                batch = [p for p in batch if not p.future.done()]
                if batch:
                    task = loop.create_task(self._run(batch), name=f"rtc_agent.worker.batch.{name}")
                    self.batches.add(task)
                    task.add_done_callback(self.batches.discard)
                    started = True
            except asyncio.CancelledError:
                self.fail(batch, closed_error)
                raise
            except Exception as exc:  # a bug here must not kill the dispatcher
                logger.exception("engine %s: dispatcher error", name)
                self.fail(batch, lambda who, exc=exc: engine_failure(who, exc))
            finally:
                if not started:
                    self.run_slots.release()

    async def _collect(self, batch: list[PendingRequest]) -> None:
        """Fill ``batch`` (in place, so a cancelled dispatcher still sees what it took) and make sure the
        engine is loaded. A failed load fails the batch and everything queued behind it."""
        first = await self.queue.get()
        assert first is not None
        batch.append(first)
        # a request of an engine sharing the lane is batched with that engine's own (its max_batch and window)
        spec, view = (self.spec, ANY) if first.view is None else (self.views[first.view].spec, first.view)
        if spec.max_batch > 1:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + spec.batch_window_ms / 1000.0
            while len(batch) < spec.max_batch:
                nxt = self.queue.get_nowait(view)
                if nxt is None:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    nxt = await self.queue.get(remaining, view)
                    if nxt is None:
                        break
                batch.append(nxt)
        self.set_depth()
        if self.loader.engine is None:
            try:
                await self.loader.load()
            except EngineError as exc:
                items = batch + self.queue.drain()
                batch.clear()
                self.fail(items, lambda who, exc=exc: engine_failure(who, exc))
                self.set_depth()

    async def _run(self, batch: list[PendingRequest]) -> None:
        """Run one batch in the engine's thread pool: the requests of each engine on the lane (the lane's own,
        then each view's) as one ``run_batch`` of that engine, one after the other."""
        groups: dict[str | None, list[PendingRequest]] = {}
        for pending in batch:
            groups.setdefault(pending.view, []).append(pending)
        try:
            for view, group in groups.items():
                await self._run_group(view, group)
        except asyncio.CancelledError:
            self.fail(batch, closed_error)
            raise
        finally:
            self.run_slots.release()

    async def _run_group(self, view: str | None, batch: list[PendingRequest]) -> None:
        """Run the requests of one engine (``view``; None: the lane's own), record metrics and deliver each
        result to its caller."""
        name = self._name_of(view)
        owner = self._owner(view)
        host = self.loader.engine
        assert host is not None
        engine = host if view is None else self.views[view].engine_of(host)
        hooks = None if view is None else self.views[view].hooks
        n = len(batch)
        owner.in_flight += n
        loop = asyncio.get_running_loop()

        def deliver(index: int, result: Any) -> None:  # in the engine thread
            if 0 <= index < n:
                loop.call_soon_threadsafe(self._settle, batch[index], result, owner, name)

        try:
            outcome, start, end = await loop.run_in_executor(
                self.executor, _run_in_thread, engine, [p.request for p in batch], self._priority, name,
                host if view is not None else None, hooks, deliver)
        except Exception as exc:  # e.g. the executor was shut down
            self.fail(batch, lambda who, exc=exc: engine_failure(who, exc))
            return
        finally:
            owner.in_flight -= n

        self._record(batch, start, end - start, owner, name)
        if isinstance(outcome, BaseException):
            logger.warning("engine %s: batch of %d failed: %r", name, n, outcome)
            self.fail(batch, lambda who: engine_failure(who, outcome))
            return
        if not isinstance(outcome, list | tuple) or len(outcome) != n:
            got = len(outcome) if isinstance(outcome, list | tuple) else type(outcome).__name__
            bad = EngineError(f"engine {name!r} returned {got} results for {n} requests", code="engine_error")
            logger.warning("%s", bad.message)
            self.fail(batch, lambda who: engine_failure(who, bad))
            return
        failed = sum(self._settle(p, result, owner, name) for p, result in zip(batch, outcome, strict=True))
        if failed:
            logger.warning("engine %s: %d of %d requests in a batch failed", name, failed, n)

    @staticmethod
    def _settle(pending: PendingRequest, result: Any, owner: EngineLane | EngineView, name: str) -> bool:
        """Hand ``result`` to the caller of ``pending`` unless it has one already (delivered early) or went away
        (cancelled, timed out); True when that failed the request."""
        if pending.future.done():
            return False
        if isinstance(result, BaseException):
            owner.errors += 1
            pending.future.set_exception(engine_failure(name, result))
            return True
        pending.future.set_result(result)
        return False

    def _record(self, batch: list[PendingRequest], start: float, run_time: float, owner: EngineLane | EngineView,
                name: str) -> None:
        """Count a batch of engine ``name`` that ran for ``run_time`` seconds from ``start``, in ``owner``'s
        counters and the metrics (the queue delays also in the lane's recent delays: the queue is shared)."""
        owner.batch_count += 1
        owner.batch_items += len(batch)
        owner.run_time_total += run_time
        labels = {"engine": name}
        self._metrics.engine_run_time.labels(**labels).observe(run_time)
        self._metrics.engine_batch_size.labels(**labels).observe(len(batch))
        delay_hist = self._metrics.engine_queue_delay.labels(**labels)
        for pending in batch:
            delay = max(0.0, start - pending.enqueued)
            owner.queue_delay_total += delay
            if not pending.background:  # (nobody waits for it: the lane's load is what others wait)
                self.recent_delays.append((start, delay))
            delay_hist.observe(delay)

    # introspection ------------------------------------------------------------------------------------------

    def recent_queue_delay_ms(self, seconds: float) -> float:
        """The longest time (ms) a request waited in the queue over the last ``seconds``, counting requests
        still waiting now (background requests not: nobody waits for them)."""
        now = time.monotonic()
        taken = [d for at, d in self.recent_delays if now - at <= seconds]
        waiting = self.queue.oldest_age(now)
        return round(1000 * max([*taken, waiting, 0.0]), 3)

    def stats(self) -> dict[str, Any]:
        """This engine's row of :meth:`Worker.stats`, with the loaded engine's ``runtime`` when it measures one."""
        row = self._counters_row()
        runtime = getattr(self.loader.engine, "runtime_stats", None)
        if callable(runtime):
            row["runtime"] = runtime()
        return row

    def view_stats(self, view: str) -> dict[str, Any]:
        """The row of :meth:`Worker.stats` for the engine ``view`` sharing this lane (the host's runtime is shown
        once, in the host's row)."""
        return self.views[view].stats(self._counters_row(), self.queue.live_of(view))

    def _counters_row(self) -> dict[str, Any]:
        return stats_row(self, loaded=self.loader.engine is not None, loading=self.loader.loading,
                         progress=self.loader.progress, queue_depth=self.queue.live_of(None),
                         leases=self.leases.held, capacity=self.spec.capacity)
