"""CPU priority between engines: a yielding engine's steps wait while the engines it yields to run batches."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rtc_agent.metrics import Metrics
from rtc_agent.worker import EngineSpec, Worker
from rtc_agent.worker.priority import PriorityGate
from tests.test_worker import FakeEngine, wait_until


class SteppingEngine:
    """A long job in steps, calling ``checkpoint`` before each (as the embedded LLM does per token)."""

    def __init__(self, step_s: float = 0.005) -> None:
        self.checkpoint: Any = lambda: 0.0
        self.step_done: Any = None
        self.step_s = step_s
        self.step_times: list[float] = []
        self.step_ends: list[float] = []
        self.waited: list[float] = []
        self.warmed_up = False

    def load(self, progress: Any) -> None:
        self.checkpoint()  # a warm-up at load: the worker installs the real checkpoint afterwards
        self.warmed_up = True

    def run_batch(self, requests: list[int]) -> list[int]:
        for _ in range(requests[0]):
            self.waited.append(self.checkpoint())
            self.step_times.append(time.monotonic())
            time.sleep(self.step_s)
            self.step_ends.append(time.monotonic())
        return [len(self.step_times)]


async def tts_and_stepping_llm(tts: Any, llm: SteppingEngine) -> Worker:
    """A worker with ``tts`` (loaded) and ``llm`` registered to yield to it."""
    worker = Worker(Metrics())
    worker.add(EngineSpec("tts", lambda: tts))
    worker.add(EngineSpec("llm", lambda: llm, yields_to=("tts",), yield_max_s=5.0))
    await worker.load("tts")
    return worker


class TimedEngine:
    """Records when each batch ran (``spans``); each takes 20 ms."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    def load(self, progress: Any) -> None:
        pass

    def run_batch(self, requests: list[Any]) -> list[Any]:
        start = time.monotonic()
        time.sleep(0.02)
        self.spans.append((start, time.monotonic()))
        return [("ok", r) for r in requests]


def test_gate_checkpoint_waits_while_busy_and_at_most_max_wait() -> None:
    gate = PriorityGate()
    checkpoint, _ = gate.step_hooks(["tts"], max_wait_s=0.05)
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
    long_checkpoint, _ = gate.step_hooks(["tts"], max_wait_s=5.0)
    threading.Timer(0.02, release.set).start()
    assert 0.0 < long_checkpoint() < 2.0  # woken when the batch ended, not at the timeout
    holder.join()
    assert gate.waits == 2


async def test_the_worker_pauses_a_yielding_engine_while_another_runs() -> None:
    tts_gate = threading.Event()
    tts = FakeEngine(gate=tts_gate)
    llm = SteppingEngine()
    worker = await tts_and_stepping_llm(tts, llm)
    try:
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


def test_a_batch_of_a_yielded_to_engine_starts_after_the_step_in_progress() -> None:
    gate = PriorityGate(step_wait_s=2.0)
    checkpoint, _ = gate.step_hooks(["tts"], max_wait_s=2.0)
    step_started = threading.Event()
    step_ended: list[float] = []

    def one_step() -> None:
        with gate.running("llm"):
            checkpoint()
            step_started.set()
            time.sleep(0.15)  # a token in progress
            step_ended.append(time.monotonic())
            checkpoint()  # between tokens: steps aside while the clause runs
            step_ended.append(time.monotonic())

    stepper = threading.Thread(target=one_step)
    stepper.start()
    assert step_started.wait(2)
    with gate.running("tts"):
        started = time.monotonic()
        assert step_ended and started >= step_ended[0]  # waited for the token, did not overlap it
        time.sleep(0.05)
        assert len(step_ended) == 1  # the next token waits for this batch
    stepper.join()
    assert step_ended[1] - step_ended[0] >= 0.04
    assert gate.step_waits == 1 and 0.05 < gate.step_waited_s < 1.0
    with gate.running("tts"):  # the yielding job is over: nothing to wait for
        pass
    assert gate.step_waits == 1


@contextlib.contextmanager
def job_in_a_step(gate: PriorityGate, checkpoint: Any, after: Any = lambda: None) -> Iterator[None]:
    """Within the block, a job in another thread holds ``gate``'s ``"job"`` mark and is in a step (begun with
    ``checkpoint()``, then ``after()``): seconds of work, as far as the gate knows."""
    stepping, release = threading.Event(), threading.Event()

    def job() -> None:
        with gate.running("job"):
            checkpoint()
            after()
            stepping.set()
            release.wait(2)

    thread = threading.Thread(target=job)
    thread.start()
    assert stepping.wait(2)
    try:
        yield
    finally:
        release.set()
        thread.join()


