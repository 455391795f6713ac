"""Worker: batching, bounded queues, failures, timeouts, leases, loading, shutdown, threads and metrics."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from rtc_agent.errors import AgentError, AtCapacity, EngineError
from rtc_agent.metrics import Metrics
from rtc_agent.worker import EngineSpec, UnknownEngine, Worker


class FakeEngine:
    """Scripted engine: ``("ok", r)`` per request; ``"bad"`` fails that item, ``"boom"`` fails the batch.

    ``gate`` (a threading.Event) blocks each batch until set; ``started`` is set when a batch begins.
    """

    def __init__(self, *, gate: threading.Event | None = None, load_delay: float = 0.0,
                 barrier: threading.Barrier | None = None) -> None:
        self.gate = gate
        self.load_delay = load_delay
        self.barrier = barrier
        self.started = threading.Event()
        self.batches: list[list[Any]] = []
        self.threads: set[int] = set()
        self.load_threads: set[int] = set()
        self.closed = False

    def load(self, progress: Callable[[str], None]) -> None:
        self.load_threads.add(threading.get_ident())
        progress("loading weights 1/2")
        time.sleep(self.load_delay)
        progress("loading weights 2/2")

    def run_batch(self, requests: list[Any]) -> list[Any]:
        self.threads.add(threading.get_ident())
        self.batches.append(list(requests))
        self.started.set()
        if self.barrier is not None:
            self.barrier.wait()
        if self.gate is not None:
            assert self.gate.wait(5), "test gate never opened"
        if "boom" in requests:
            raise RuntimeError("batch exploded")
        return [ValueError(f"bad item {r}") if r == "bad" else ("ok", r) for r in requests]

    def close(self) -> None:
        self.closed = True


def make(worker: Worker, engine: FakeEngine, name: str = "fake", **kw: Any) -> FakeEngine:
    worker.add(EngineSpec(name, lambda: engine, **kw))
    return engine


async def wait_until(predicate: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.002)


@pytest.fixture
async def worker():
    w = Worker(Metrics())
    yield w
    await w.close(grace=0.5)


def test_engine_spec_validation() -> None:
    with pytest.raises(ValueError):
        EngineSpec("x", FakeEngine, max_batch=0)
    with pytest.raises(ValueError):
        EngineSpec("x", FakeEngine, max_queue=0)
    with pytest.raises(ValueError):
        EngineSpec("x", FakeEngine, capacity=0)
    with pytest.raises(ValueError):
        EngineSpec("x", FakeEngine, batch_window_ms=-1)
    with pytest.raises(ValueError):
        EngineSpec("", FakeEngine)


async def test_register_names_and_unknown(worker: Worker) -> None:
    make(worker, FakeEngine(), "a")
    make(worker, FakeEngine(), "b")
    assert worker.names() == ["a", "b"]
    with pytest.raises(ValueError):
        worker.add(EngineSpec("a", FakeEngine))
    with pytest.raises(UnknownEngine) as info:
        await worker.call("nope", 1)
    assert info.value.code == "unknown_engine"
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, AgentError)
    assert "nope" in str(info.value)
    with pytest.raises(UnknownEngine):
        worker.lease("nope")
    with pytest.raises(UnknownEngine):
        await worker.load("nope")


async def test_batching_merges_concurrent_requests_and_routes_results(worker: Worker) -> None:
    engine = make(worker, FakeEngine(), max_batch=4, batch_window_ms=50)
    results = await asyncio.gather(*(worker.call("fake", i) for i in range(10)))
    assert results == [("ok", i) for i in range(10)]
    assert [len(b) for b in engine.batches] == [4, 4, 2]
    assert sorted(r for b in engine.batches for r in b) == list(range(10))


async def test_batch_window_collects_late_requests(worker: Worker) -> None:
    engine = make(worker, FakeEngine(), max_batch=4, batch_window_ms=500)
    await worker.load("fake")

    async def late(i: int) -> Any:
        await asyncio.sleep(0.02 * i)
        return await worker.call("fake", i)

    assert await asyncio.gather(*(late(i) for i in range(4))) == [("ok", i) for i in range(4)]
    assert [len(b) for b in engine.batches] == [4]  # a full batch runs without waiting out the window


async def test_max_batch_one_runs_requests_singly(worker: Worker) -> None:
    engine = make(worker, FakeEngine())
    assert await asyncio.gather(*(worker.call("fake", i) for i in range(3))) == [("ok", i) for i in range(3)]
    assert engine.batches == [[0], [1], [2]]


async def test_urgent_requests_are_taken_before_the_others(worker: Worker) -> None:
    """While a batch runs, the queue fills; urgent requests (a caption's final) go out first, in their order."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Req:
        name: str
        urgent: bool = False

    gate = threading.Event()
    engine = make(worker, FakeEngine(gate=gate), max_batch=2)
    first = asyncio.ensure_future(worker.call("fake", Req("running")))
    await wait_until(engine.started.is_set)
    later = [Req("p1"), Req("f1", urgent=True), Req("p2"), Req("f2", urgent=True), Req("p3")]
    calls = [asyncio.ensure_future(worker.call("fake", r)) for r in later]
    await asyncio.sleep(0.01)
    gate.set()
    await asyncio.gather(first, *calls)
    assert [[r.name for r in b] for b in engine.batches] == [["running"], ["f1", "f2"], ["p1", "p2"], ["p3"]]


async def test_background_requests_wait_for_every_other_kind_and_count_in_no_queue_delay(worker: Worker) -> None:
    """A background engine on a shared lane (the translator computing its context ahead) is taken after the
    host's own waiting requests (an agent's turn), even ones queued later; its wait is not the lane's load."""
    gate = threading.Event()
    engine = make(worker, FakeEngine(gate=gate))
    worker.add(EngineSpec("fake-ahead", lambda: engine, shares="fake", adapt=lambda host: host, background=True))
    first = asyncio.ensure_future(worker.call("fake", "running"))
    await wait_until(engine.started.is_set)
    ahead = asyncio.ensure_future(worker.call("fake-ahead", "ahead"))
    await asyncio.sleep(0.3)
    assert worker.recent_queue_delays_ms(60)["fake"] < 150  # (the background request has waited 300 ms)
    turn = asyncio.ensure_future(worker.call("fake", "turn"))
    await asyncio.sleep(0.01)
    gate.set()
    await asyncio.gather(first, ahead, turn)
    assert engine.batches == [["running"], ["turn"], ["ahead"]]
    assert worker.recent_queue_delays_ms(60)["fake"] < 150
    with pytest.raises(ValueError, match="urgent or background"):
        EngineSpec("both", lambda: engine, urgent=True, background=True)


async def test_queue_bound_rejects_with_engine_overloaded(worker: Worker) -> None:
    gate = threading.Event()
    engine = make(worker, FakeEngine(gate=gate), max_queue=2)
    try:
        first = asyncio.create_task(worker.call("fake", "a"))
        await wait_until(engine.started.is_set)  # "a" runs, the queue is empty again
        queued = [asyncio.create_task(worker.call("fake", r)) for r in ("b", "c")]
        await asyncio.sleep(0)
        with pytest.raises(AtCapacity) as info:
            await worker.call("fake", "d")
        assert info.value.code == "engine_overloaded"
        assert info.value.status == 503
        assert info.value.retry_after is not None and info.value.retry_after > 0
        assert worker.stats()["fake"]["queue_depth"] == 2
        assert worker.stats()["fake"]["rejected"] == 1
    finally:
        gate.set()
    assert await first == ("ok", "a")
    assert [await t for t in queued] == [("ok", "b"), ("ok", "c")]
    assert await worker.call("fake", "e") == ("ok", "e")


async def test_per_item_exception_fails_only_that_request(worker: Worker) -> None:
    make(worker, FakeEngine(), max_batch=4, batch_window_ms=50)
    results = await asyncio.gather(*(worker.call("fake", r) for r in (1, "bad", 3)), return_exceptions=True)
    assert results[0] == ("ok", 1) and results[2] == ("ok", 3)
    err = results[1]
    assert isinstance(err, EngineError) and err.code == "engine_error"
    assert isinstance(err.__cause__, ValueError)
    assert await worker.call("fake", 4) == ("ok", 4)
    assert worker.stats()["fake"]["errors"] == 1


async def test_batch_exception_fails_the_batch_and_worker_keeps_serving(worker: Worker) -> None:
    engine = make(worker, FakeEngine(), max_batch=4, batch_window_ms=50)
    results = await asyncio.gather(*(worker.call("fake", r) for r in (1, "boom", 3)), return_exceptions=True)
    assert [len(b) for b in engine.batches] == [3]
    for err in results:
        assert isinstance(err, EngineError) and err.code == "engine_error"
        assert isinstance(err.__cause__, RuntimeError)
    assert results[0] is not results[2]  # every caller gets its own error object
    assert await worker.call("fake", 5) == ("ok", 5)


async def test_engine_error_code_is_kept_and_bad_result_count_fails(worker: Worker) -> None:
    class Odd:
        def load(self, progress: Callable[[str], None]) -> None:
            pass

        def run_batch(self, requests: list[Any]) -> list[Any]:
            if requests == ["remote"]:
                raise EngineError("upstream timed out", code="engine_upstream_timeout")
            return []  # wrong length

    worker.add(EngineSpec("odd", Odd))
    with pytest.raises(EngineError) as info:
        await worker.call("odd", "remote")
    assert info.value.code == "engine_upstream_timeout"
    with pytest.raises(EngineError) as info:
        await worker.call("odd", "x")
    assert info.value.code == "engine_error" and "0 results for 1" in str(info.value)


async def test_timeout_and_abandoned_request_is_not_run(worker: Worker) -> None:
    gate = threading.Event()
    engine = make(worker, FakeEngine(gate=gate))
    try:
        first = asyncio.create_task(worker.call("fake", "a"))
        await wait_until(engine.started.is_set)
        with pytest.raises(EngineError) as info:
            await worker.call("fake", "late", timeout=0.05)
        assert info.value.code == "engine_timeout"
    finally:
        gate.set()
    assert await first == ("ok", "a")
    assert await worker.call("fake", "c") == ("ok", "c")
    assert engine.batches == [["a"], ["c"]]  # the timed-out request never reached the engine
    assert worker.stats()["fake"]["timeouts"] == 1


async def test_timeout_while_running_drops_result(worker: Worker) -> None:
    gate = threading.Event()
    make(worker, FakeEngine(gate=gate))
    try:
        with pytest.raises(EngineError) as info:
            await worker.call("fake", "slow", timeout=0.05)
        assert info.value.code == "engine_timeout"
    finally:
        gate.set()
    assert await worker.call("fake", "next") == ("ok", "next")


async def test_cancelled_caller_does_not_break_the_batch(worker: Worker) -> None:
    gate = threading.Event()
    engine = make(worker, FakeEngine(gate=gate), max_batch=4, batch_window_ms=50)
    await worker.load("fake")
    try:
        tasks = [asyncio.create_task(worker.call("fake", i)) for i in range(3)]
        await wait_until(engine.started.is_set)
        tasks[1].cancel()
        await asyncio.sleep(0)
    finally:
        gate.set()
    assert await tasks[0] == ("ok", 0)
    assert await tasks[2] == ("ok", 2)
    with pytest.raises(asyncio.CancelledError):
        await tasks[1]
    assert await worker.call("fake", 9) == ("ok", 9)


async def test_calls_never_run_on_the_event_loop_thread(worker: Worker) -> None:
    engine = make(worker, FakeEngine(), max_batch=2)
    await asyncio.gather(*(worker.call("fake", i) for i in range(5)))
    loop_thread = threading.get_ident()
    assert engine.threads and loop_thread not in engine.threads
    assert engine.load_threads and loop_thread not in engine.load_threads


async def test_concurrency_runs_batches_in_parallel_threads(worker: Worker) -> None:
    engine = make(worker, FakeEngine(barrier=threading.Barrier(2, timeout=2)), concurrency=2)
    # with one thread the barrier would break and both calls would fail
    assert await asyncio.gather(worker.call("fake", 1), worker.call("fake", 2)) == [("ok", 1), ("ok", 2)]
    assert len(engine.threads) == 2


async def test_lease_capacity(worker: Worker) -> None:
    make(worker, FakeEngine(), capacity=1)
    async with worker.lease("fake"):
        assert worker.stats()["fake"]["leases"] == 1
        with pytest.raises(AtCapacity) as info:
            async with worker.lease("fake"):
                pass
        assert info.value.code == "engine_capacity" and info.value.retry_after >= 1
        started = time.monotonic()
        with pytest.raises(AtCapacity):
            async with worker.lease("fake", wait=0.05):
                pass
        assert time.monotonic() - started >= 0.04  # it waited before giving up
    assert worker.stats()["fake"]["leases"] == 0
    async with worker.lease("fake"):  # the released slot is reusable
        pass


async def test_lease_waiter_gets_the_released_slot(worker: Worker) -> None:
    make(worker, FakeEngine(), capacity=1)
    order: list[str] = []

    async def holder() -> None:
        async with worker.lease("fake"):
            order.append("first")
            await asyncio.sleep(0.05)
        order.append("released")

    task = asyncio.create_task(holder())
    await asyncio.sleep(0.01)
    async with worker.lease("fake", wait=1.0):
        order.append("second")
    await task
    assert order == ["first", "released", "second"]


async def test_lease_unlimited_without_capacity(worker: Worker) -> None:
    make(worker, FakeEngine())
    async with worker.lease("fake"), worker.lease("fake"), worker.lease("fake"):
        assert worker.stats()["fake"]["leases"] == 3


async def test_load_once_under_concurrent_callers(worker: Worker, caplog: pytest.LogCaptureFixture) -> None:
    built: list[FakeEngine] = []

    def factory() -> FakeEngine:
        built.append(FakeEngine(load_delay=0.1))
        return built[-1]

    worker.add(EngineSpec("fake", factory, max_batch=4))
    with caplog.at_level(logging.INFO, logger="rtc_agent.worker"):
        loads = [worker.load("fake") for _ in range(5)]
        calls = [worker.call("fake", i) for i in range(3)]
        results = await asyncio.gather(*loads, *calls)
    assert len(built) == 1
    assert all(r is built[0] for r in results[:5])
    assert results[5:] == [("ok", 0), ("ok", 1), ("ok", 2)]
    assert await worker.load("fake") is built[0]
    messages = [r.getMessage() for r in caplog.records if r.name == "rtc_agent.worker"]
    assert any("fake" in m and "loading weights 2/2" in m and " s)" in m for m in messages)
    assert worker.stats()["fake"]["loaded"] is True


async def test_failed_load_is_reported_and_retried(worker: Worker) -> None:
    attempts: list[int] = []

    def factory() -> FakeEngine:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("weights missing")
        return FakeEngine()

    worker.add(EngineSpec("fake", factory))
    with pytest.raises(EngineError) as info:
        await worker.load("fake")
    assert info.value.code == "engine_load_failed"
    assert isinstance(info.value.__cause__, OSError)
    assert worker.stats()["fake"]["loaded"] is False
    assert isinstance(await worker.load("fake"), FakeEngine)
    assert len(attempts) == 2


async def test_failed_load_fails_queued_calls_then_recovers(worker: Worker) -> None:
    attempts: list[int] = []

    def factory() -> FakeEngine:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("weights missing")
        return FakeEngine()

    worker.add(EngineSpec("fake", factory))
    results = await asyncio.gather(*(worker.call("fake", i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(e, EngineError) and e.code == "engine_load_failed" for e in results)
    assert await worker.call("fake", 7) == ("ok", 7)


async def test_close_fails_pending_calls_and_leaves_no_tasks() -> None:
    worker = Worker(Metrics())
    gate = threading.Event()
    engine = make(worker, FakeEngine(gate=gate))
    running = asyncio.create_task(worker.call("fake", "a"))
    await wait_until(engine.started.is_set)
    queued = [asyncio.create_task(worker.call("fake", r)) for r in ("b", "c")]
    await asyncio.sleep(0)
    closing = asyncio.create_task(worker.close(grace=0.1))
    for task in queued:
        with pytest.raises(EngineError) as info:
            await task
        assert info.value.code == "worker_closed"
    with pytest.raises(EngineError) as info:
        await running  # still blocked after the grace period
    assert info.value.code == "worker_closed"
    gate.set()
    await closing
    assert engine.closed
    assert asyncio.all_tasks() == {asyncio.current_task()}
    with pytest.raises(EngineError) as info:
        await worker.call("fake", "d")
    assert info.value.code == "worker_closed"
    await worker.close()  # idempotent


async def test_close_idle_worker_closes_loaded_engines() -> None:
    worker = Worker()
    engine = make(worker, FakeEngine(), max_batch=2)
    assert await worker.call("fake", 1) == ("ok", 1)
    await worker.close()
    assert engine.closed
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_load_all(worker: Worker) -> None:
    a = make(worker, FakeEngine(), "a")
    b = make(worker, FakeEngine(), "b")
    await worker.load_all()
    assert await worker.load("a") is a and await worker.load("b") is b
    assert all(s["loaded"] for s in worker.stats().values())


async def test_metrics_and_stats_are_recorded() -> None:
    metrics = Metrics()
    worker = Worker(metrics)
    make(worker, FakeEngine(), max_batch=4, batch_window_ms=50)
    try:
        await asyncio.gather(*(worker.call("fake", i) for i in range(6)))
        labels = {"engine": "fake"}
        get = metrics.registry.get_sample_value
        assert get("rtc_agent_engine_batch_size_count", labels) == 2
        assert get("rtc_agent_engine_batch_size_sum", labels) == 6
        assert get("rtc_agent_engine_queue_delay_seconds_count", labels) == 6
        assert get("rtc_agent_engine_run_seconds_count", labels) == 2
        assert get("rtc_agent_engine_queue_depth", labels) == 0
        stats = worker.stats()["fake"]
        assert stats["calls"] == 6 and stats["batches"] == 2 and stats["errors"] == 0
        assert stats["mean_batch_size"] == 3.0
        assert stats["in_flight"] == 0 and stats["queue_depth"] == 0
        assert stats["mean_queue_delay_ms"] >= 0 and stats["mean_run_ms"] >= 0
    finally:
        await worker.close()
