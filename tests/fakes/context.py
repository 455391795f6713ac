"""The scripted app context: the slice of a session (``AppContext``) that apps use, for tests that drive an app
without a server.

It keeps what the app does in plain sight: the emitted events in order, the spawned tasks for awaiting, and a
clock the test drives (``ms``). The worker is whatever the test hands in: normally a real
:class:`~rtc_agent.worker.Worker` with scripted engines registered (see :mod:`tests.fakes.worker`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from typing import Any

from rtc_agent.config import Settings

__all__ = ["ScriptedAppContext"]


class ScriptedAppContext:
    """An app context driven by the test.

    - ``worker``: the worker the app calls (``None`` for apps that call no engine).
    - ``settings``: the base settings (default ``Settings()``), with ``overrides`` applied on top (a copy; without
      overrides the very object given).
    - ``session_id``, ``speech`` (the audio output, ``None``: the app speaks nowhere), ``close_reason`` (why the
      session ends, read by apps when they close) and ``ms`` (what ``now_ms()`` answers) are plain attributes a
      test may change at any time.
    - ``events``: every event the app emitted, in order; ``tasks``: every task it spawned, in order.
    """

    def __init__(self, worker: Any = None, *, settings: Settings | None = None, session_id: str = "sess_test",
                 speech: Any = None, close_reason: str | None = None, ms: int = 0, **overrides: Any) -> None:
        self.worker = worker
        base = settings if settings is not None else Settings()
        self.settings = dataclasses.replace(base, **overrides) if overrides else base
        self.session_id = session_id
        self.speech = speech
        self.close_reason = close_reason
        self.ms = ms
        self.events: list[Any] = []
        self.tasks: list[asyncio.Task[Any]] = []

    def now_ms(self) -> int:
        """The session clock: ``ms``, as the test set it."""
        return self.ms

    def emit(self, event: Any) -> None:
        """Keep ``event`` (in order)."""
        self.events.append(event)

    def observe(self, stage: str, seconds: float) -> None:
        """Stage timings are not recorded."""

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a task on the running loop and keep the task (``tasks``)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.append(task)
        return task

    def of(self, kind: str | type) -> list[Any]:
        """The emitted events of one kind: a ``type`` string (``"caption.final"``) or an event class."""
        if isinstance(kind, type):
            return [e for e in self.events if isinstance(e, kind)]
        return [e for e in self.events if e.type == kind]

    def types(self) -> list[str]:
        """The ``type`` of every emitted event, in order; an error shows as ``error:<code>``."""
        return [e.type if e.type != "error" else f"error:{e.error.code}" for e in self.events]
