"""The slice of a session (``AppContext``) that apps use, for tests that drive an app with a scripted worker: a
clock driven by the test (``ms``), the emitted events kept in order, spawned tasks kept for awaiting."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from rtc_agent.config import Settings


class ScriptedAppContext:
    session_id = "sess_test"
    speech = None

    def __init__(self, worker: Any, *, close_reason: str | None = None, **settings: Any) -> None:
        self.worker = worker
        self.settings = dataclasses.replace(Settings(), **settings)
        self.events: list[Any] = []
        self.tasks: list[asyncio.Task] = []
        self.ms = 0
        self.close_reason = close_reason

    def now_ms(self) -> int:
        return self.ms

    def emit(self, event: Any) -> None:
        self.events.append(event)

    def observe(self, stage: str, seconds: float) -> None:
        pass

    def spawn(self, coro: Any, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.append(task)
        return task

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    def types(self) -> list[str]:
        return [e.type if e.type != "error" else f"error:{e.error.code}" for e in self.events]
