"""LoopLagMonitor and the loop-lag benchmark (a short smoke run)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import pytest

from rtc_agent.bench import loop_lag as bench
from rtc_agent.metrics import Metrics
from rtc_agent.worker import LoopLagMonitor


def test_stats_empty_and_percentiles() -> None:
    monitor = LoopLagMonitor(interval=0.1)
    assert monitor.stats() == {
        "samples": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0, "last_ms": 0.0, "mean_ms": 0.0,
    }
    for ms in range(100, 0, -1):
        monitor.record(ms / 1000)
    stats = monitor.stats()
    assert stats["samples"] == 100
    assert stats["p50_ms"] == pytest.approx(50)
    assert stats["p99_ms"] == pytest.approx(99)
    assert stats["max_ms"] == pytest.approx(100)
    assert stats["last_ms"] == pytest.approx(1)
    monitor.record(-0.5)  # a clock oddity never yields negative lag
    assert monitor.stats()["last_ms"] == 0.0


def test_ring_is_bounded() -> None:
    monitor = LoopLagMonitor(window=10)
    for i in range(50):
        monitor.record(i / 1000)
    stats = monitor.stats()
    assert stats["samples"] == 10
    assert stats["max_ms"] == pytest.approx(49)
    monitor.reset()
    assert monitor.stats()["samples"] == 0


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        LoopLagMonitor(interval=0)
    with pytest.raises(ValueError):
        LoopLagMonitor(window=0)


async def test_samples_into_metrics_and_stops_cleanly() -> None:
    metrics = Metrics()
    monitor = LoopLagMonitor(metrics, interval=0.01)
    monitor.start()
    monitor.start()  # no second sampler
    assert monitor.running
    await asyncio.sleep(0.15)
    await monitor.stop()
    await monitor.stop()  # idempotent
    assert not monitor.running
    stats = monitor.stats()
    assert stats["samples"] >= 3
    assert 0 <= stats["p50_ms"] <= stats["p99_ms"] <= stats["max_ms"]
    count = metrics.registry.get_sample_value("rtc_agent_event_loop_lag_seconds_count")
    assert count == stats["samples"]
    last = metrics.registry.get_sample_value("rtc_agent_event_loop_lag_last_seconds")
    assert last == pytest.approx(stats["last_ms"] / 1000, abs=1e-3)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_detects_a_blocked_loop() -> None:
    monitor = LoopLagMonitor(interval=0.01)
    monitor.start()
    await asyncio.sleep(0.03)
    time.sleep(0.12)  # block the loop on purpose
    await asyncio.sleep(0.03)
    await monitor.stop()
    assert monitor.stats()["max_ms"] >= 80


async def test_benchmark_smoke() -> None:
    result = await bench.run(seconds=0.4, sessions=3, engine_ms=5.0, baseline_seconds=0.05)
    json.dumps(result)  # JSON-able
    assert result["calls"] > 0 and result["errors"] == 0
    keys = ("lag_p50_ms", "lag_p99_ms", "lag_max_ms", "queue_delay_ms", "run_ms", "batch_sizes", "machine")
    for key in keys:
        assert key in result
    assert result["machine"]["cpu_count"] >= 1
    assert all(1 <= int(size) <= 4 for size in result["batch_sizes"])
    assert result["lag"]["samples"] > 0


def test_benchmark_cli_writes_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    out = tmp_path / "sub" / "loop.json"
    args = parser.parse_args(["--seconds", "0.3", "--sessions", "2", "--engine-ms", "5", "--out", str(out)])
    assert args.seconds == 0.3 and args.sessions == 2 and args.out == out
    result = bench.main(args)
    assert json.loads(out.read_text()) == result
