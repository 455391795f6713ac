"""Event-loop lag under engine load: ``rtc-agent bench loop --seconds S --sessions N --out FILE``.

Simulated sessions call a CPU-busy test engine through the real :class:`~rtc_agent.worker.Worker`
(max_batch 4) while a :class:`~rtc_agent.worker.LoopLagMonitor` samples the event loop. The engine does numpy
matrix work (releases the GIL, competes for cores) and a pure-Python loop (holds the GIL, so the loop thread
must win it back every switch interval): the GIL contention is real, as with model code that is not fully
native.

The target is lag p99 under 20 ms while engines are busy: the loop also paces 20 ms WebRTC audio frames.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.bench.common import machine, percentile_ms, write_json
from rtc_agent.errors import AtCapacity, EngineError
from rtc_agent.metrics import Metrics
from rtc_agent.worker import EngineSpec, LoopLagMonitor, Worker

__all__ = ["BusyEngine", "add_arguments", "main", "run"]

TARGET_LAG_P99_MS = 20.0
ENGINE = "busy"


class BusyEngine:
    """A CPU-bound fake engine shaped like a model's decode loop.

    A batch of ``n`` costs ``engine_ms * (1 + 0.25 * (n - 1))`` of wall time, of which ``python_share`` is
    pure-Python arithmetic (holds the GIL) and the rest numpy matmuls (release the GIL, use BLAS threads). The
    pure-Python work comes in stretches of at most ``gil_chunk_ms`` between native steps, the way Python glue
    sits between the native ops of real model code; a huge ``gil_chunk_ms`` gives one monolithic stretch per
    batch (the worst case for the event loop: it can only take the GIL at the interpreter's switch interval).

    Requests are dicts with ``t`` (``time.monotonic()`` when the caller asked); the engine records each
    request's queue delay (ask to batch start), run times, batch sizes and the time spent holding the GIL.
    Lists are appended from the engine thread only and read after the run.
    """

    def __init__(self, engine_ms: float, *, python_share: float = 0.5, gil_chunk_ms: float = 2.0) -> None:
        if not 0.0 <= python_share <= 1.0:
            raise ValueError(f"python_share must be within 0..1, got {python_share!r}")
        if gil_chunk_ms <= 0:
            raise ValueError(f"gil_chunk_ms must be > 0, got {gil_chunk_ms!r}")
        self.engine_ms = engine_ms
        self.python_share = python_share
        self.gil_chunk = gil_chunk_ms / 1000.0
        self.queue_delays: list[float] = []
        self.run_times: list[float] = []
        self.python_time = 0.0
        self.longest_python_stretch = 0.0
        self.batch_sizes: Counter[int] = Counter()
        self._a: np.ndarray | None = None

    def load(self, progress: Callable[[str], None]) -> None:
        rng = np.random.default_rng(0)
        self._a = rng.standard_normal((192, 192))
        progress("matrices ready")

    def _python(self, seconds: float) -> tuple[int, float]:
        """Pure-Python arithmetic for ``seconds`` (holds the GIL except at forced switches); returns a checksum
        and the time actually spent."""
        start = time.monotonic()
        end = start + seconds
        acc = 0
        while time.monotonic() < end:
            for i in range(200):
                acc += i * i % 7
        spent = time.monotonic() - start
        self.python_time += spent
        self.longest_python_stretch = max(self.longest_python_stretch, spent)
        return acc, spent

    def run_batch(self, requests: list[Any]) -> list[Any]:
        assert self._a is not None, "load() first"
        start = time.monotonic()
        for request in requests:
            self.queue_delays.append(start - request["t"])
        n = len(requests)
        self.batch_sizes[n] += 1
        budget = self.engine_ms / 1000.0 * (1 + 0.25 * (n - 1))
        end = start + budget
        python_left = self.python_share * budget
        native_per_python = (1 - self.python_share) / self.python_share if self.python_share else 0.0
        m = self._a
        acc = 0
        while time.monotonic() < end:
            native_until = end
            if python_left > 0:
                chunk = min(self.gil_chunk, python_left, end - time.monotonic())
                checksum, spent = self._python(chunk)
                acc += checksum
                python_left -= spent
                if python_left > 0:
                    native_until = min(end, time.monotonic() + spent * native_per_python)
            while True:  # at least one native step: numpy releases the GIL here
                m = np.tanh(m @ self._a * (1 / 16))
                if time.monotonic() >= native_until:
                    break
        self.run_times.append(time.monotonic() - start)
        value = float(m[0, 0])
        return [{"session": r["session"], "seq": r["seq"], "value": value, "acc": acc} for r in requests]


async def run(
    seconds: float = 10.0,
    sessions: int = 8,
    engine_ms: float = 50.0,
    *,
    concurrency: int = 1,
    python_share: float = 0.5,
    gil_chunk_ms: float = 2.0,
    lag_interval: float = 0.01,
    baseline_seconds: float | None = None,
) -> dict[str, Any]:
    """Run the benchmark on the running loop and return JSON-able results.

    First samples an idle baseline (``baseline_seconds``, default ``min(1, seconds / 5)``), then for
    ``seconds`` runs ``sessions`` closed-loop sessions, each calling the busy engine back to back with 0-10 ms
    of jitter. Lag is sampled every ``lag_interval`` seconds.
    """
    metrics = Metrics()
    worker = Worker(metrics)
    engine = BusyEngine(engine_ms, python_share=python_share, gil_chunk_ms=gil_chunk_ms)
    worker.add(EngineSpec(ENGINE, lambda: engine, max_queue=32, max_batch=4, concurrency=concurrency))
    await worker.load(ENGINE)

    window = max(3000, int(seconds / lag_interval) + 10)
    monitor = LoopLagMonitor(metrics, interval=lag_interval, window=window)
    if baseline_seconds is None:
        baseline_seconds = min(1.0, seconds / 5)
    monitor.start()
    await asyncio.sleep(baseline_seconds)
    baseline = monitor.stats()
    monitor.reset()

    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    latencies: list[float] = []
    counts = Counter[str]()
    rng = random.Random(0)

    async def session(index: int) -> None:
        seq = 0
        while loop.time() < deadline:
            asked = time.monotonic()
            try:
                await worker.call(ENGINE, {"session": index, "seq": seq, "t": asked}, timeout=30.0)
            except AtCapacity:
                counts["overloaded"] += 1
                await asyncio.sleep(0.01)
                continue
            except EngineError:
                counts["errors"] += 1
                continue
            latencies.append(time.monotonic() - asked)
            counts["calls"] += 1
            seq += 1
            await asyncio.sleep(rng.uniform(0.0, 0.01))

    started = time.monotonic()
    try:
        await asyncio.gather(*(session(i) for i in range(sessions)))
    finally:
        elapsed = time.monotonic() - started
        await monitor.stop()
        worker_stats = worker.stats()[ENGINE]
        await worker.close()

    lag = monitor.stats()
    return {
        "benchmark": "loop_lag",
        "config": {
            "seconds": seconds, "sessions": sessions, "engine_ms": engine_ms, "max_batch": 4,
            "concurrency": concurrency, "python_share": python_share, "gil_chunk_ms": gil_chunk_ms,
            "lag_interval_ms": lag_interval * 1000,
        },
        "lag_p50_ms": lag["p50_ms"],
        "lag_p99_ms": lag["p99_ms"],
        "lag_max_ms": lag["max_ms"],
        "lag": lag,
        "baseline_lag": baseline,
        "target_lag_p99_ms": TARGET_LAG_P99_MS,
        "pass": lag["p99_ms"] < TARGET_LAG_P99_MS,
        "calls": counts["calls"],
        "calls_per_s": round(counts["calls"] / elapsed, 2) if elapsed > 0 else 0.0,
        "overloaded": counts["overloaded"],
        "errors": counts["errors"],
        "queue_delay_ms": {
            "p50": percentile_ms(engine.queue_delays, 50), "p90": percentile_ms(engine.queue_delays, 90),
            "max": percentile_ms(engine.queue_delays, 100),
        },
        "call_latency_ms": {
            "p50": percentile_ms(latencies, 50), "p90": percentile_ms(latencies, 90),
            "p99": percentile_ms(latencies, 99),
        },
        "run_ms": {
            "p50": percentile_ms(engine.run_times, 50), "p90": percentile_ms(engine.run_times, 90),
            "mean": round(1000 * sum(engine.run_times) / max(1, len(engine.run_times)), 3),
        },
        "batch_sizes": {str(k): v for k, v in sorted(engine.batch_sizes.items())},
        "engine_python_share": round(engine.python_time / max(1e-9, sum(engine.run_times)), 3),
        "engine_longest_gil_stretch_ms": round(1000 * engine.longest_python_stretch, 3),
        "worker": worker_stats,
        "machine": machine(),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rtc-agent bench loop``."""
    parser.add_argument("--seconds", type=float, default=10.0, help="load duration (default 10)")
    parser.add_argument("--sessions", type=int, default=8, help="concurrent simulated sessions (default 8)")
    parser.add_argument("--engine-ms", type=float, default=50.0, help="cost of a batch of one (default 50)")
    parser.add_argument("--concurrency", type=int, default=1, help="engine threads (default 1)")
    parser.add_argument("--python-share", type=float, default=0.5,
                        help="share of engine time in pure Python, holding the GIL (default 0.5)")
    parser.add_argument("--gil-chunk-ms", type=float, default=2.0,
                        help="longest pure-Python stretch between native steps (default 2; 1e9: monolithic)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON results here")


def main(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark; write the JSON to ``args.out`` when given; return the results."""
    result = asyncio.run(run(
        args.seconds, args.sessions, args.engine_ms,
        concurrency=getattr(args, "concurrency", 1),
        python_share=getattr(args, "python_share", 0.5),
        gil_chunk_ms=getattr(args, "gil_chunk_ms", 2.0),
    ))
    return write_json(result, getattr(args, "out", None))


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m rtc_agent.bench.loop_lag", description=__doc__)
    add_arguments(_parser)
    print(json.dumps(main(_parser.parse_args()), indent=2))
