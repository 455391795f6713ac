"""A hung asyncio test fails with its name and what it waited for, and the run goes on.

pytest-timeout (``timeout`` in pyproject.toml, thread method) is the backstop: it ends the whole run with every
thread's stack, which for an async test shows only the event loop idling in ``select`` and not which test or which
await. Before it, this watchdog gives each phase of a test (setup, call, teardown) ``HUNG_TEST_S``
(``RTC_TEST_HANG_S`` in the environment, or the test's own ``@pytest.mark.hang_limit(seconds)``); then it prints
the test's id and the stack of every task of the loop the phase runs on and cancels those tasks (the test fails or
errors with ``CancelledError``; the next test starts). When the loop does not answer within ``LOOP_ANSWER_S`` (a
loop blocked in code that never yields), it prints the thread's stack instead and leaves the rest to pytest-timeout.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
import threading
import traceback
from collections.abc import Generator
from types import FrameType
from typing import Any

import pytest

HUNG_TEST_S = float(os.environ.get("RTC_TEST_HANG_S", "480"))  # 14x the longest test here (34 s natively)
LOOP_ANSWER_S = 10.0


def _limit_s(item: pytest.Item) -> float:
    marker = item.get_closest_marker("hang_limit")
    return float(marker.args[0]) if marker is not None and marker.args else HUNG_TEST_S


def _running_loop(frame: FrameType | None) -> asyncio.AbstractEventLoop | None:
    """The event loop whose ``run_forever`` is on the stack ending in ``frame`` (the test's thread)."""
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, asyncio.AbstractEventLoop) and frame.f_code.co_name == "run_forever":
            return owner
        frame = frame.f_back
    return None


def _report(item: pytest.Item, text: str) -> None:
    """Write past pytest's output capture, so the words survive even when pytest-timeout ends the run later."""
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    finally:
        if capture is not None:
            capture.resume_global_capture()


def _tasks_report(loop: asyncio.AbstractEventLoop) -> str:
    out = io.StringIO()
    for task in asyncio.all_tasks(loop):
        out.write(f"--- {task!r}\n")
        task.print_stack(limit=12, file=out)
    return out.getvalue()


class _Watchdog:
    """Watches one phase (``setup``, ``call``, ``teardown``) of ``item`` on the thread that runs it."""

    def __init__(self, item: pytest.Item, phase: str) -> None:
        self.item = item
        self.phase = phase
        self.thread_id = threading.get_ident()
        self.limit_s = _limit_s(item)
        self.timer = threading.Timer(self.limit_s, self._fire)
        self.timer.daemon = True

    def _thread_stack(self) -> str:
        return "".join(traceback.format_stack(sys._current_frames().get(self.thread_id)))

    def _fire(self) -> None:
        item = self.item
        head = (f"\n{'=' * 30} HUNG TEST: {item.nodeid} ({self.phase}) still running after {self.limit_s:.0f} s "
                f"{'=' * 30}\n")
        loop = _running_loop(sys._current_frames().get(self.thread_id))
        if loop is None:
            _report(item, head + "no event loop runs it; its thread's stack:\n" + self._thread_stack())
            return
        answered = threading.Event()

        def cancel_everything() -> None:
            try:
                _report(item, head + "the loop's tasks (cancelled now, so the run goes on):\n" + _tasks_report(loop))
                for task in asyncio.all_tasks(loop):
                    task.cancel()
            finally:
                answered.set()

        loop.call_soon_threadsafe(cancel_everything)
        if not answered.wait(LOOP_ANSWER_S):
            _report(item, head + f"its event loop did not answer within {LOOP_ANSWER_S:.0f} s; the loop thread's "
                    "stack:\n" + self._thread_stack())

    def __enter__(self) -> _Watchdog:
        self.timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    with _Watchdog(item, "setup"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    with _Watchdog(item, "call"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    with _Watchdog(item, "teardown"):
        return (yield)
