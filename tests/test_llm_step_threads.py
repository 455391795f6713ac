"""The embedded LLM's per-step thread count (engines/llm/step_threads.py): the policy on a scripted clock and idle
figure, and the real path: a tiny model built from a config answers the same on every thread count the policy
switches between, with the count applied from the thread that runs the forward."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from rtc_agent.engines.llm.step_threads import StepThreads, proc_stat_idle_s


class Machine:
    """A scripted machine: a clock, the idle CPU seconds of the other cores, and what each step costs."""

    def __init__(self) -> None:
        self.now = 100.0
        self.idle = 0.0
        self.applied: list[int] = []
        self.other_idle_cores = 1.0  # how many cores the rest of the machine leaves idle
        self.cost = {1: 0.10, 2: 0.06}  # seconds of a decode step per thread count

    def run(self, threads: StepThreads, rows: int = 3, decode: bool = True, busy: bool = False) -> int:
        """One step; ``busy``: another thread wants a core (two threads crawl, one does not notice)."""
        with threads.step(rows, decode):
            used = threads.applied
            seconds = self.cost[used] * (6 if busy and used > 1 else 1)
            self.now += seconds
            self.idle += seconds * (0.0 if busy else self.other_idle_cores)
        return used

    def chooser(self, **options: Any) -> StepThreads:
        return StepThreads(2, self.applied.append, idle_s=lambda: self.idle, clock=lambda: self.now, **options)


def test_all_threads_while_the_machine_is_idle() -> None:
    machine = Machine()
    threads = machine.chooser()
    used = [machine.run(threads) for _ in range(20)]
    assert used[0] == 2 and used.count(1) == 1  # one probe at one thread, for the comparison
    assert threads.drops == 0 and threads.threads == 2
    assert machine.applied == [1, 2]  # set only when the count changes (torch starts at the full count)


def test_a_busy_core_drops_to_one_thread_and_idle_cores_raise_it_again() -> None:
    machine = Machine()
    threads = machine.chooser()
    for _ in range(5):
        machine.run(threads)
    # another thread takes a core: the first slow step drops to one thread, which stays while the core is busy
    used = [machine.run(threads, busy=True) for _ in range(30)]
    assert used[0] == 2 and set(used[1:]) == {1}
    assert threads.drops == 1 and threads.raises == 0
    # the other core idles again: after the hold, the idle window raises the count
    used = [machine.run(threads) for _ in range(15)]
    assert used[-1] == 2 and threads.raises == 1
    assert threads.stats()["reduced_share"] > 0


def test_no_full_thread_reference_still_drops_against_the_one_thread_probe() -> None:
    machine = Machine()
    threads = machine.chooser()
    used = [machine.run(threads, busy=True) for _ in range(10)]  # busy from the first step: 2 threads never fast
    assert used[:2] == [2, 1]  # the first full-thread step, then the probe at one thread
    assert used[2] == 2 and set(used[3:]) == {1}  # slower than one thread: dropped
    assert threads.drops == 1


def test_a_raise_that_proves_wrong_doubles_the_hold() -> None:
    machine = Machine()
    machine.other_idle_cores = 1.0
    threads = machine.chooser(hold_s=0.5, max_hold_s=2.0)
    for _ in range(3):
        machine.run(threads)
    holds = []
    for _ in range(4):  # the idle figure lies (a container's /proc/stat shows the host): each raise is slow
        machine.run(threads, busy=True)  # a slow full-thread step: drop
        while threads.threads == 1:
            machine.now += 0.05
            machine.idle += 0.05
            machine.run(threads)
        holds.append(threads.hold_s)
    assert holds == [0.5, 1.0, 2.0, 2.0]  # the first drop follows no raise; then doubled up to the cap
    for _ in range(100):  # a raise that holds (twice the hold: 4 s) resets the hold
        machine.run(threads)
    assert threads.hold_s == 0.5


def test_prefill_steps_teach_nothing_and_one_thread_is_left_alone() -> None:
    machine = Machine()
    threads = machine.chooser()
    for _ in range(5):
        machine.run(threads, decode=False, busy=True)
    assert threads.fastest == {} and threads.drops == 0
    single = StepThreads(1, machine.applied.append)
    with single.step(3, True):
        pass
    assert single.steps == 0 and single.stats()["threads"] == 1
    with pytest.raises(ValueError):
        StepThreads(0, machine.applied.append)


def test_without_an_idle_figure_the_full_count_is_tried_after_the_hold() -> None:
    machine = Machine()
    threads = StepThreads(2, machine.applied.append, idle_s=lambda: None, clock=lambda: machine.now)
    for _ in range(3):
        machine.run(threads)
    machine.run(threads, busy=True)
    assert threads.threads == 1
    machine.now += 0.6
    assert machine.run(threads) == 2


def test_proc_stat_idle_is_read_or_none(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 5 400 100 0 0 0 0 0\ncpu0 5 0 2 200 50 0 0 0 0 0\n")
    import os

    assert proc_stat_idle_s(str(stat)) == pytest.approx(500 / os.sysconf("SC_CLK_TCK"))
    assert proc_stat_idle_s(str(tmp_path / "missing")) is None
    stat.write_text("garbage\n")
    assert proc_stat_idle_s(str(stat)) is None


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.test_llm_batch import alone, chat, folder, loaded  # noqa: E402,F401


class Alternating(StepThreads):
    """Switches between one and two threads on every step, recording the thread that applied each count."""

    def __init__(self) -> None:
        super().__init__(2, self._set)
        self.setters: set[int] = set()
        self.counts: list[int] = []

    def _set(self, n: int) -> None:
        torch.set_num_threads(n)
        self.setters.add(threading.get_ident())

    def _choose(self) -> int:
        self.counts.append(1 + len(self.counts) % 2)
        return self.counts[-1]


def test_the_engine_answers_the_same_on_every_thread_count(folder: Path) -> None:  # noqa: F811
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        fixed = loaded(folder, adaptive_threads=False)
        assert fixed.step_threads is None
        requests = [chat("translate into spanish", "good morning everyone"),
                    chat("translate into german", "thank you very much"),
                    chat("translate into italian", "the meeting starts now")]
        expected = [alone(fixed, r) for r in requests]
        expected_many = [(r.text, r.finish_reason) for r in fixed.generate_many(requests)]

        engine = loaded(folder)
        assert isinstance(engine.step_threads, StepThreads) and engine.step_threads.max_threads == 2
        engine.step_threads = switching = Alternating()
        results: list[Any] = []
        worker = threading.Thread(target=lambda: results.extend(
            [[alone(engine, r) for r in requests], engine.generate_many(requests)]))
        worker.start()
        worker.join(60)
        assert results[0] == expected
        assert [(r.text, r.finish_reason) for r in results[1]] == expected_many
        assert set(switching.counts) == {1, 2} and switching.setters == {worker.ident}
    finally:
        torch.set_num_threads(before)
