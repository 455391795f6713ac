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
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from rtc_agent.errors import AgentError, AtCapacity, EngineError
from rtc_agent.metrics import Metrics
from rtc_agent.worker.engine import Engine, EngineSpec
from rtc_agent.worker.priority import PriorityGate

logger = logging.getLogger("rtc_agent.worker")

__all__ = ["UnknownEngine", "Worker"]


class UnknownEngine(AgentError, KeyError):
    """No engine of that name is registered (``code="unknown_engine"``); also a ``KeyError``."""

    type = "invalid_request_error"
    code = "unknown_engine"
    status = 404

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


def _closed_error(name: str) -> EngineError:
    return EngineError(f"engine {name!r}: the worker is closed", code="worker_closed")


def _wrap(name: str, exc: BaseException) -> EngineError:
    """A fresh ``EngineError`` for one request, with ``exc`` as its ``__cause__``.

    An ``EngineError`` raised by the engine keeps its code and message (e.g. a remote engine's
    ``engine_timeout``); anything else becomes ``code="engine_error"``.
    """
    if isinstance(exc, EngineError):
        err = EngineError(exc.message, code=exc.code, status=exc.status, retry_after=exc.retry_after)
    else:
        err = EngineError(f"engine {name!r} failed: {type(exc).__name__}: {exc}", code="engine_error")
    err.__cause__ = exc
    return err


def _close_quietly(name: str, engine: Any) -> None:
    close = getattr(engine, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:
        logger.exception("engine %s: close failed", name)


def _run_in_thread(engine: Engine, requests: list[Any], gate: PriorityGate,
                   name: str) -> tuple[Any, float, float]:
    """Runs in an engine thread: the outcome (result list or the exception raised) and the start/end times."""
    start = time.monotonic()
    try:
        with gate.running(name):
            outcome: Any = engine.run_batch(requests)
    except Exception as exc:
        outcome = exc
    return outcome, start, time.monotonic()


@dataclass(slots=True)
class _Pending:
    """One queued request: its payload, the caller's future and when it was queued (``time.monotonic``)."""

    request: Any
    future: asyncio.Future[Any]
    enqueued: float


class _RequestQueue:
    """A bounded queue of pending requests with a single consumer (the dispatcher): urgent requests (a request
    whose ``urgent`` attribute is true: a result a person is waiting for, such as a caption's final decode) come
    out before the others, each kind in arrival order.

    Requests whose caller has gone (future done: cancelled or timed out) are skipped by ``get`` and purged
    when the queue is full, so abandoned requests never hold queue slots or reach the engine.
    """

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._urgent: deque[_Pending] = deque()
        self._items: deque[_Pending] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._urgent) + len(self._items)

    def _all(self) -> Iterator[_Pending]:
        yield from self._urgent
        yield from self._items

    def live(self) -> int:
        """Requests still waiting for a caller."""
        return sum(1 for p in self._all() if not p.future.done())

    def oldest_age(self, now: float) -> float:
        """Seconds the oldest live request has waited (0.0 when none)."""
        ages = [now - p.enqueued for p in self._all() if not p.future.done()]
        return max(0.0, max(ages)) if ages else 0.0

    def put_nowait(self, pending: _Pending) -> bool:
        """Queue ``pending``; False when the queue is full of live requests."""
        if len(self) >= self.maxsize:
            self._urgent = deque(p for p in self._urgent if not p.future.done())
            self._items = deque(p for p in self._items if not p.future.done())
            if len(self) >= self.maxsize:
                return False
        (self._urgent if getattr(pending.request, "urgent", False) else self._items).append(pending)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        return True

    def get_nowait(self) -> _Pending | None:
        """The oldest live urgent request, else the oldest live other one, or None."""
        for items in (self._urgent, self._items):
            while items:
                pending = items.popleft()
                if not pending.future.done():
                    return pending
        return None

    async def get(self, timeout: float | None = None) -> _Pending | None:
        """The next live request (see :meth:`get_nowait`), waiting up to ``timeout`` seconds (forever if None);
        None on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            pending = self.get_nowait()
            if pending is not None:
                return pending
            if deadline is not None and loop.time() >= deadline:
                return None
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiter = waiter
            handle = None
            if deadline is not None:
                handle = loop.call_at(deadline, lambda w=waiter: w.done() or w.set_result(None))
            try:
                await waiter
            finally:
                self._waiter = None
                if handle is not None:
                    handle.cancel()

    def drain(self) -> list[_Pending]:
        """Remove and return everything queued."""
        items = list(self._all())
        self._urgent.clear()
        self._items.clear()
        return items


class _Slot:
    """Everything the worker keeps for one engine."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        self.engine: Engine | None = None
        self.load_task: asyncio.Task[Engine] | None = None
        self.progress = ""
        self.queue = _RequestQueue(spec.max_queue)
        self.executor = ThreadPoolExecutor(
            max_workers=spec.concurrency, thread_name_prefix=f"engine-{spec.name}"
        )
        self.run_slots = asyncio.Semaphore(spec.concurrency)
        self.lease_slots = asyncio.Semaphore(spec.capacity) if spec.capacity is not None else None
        self.dispatcher: asyncio.Task[None] | None = None
        self.batches: set[asyncio.Task[None]] = set()
        self.in_flight = 0
        self.leases = 0
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
        self.leases_done = 0
        self.lease_time_total = 0.0

    def mean_run(self) -> float | None:
        return self.run_time_total / self.batch_count if self.batch_count else None


