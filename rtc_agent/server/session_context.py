"""The members of :class:`~rtc_agent.apps.base.AppContext` that every kind of session implements alike.

:class:`SessionContext` is mixed into the WebRTC :class:`~rtc_agent.server.session.Session` and the Realtime
WebSocket session: ``session_id``, ``observe`` (the stage-latency histogram) and ``spawn``, the tasks a session
owns. A spawned task is named ``<session id>:<name>`` and kept in the session's ``_tasks`` until it is done; its
failure is logged and reported to the client (:meth:`SessionContext.report_failure`), and when ``<name>`` is one of
the session's ``critical_tasks`` (one it cannot go on without) the session ends with ``internal_error``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, ClassVar

from rtc_agent.errors import AgentError

log = logging.getLogger(__name__)


class SessionContext:
    """See the module docstring. Subclasses set ``id``, ``metrics``, ``_tasks`` and ``critical_tasks``, and
    implement :meth:`report_failure` and :meth:`close_soon`."""

    critical_tasks: ClassVar[frozenset[str]] = frozenset()

    id: str
    metrics: Any  # rtc_agent.metrics.Metrics
    _tasks: set[asyncio.Task]

    @property
    def session_id(self) -> str:
        return self.id

    def observe(self, stage: str, seconds: float) -> None:
        self.metrics.stage_latency.labels(stage=stage).observe(max(0.0, seconds))

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        """Run a task the session owns (cancelled when it ends); see the module docstring for its failure."""
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.id}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def report_failure(self, exc: AgentError) -> None:
        """Tell the client that one of the session's tasks failed (an ``error`` event)."""
        raise NotImplementedError

    def close_soon(self, reason: str) -> None:
        """Schedule the session's close from a callback or from one of its own tasks."""
        raise NotImplementedError

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        log.error("session %s task %s failed", self.id, task.get_name(), exc_info=exc)
        self.report_failure(exc if isinstance(exc, AgentError) else AgentError(f"internal error: {exc}"))
        if task.get_name().split(":", 1)[-1] in self.critical_tasks:
            self.close_soon("internal_error")
