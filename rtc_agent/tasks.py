"""Ending background tasks: the one way every part of the server stops a task it started."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (None: nothing to do) and wait until it has ended; its cancellation is not re-raised.
    Any other exception the task ends with propagates."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def wait_tasks(tasks: Iterable[asyncio.Task[Any]], timeout: float, *, name: str = "") -> None:
    """Wait up to ``timeout`` seconds for (already cancelled) tasks to finish; log the ones that did not (``name``:
    whose tasks they are, for the log)."""
    tasks = [t for t in tasks if not t.done()]
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        log.warning("%s: task %s did not stop within %.1f s", name, task.get_name(), timeout)