class Worker:
    """Schedules model calls of all sessions onto registered engines. See the module docstring.

    One worker belongs to one event loop: its dispatchers and load tasks are created lazily on the loop that
    first calls it. ``metrics`` defaults to a private :class:`Metrics`.
    """

    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self._slots: dict[str, _Slot] = {}
        self._closed = False
        self.priority = PriorityGate()

    # registration -------------------------------------------------------------------------------------------

    def add(self, spec: EngineSpec) -> None:
        """Register an engine (not loaded yet). A duplicate name raises ``ValueError``."""
        if self._closed:
            raise RuntimeError("the worker is closed")
        if spec.name in self._slots:
            raise ValueError(f"engine {spec.name!r} is already registered")
        self._slots[spec.name] = _Slot(spec)
        self.metrics.engine_queue_depth.labels(engine=spec.name).set(0)

    def names(self) -> list[str]:
        """Registered engine names, in registration order."""
        return list(self._slots)

    def _slot(self, name: str) -> _Slot:
        try:
            return self._slots[name]
        except KeyError:
            known = ", ".join(self._slots) or "none"
            raise UnknownEngine(f"unknown engine {name!r} (registered: {known})") from None

    # loading ------------------------------------------------------------------------------------------------

    async def load(self, name: str) -> Engine:
        """The loaded engine ``name``, loading it first if needed.

        The factory and ``Engine.load`` run once in the engine's thread; concurrent callers share that one
        load and later calls return the same instance. Progress messages are logged on ``rtc_agent.worker``
        with the engine name and the elapsed time. A failed load raises
        ``EngineError(code="engine_load_failed")`` (the original as ``__cause__``) and is retried by the next
        call. Cancelling a caller does not cancel the shared load.
        """
        slot = self._slot(name)
        if slot.engine is not None:
            return slot.engine
        if self._closed:
            raise _closed_error(name)
        if slot.load_task is None:
            task = asyncio.get_running_loop().create_task(
                self._load(slot), name=f"rtc_agent.worker.load.{name}"
            )
            # the outcome is always consumed here, so an abandoned load never logs "exception never retrieved"
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            slot.load_task = task
        task = slot.load_task
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() and task.cancelled():  # the load itself was cancelled (by close), not this caller
                raise _closed_error(name) from None
            raise
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(
                f"engine {name!r} failed to load: {type(exc).__name__}: {exc}", code="engine_load_failed"
            ) from exc

    async def _load(self, slot: _Slot) -> Engine:
        name = slot.spec.name
        start = time.monotonic()
        logger.info("engine %s: loading", name)

        def progress(message: str) -> None:
            slot.progress = message
            logger.info("engine %s: %s (%.1f s)", name, message, time.monotonic() - start)

        def build() -> Engine:
            engine = slot.spec.factory()
            try:
                engine.load(progress)
            except BaseException:
                _close_quietly(name, engine)
                raise
            # after loading: a warm-up at load time runs outside any batch and need not step aside
            if slot.spec.yields_to and hasattr(engine, "checkpoint"):
                checkpoint, step_done = self.priority.step_hooks(slot.spec.yields_to, slot.spec.yield_max_s)
                engine.checkpoint = checkpoint  # type: ignore[attr-defined]
                if hasattr(engine, "step_done"):
                    engine.step_done = step_done  # type: ignore[attr-defined]
            if self._closed:  # closed while loading: nobody will close it later
                _close_quietly(name, engine)
                raise _closed_error(name)
            return engine

        try:
            engine = await asyncio.get_running_loop().run_in_executor(slot.executor, build)
        except BaseException as exc:
            slot.load_task = None  # the next caller retries
            slot.progress = f"load failed: {type(exc).__name__}: {exc}"
            if not isinstance(exc, asyncio.CancelledError):
                logger.error("engine %s: load failed after %.1f s: %r", name, time.monotonic() - start, exc)
            raise
        slot.engine = engine
        slot.progress = "loaded"
        logger.info("engine %s: loaded in %.1f s", name, time.monotonic() - start)
        return engine

    async def load_all(self) -> None:
        """Load every registered engine concurrently; after all finished, raise the first failure."""
        results = await asyncio.gather(*(self.load(n) for n in self._slots), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    # calls --------------------------------------------------------------------------------------------------

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
        slot = self._slot(name)
        if self._closed:
            raise _closed_error(name)
        loop = asyncio.get_running_loop()
        pending = _Pending(request, loop.create_future(), time.monotonic())
        if not slot.queue.put_nowait(pending):
            slot.rejected += 1
            raise AtCapacity(
                f"engine {name!r} is overloaded ({slot.spec.max_queue} requests queued)",
                code="engine_overloaded", retry_after=self._overload_retry_after(slot),
            )
        slot.calls += 1
        self._set_depth(slot)
        self._ensure_dispatcher(slot)
        if timeout is None:
            return await pending.future
        try:
            async with asyncio.timeout(timeout):
                return await pending.future
        except TimeoutError:
            slot.timeouts += 1
            slot.errors += 1
            raise EngineError(
                f"engine {name!r} did not answer within {timeout:.3g} s", code="engine_timeout"
            ) from None

    def _overload_retry_after(self, slot: _Slot) -> float:
        """Seconds until the queue has likely drained: queued batches times the mean batch run time."""
        mean_run = slot.mean_run() or 1.0
        batches_ahead = len(slot.queue) / (slot.spec.max_batch * slot.spec.concurrency) + 1
        return round(max(0.1, batches_ahead * mean_run), 2)

    def _set_depth(self, slot: _Slot) -> None:
        self.metrics.engine_queue_depth.labels(engine=slot.spec.name).set(slot.queue.live())

    def _ensure_dispatcher(self, slot: _Slot) -> None:
        if slot.dispatcher is None or slot.dispatcher.done():
            slot.dispatcher = asyncio.get_running_loop().create_task(
                self._dispatch(slot), name=f"rtc_agent.worker.dispatch.{slot.spec.name}"
            )

    def _fail(self, slot: _Slot, items: list[_Pending], make: Callable[[], EngineError]) -> None:
        for pending in items:
            if not pending.future.done():
                pending.future.set_exception(make())
                slot.errors += 1

    async def _dispatch(self, slot: _Slot) -> None:
        """The engine's dispatcher: forms batches and starts them, at most ``concurrency`` at once. Never
        raises except when cancelled (by ``close``), and then fails the requests it was holding."""
        name = slot.spec.name
        loop = asyncio.get_running_loop()
        while True:
            # wait for a free thread first: meanwhile requests pile up in the queue and form a fuller batch
            await slot.run_slots.acquire()
            batch: list[_Pending] = []
            started = False
            try:
                await self._collect(slot, batch)
                batch = [p for p in batch if not p.future.done()]
                if batch:
                    task = loop.create_task(self._run(slot, batch), name=f"rtc_agent.worker.batch.{name}")
                    slot.batches.add(task)
                    task.add_done_callback(slot.batches.discard)
                    started = True
            except asyncio.CancelledError:
                self._fail(slot, batch, lambda: _closed_error(name))
                raise
            except Exception as exc:  # a bug here must not kill the dispatcher
                logger.exception("engine %s: dispatcher error", name)
                self._fail(slot, batch, lambda exc=exc: _wrap(name, exc))
            finally:
                if not started:
                    slot.run_slots.release()

    async def _collect(self, slot: _Slot, batch: list[_Pending]) -> None:
        """Fill ``batch`` (in place, so a cancelled dispatcher still sees what it took) and make sure the
        engine is loaded. A failed load fails the batch and everything queued behind it."""
        spec = slot.spec
        first = await slot.queue.get()
        assert first is not None
        batch.append(first)
        if spec.max_batch > 1:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + spec.batch_window_ms / 1000.0
            while len(batch) < spec.max_batch:
                nxt = slot.queue.get_nowait()
                if nxt is None:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    nxt = await slot.queue.get(remaining)
                    if nxt is None:
                        break
                batch.append(nxt)
        self._set_depth(slot)
        if slot.engine is None:
            try:
                await self.load(spec.name)
            except EngineError as exc:
                items = batch + slot.queue.drain()
                batch.clear()
                self._fail(slot, items, lambda exc=exc: _wrap(spec.name, exc))
                self._set_depth(slot)

    async def _run(self, slot: _Slot, batch: list[_Pending]) -> None:
        """Run one batch in the engine's thread pool, record metrics and deliver each result to its caller."""
        name = slot.spec.name
        engine = slot.engine
        assert engine is not None
        n = len(batch)
        slot.in_flight += n
        try:
            outcome, start, end = await asyncio.get_running_loop().run_in_executor(
                slot.executor, _run_in_thread, engine, [p.request for p in batch], self.priority, name
            )
        except asyncio.CancelledError:
            self._fail(slot, batch, lambda: _closed_error(name))
            raise
        except Exception as exc:  # e.g. the executor was shut down
            self._fail(slot, batch, lambda exc=exc: _wrap(name, exc))
            return
        finally:
            slot.in_flight -= n
            slot.run_slots.release()

        run_time = end - start
        slot.batch_count += 1
        slot.batch_items += n
        slot.run_time_total += run_time
        labels = {"engine": name}
        self.metrics.engine_run_time.labels(**labels).observe(run_time)
        self.metrics.engine_batch_size.labels(**labels).observe(n)
        delay_hist = self.metrics.engine_queue_delay.labels(**labels)
        for pending in batch:
            delay = max(0.0, start - pending.enqueued)
            slot.queue_delay_total += delay
            slot.recent_delays.append((start, delay))
            delay_hist.observe(delay)

        if isinstance(outcome, BaseException):
            logger.warning("engine %s: batch of %d failed: %r", name, n, outcome)
            self._fail(slot, batch, lambda: _wrap(name, outcome))
            return
        if not isinstance(outcome, list | tuple) or len(outcome) != n:
            got = len(outcome) if isinstance(outcome, list | tuple) else type(outcome).__name__
            bad = EngineError(f"engine {name!r} returned {got} results for {n} requests", code="engine_error")
            logger.warning("%s", bad.message)
            self._fail(slot, batch, lambda: _wrap(name, bad))
            return
        failed = 0
        for pending, result in zip(batch, outcome, strict=True):
            if pending.future.done():  # the caller went away (cancelled or timed out)
                continue
            if isinstance(result, BaseException):
                failed += 1
                slot.errors += 1
                pending.future.set_exception(_wrap(name, result))
            else:
                pending.future.set_result(result)
        if failed:
            logger.warning("engine %s: %d of %d requests in a batch failed", name, failed, n)

    # leases -------------------------------------------------------------------------------------------------

    def lease(self, name: str, *, wait: float = 0.0) -> AbstractAsyncContextManager[None]:
        """Hold one of the engine's ``capacity`` slots for the ``async with`` block (None: unlimited).

        Waits up to ``wait`` seconds for a free slot, then raises ``AtCapacity(code="engine_capacity")``
        with ``retry_after`` estimated from how long past leases were held (1-60 s). Waiters are served first
        come, first served. Leases gate sessions, not calls: a holder still uses :meth:`call` or the loaded
        engine. Raises ``UnknownEngine`` at once for an unknown name.
        """
        return self._lease(self._slot(name), wait)

    @asynccontextmanager
    async def _lease(self, slot: _Slot, wait: float) -> AsyncIterator[None]:
        name = slot.spec.name
        if self._closed:
            raise _closed_error(name)
        sem = slot.lease_slots
        if sem is not None:
            if wait <= 0:
                if sem.locked():
                    raise self._capacity_error(slot)
                await sem.acquire()  # free: returns without suspending
            else:
                try:
                    async with asyncio.timeout(wait):
                        await sem.acquire()
                except TimeoutError:
                    raise self._capacity_error(slot) from None
        slot.leases += 1
        start = time.monotonic()
        try:
            yield
        finally:
            slot.leases -= 1
            slot.leases_done += 1
            slot.lease_time_total += time.monotonic() - start
            if sem is not None:
                sem.release()

    def _capacity_error(self, slot: _Slot) -> AtCapacity:
        mean_hold = slot.lease_time_total / slot.leases_done if slot.leases_done else 5.0
        return AtCapacity(
            f"engine {slot.spec.name!r} is at capacity ({slot.spec.capacity} sessions)",
            code="engine_capacity", retry_after=round(min(60.0, max(1.0, mean_hold)), 1),
        )

    # introspection and shutdown -----------------------------------------------------------------------------

    def recent_queue_delays_ms(self, seconds: float) -> dict[str, float]:
        """Per engine, the longest time (ms) a request waited in its queue over the last ``seconds``, counting
        requests still waiting now (a stalled engine shows up before any batch completes)."""
        now = time.monotonic()
        out: dict[str, float] = {}
        for name, slot in self._slots.items():
            taken = [d for at, d in slot.recent_delays if now - at <= seconds]
            waiting = slot.queue.oldest_age(now)
            out[name] = round(1000 * max([*taken, waiting, 0.0]), 3)
        return out

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per engine: ``loaded``, ``loading``, ``progress``, ``queue_depth``, ``max_queue``, ``in_flight``,
        ``leases``, ``capacity``, ``calls`` (accepted), ``errors``, ``rejected`` (overloaded), ``timeouts``,
        ``batches``, ``mean_batch_size``, ``mean_queue_delay_ms``, ``mean_run_ms``. JSON-able."""
        out: dict[str, dict[str, Any]] = {}
        for name, s in self._slots.items():
            out[name] = {
                "loaded": s.engine is not None,
                "loading": s.load_task is not None and not s.load_task.done(),
                "progress": s.progress,
                "queue_depth": s.queue.live(),
                "max_queue": s.spec.max_queue,
                "in_flight": s.in_flight,
                "leases": s.leases,
                "capacity": s.spec.capacity,
                "calls": s.calls,
                "errors": s.errors,
                "rejected": s.rejected,
                "timeouts": s.timeouts,
                "batches": s.batch_count,
                "mean_batch_size": round(s.batch_items / s.batch_count, 3) if s.batch_count else 0.0,
                "mean_queue_delay_ms": (
                    round(1000 * s.queue_delay_total / s.batch_items, 3) if s.batch_items else 0.0
                ),
                "mean_run_ms": round(1000 * s.run_time_total / s.batch_count, 3) if s.batch_count else 0.0,
            }
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
        slots = list(self._slots.values())

        dispatchers = [s.dispatcher for s in slots if s.dispatcher is not None]
        for task in dispatchers:
            task.cancel()
        await asyncio.gather(*dispatchers, return_exceptions=True)
        for s in slots:
            name = s.spec.name
            self._fail(s, s.queue.drain(), lambda name=name: _closed_error(name))
            self._set_depth(s)

        running: list[asyncio.Task[Any]] = [t for s in slots for t in s.batches]
        running += [s.load_task for s in slots if s.load_task is not None]
        if running:
            _, late = await asyncio.wait(running, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

        loop = asyncio.get_running_loop()

        async def close_engine(s: _Slot) -> None:
            if s.engine is None:
                return
            try:
                closing = loop.run_in_executor(s.executor, _close_quietly, s.spec.name, s.engine)
                await asyncio.wait_for(closing, grace)
            except TimeoutError:
                logger.warning("engine %s: close did not finish within %.1f s", s.spec.name, grace)

        await asyncio.gather(*(close_engine(s) for s in slots))
        for s in slots:
            s.executor.shutdown(wait=False, cancel_futures=True)
        logger.info("worker closed (%d engines)", len(slots))
