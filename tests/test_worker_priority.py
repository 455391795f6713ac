"""CPU priority between engines: a yielding engine's steps wait while the engines it yields to run batches."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from rtc_agent.metrics import Metrics
from rtc_agent.worker import EngineSpec, Worker
from rtc_agent.worker.priority import PriorityGate
from tests.test_worker import FakeEngine, wait_until


class SteppingEngine:
    """A long job in steps, calling ``checkpoint`` before each (as the embedded LLM does per token)."""

    def __init__(self) -> None:
        self.checkpoint: Any = lambda: 0.0
        self.step_times: list[float] = []
        self.waited: list[float] = []

    def load(self, progress: Any) -> None:
        pass

    def run_batch(self, requests: list[int]) -> list[int]:
        for _ in range(requests[0]):
            self.waited.append(self.checkpoint())
            self.step_times.append(time.monotonic())
            time.sleep(0.005)
        return [len(self.step_times)]


def test_gate_checkpoint_waits_while_busy_and_at_most_max_wait() -> None:
    gate = PriorityGate()
    checkpoint = gate.checkpoint_for(["tts"], max_wait_s=0.05)
    assert checkpoint() == 0.0
    with gate.running("tts"):
        assert gate.busy(["tts"]) and not gate.busy(["asr"])
        started = time.monotonic()
        waited = checkpoint()  # never released: returns after max_wait_s
        assert waited >= 0.04 and time.monotonic() - started < 1.0
    assert not gate.busy(["tts"])

    release = threading.Event()

    def hold() -> None:
        with gate.running("tts"):
            release.wait(2)

    holder = threading.Thread(target=hold)
    holder.start()
    while not gate.busy(["tts"]):
        time.sleep(0.001)
    long_checkpoint = gate.checkpoint_for(["tts"], max_wait_s=5.0)
    threading.Timer(0.02, release.set).start()
    assert 0.0 < long_checkpoint() < 2.0  # woken when the batch ended, not at the timeout
    holder.join()
    assert gate.waits == 2


async def test_the_worker_pauses_a_yielding_engine_while_another_runs() -> None:
    worker = Worker(Metrics())
    tts_gate = threading.Event()
    tts = FakeEngine(gate=tts_gate)
    llm = SteppingEngine()
    worker.add(EngineSpec("tts", lambda: tts))
    worker.add(EngineSpec("llm", lambda: llm, yields_to=("tts",), yield_max_s=5.0))
    try:
        await worker.load("tts")
        long_job = asyncio.ensure_future(worker.call("llm", 40))
        await wait_until(lambda: len(llm.step_times) >= 3)
        synthesis = asyncio.ensure_future(worker.call("tts", "clause"))
        await wait_until(tts.started.is_set)
        steps = len(llm.step_times)
        await asyncio.sleep(0.1)
        assert len(llm.step_times) <= steps + 1  # at most the step already past its checkpoint
        tts_gate.set()
        assert await synthesis == ("ok", "clause")
        assert await long_job == 40
        assert max(llm.waited) > 0.05
    finally:
        tts_gate.set()
        await worker.close(grace=0.5)