def test_step_done_ends_the_step_so_a_batch_need_not_wait() -> None:
    gate = PriorityGate(step_wait_s=2.0)
    checkpoint, step_done = gate.step_hooks(["tts"], max_wait_s=2.0)
    with job_in_a_step(gate, checkpoint, after=step_done):  # e.g. handing a token to a consumer that does not read
        started = time.monotonic()
        with gate.running("tts"):
            assert time.monotonic() - started < 0.5
    assert gate.step_waits == 0


def test_an_engine_that_no_one_yields_to_never_waits_for_steps() -> None:
    gate = PriorityGate(step_wait_s=2.0)
    checkpoint, _ = gate.step_hooks(["tts"], max_wait_s=2.0)
    with gate.running("llm"):
        checkpoint()  # a step in progress in this thread
        done = threading.Event()

        def vad_batch() -> None:
            with gate.running("vad"):
                done.set()

        threading.Thread(target=vad_batch).start()
        assert done.wait(0.5)
    assert gate.step_waits == 0


def test_a_batch_waits_only_for_a_step_that_yields_to_it_and_holds() -> None:
    """A voice's clause (yields to ``mt``) holds up no Whisper batch, though the LLM yields to ``asr``; and a job
    registered with ``hold=False`` (lower OS priority) holds up no batch of what it yields to."""
    gate = PriorityGate(step_wait_s=2.0)
    gate.step_hooks(["tts", "asr"], max_wait_s=2.0)  # the LLM's: "asr" is an engine some job yields to
    voice_checkpoint, _ = gate.step_hooks(["mt"], max_wait_s=2.0)
    quiet_checkpoint, _ = gate.step_hooks(["asr"], max_wait_s=2.0, hold=False)
    for checkpoint in (voice_checkpoint, quiet_checkpoint):
        with job_in_a_step(gate, checkpoint):  # a clause in progress: seconds of synthesis
            started = time.monotonic()
            with gate.running("asr"):
                assert time.monotonic() - started < 0.5
    assert gate.step_waits == 0
    # the voice's step does hold up a translation (what it yields to), at most step_wait_s
    gate = PriorityGate(step_wait_s=0.1)
    voice_checkpoint, _ = gate.step_hooks(["mt"], max_wait_s=2.0)
    with gate.running("tts"):
        voice_checkpoint()

        def translation() -> None:
            with gate.running("mt"):
                pass

        batch = threading.Thread(target=translation)
        batch.start()
        batch.join(2)
    assert gate.step_waits == 1


async def test_steps_and_batches_do_not_overlap_through_the_worker() -> None:
    tts = TimedEngine()
    llm = SteppingEngine(step_s=0.03)
    worker = await tts_and_stepping_llm(tts, llm)
    try:
        long_job = asyncio.ensure_future(worker.call("llm", 30))
        await wait_until(lambda: len(llm.step_times) >= 3)
        assert llm.warmed_up and callable(llm.step_done)  # both hooks installed after load
        for _ in range(3):
            await worker.call("tts", "clause")
            await asyncio.sleep(0.02)
        assert await long_job == 30
        assert worker.priority.step_waits >= 1
        steps = list(zip(llm.step_times, llm.step_ends, strict=True))
        assert len(tts.spans) == 3
        for start, end in tts.spans:
            assert not any(s < end and start < e for s, e in steps)  # no step overlapped a batch
    finally:
        await worker.close(grace=0.5)


class PriorityProbe:
    """Records the OS niceness of the thread each ``load`` and ``run_batch`` runs in."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def load(self, progress: Any) -> None:
        self.seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    def run_batch(self, requests: list[Any]) -> list[Any]:
        self.seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return list(requests)


async def test_a_niced_engine_runs_its_threads_at_lower_priority_and_the_others_do_not() -> None:
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    low, normal = PriorityProbe(), PriorityProbe()
    worker = Worker(Metrics())
    worker.add(EngineSpec("tts", lambda: low, nice=7))
    worker.add(EngineSpec("asr", lambda: normal))
    try:
        assert await worker.call("tts", 1) == 1 and await worker.call("asr", 2) == 2
    finally:
        await worker.close()
    assert low.seen == [min(19, base + 7)] * 2  # its load and its batches
    assert normal.seen == [base] * 2
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base  # the loop's thread is untouched


def test_engine_spec_nice_must_be_an_os_niceness() -> None:
    for bad in (-1, 20, 2.5, True):
        with pytest.raises(ValueError, match="nice"):
            EngineSpec("tts", PriorityProbe, nice=bad)


def test_embedded_voices_run_tts_nice_lower_and_the_setting_is_checked() -> None:
    from rtc_agent.config import Settings, SettingsError
    from rtc_agent.engines.tts import engine_spec, kokoro_spec

    assert engine_spec(Settings()).nice == Settings().tts_nice > 0
    assert kokoro_spec(Settings(tts_nice=3)).nice == 3
    assert engine_spec(Settings(tts_nice=0)).nice == 0
    with pytest.raises(SettingsError, match="tts_nice"):
        engine_spec(Settings(tts_nice=25))
