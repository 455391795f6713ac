"""Browser tool calls in flight: sent to the page, waiting for its ``function_call_output``."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from rtc_agent.apps.agent.tool import ToolResult, tool_failure

__all__ = ["PendingBrowserCalls"]


class PendingBrowserCalls:
    """Browser tool calls waiting for the page's ``function_call_output``. One per session, on its event loop.

    ``expect(call_id, name)`` before sending ``response.function_call_arguments.done``; ``resolve(call_id,
    output)`` when the ``function_call_output`` item arrives; ``await wait(call_id, timeout_s)`` gives the
    :class:`ToolResult` (``browser_timeout`` when the page did not answer in time). ``cancel_all`` (barge-in,
    session end) answers every waiter with ``cancelled``.
    """

    def __init__(self) -> None:
        self._calls: dict[str, tuple[str, asyncio.Future[str], float]] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._calls

    def expect(self, call_id: str, name: str) -> None:
        if call_id in self._calls:
            raise ValueError(f"call {call_id!r} is already pending")
        self._calls[call_id] = (name, asyncio.get_running_loop().create_future(), time.monotonic())

    def resolve(self, call_id: str, output: Any) -> bool:
        """Deliver the page's output (a string; anything else is JSON-encoded). False for an unknown, late or
        duplicate ``call_id`` (the caller may report it as an error event)."""
        entry = self._calls.get(call_id)
        if entry is None or entry[1].done():
            return False
        if not isinstance(output, str):
            output = json.dumps(output, ensure_ascii=False, default=str)
        entry[1].set_result(output)
        return True

    async def wait(self, call_id: str, timeout_s: float) -> ToolResult:
        entry = self._calls.get(call_id)
        if entry is None:
            raise KeyError(f"no pending browser call {call_id!r}")
        name, future, start = entry
        try:
            async with asyncio.timeout(timeout_s):
                output = await asyncio.shield(future)
        except TimeoutError:
            return tool_failure(call_id, name, "browser_timeout",
                            f"the page did not answer {name} within {timeout_s:g} s", start)
        except asyncio.CancelledError:
            if future.cancelled():
                return tool_failure(call_id, name, "cancelled", f"{name} was cancelled", start)
            raise
        finally:
            self._calls.pop(call_id, None)
            if not future.done():
                future.cancel()
        return ToolResult(call_id, name, ok=True, output=output, duration_s=time.monotonic() - start)

    def cancel_all(self) -> None:
        """Answer every pending call with ``cancelled`` and forget them all."""
        calls, self._calls = self._calls, {}
        for _name, future, _start in calls.values():
            if not future.done():
                future.cancel()
