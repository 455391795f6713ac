"""The async side of a streamed chat: :class:`ChatStream`, fed from the engine thread through a
:class:`DeltaBridge`.

:class:`DeltaBridge` is bounded: the engine thread takes a slot before it posts a delta to the loop with
``loop.call_soon_threadsafe`` and the consumer frees the slot when it reads it, so a slow consumer slows the
producer instead of growing a queue. :meth:`ChatStream.aclose` cancels and waits (bounded) until the engine
thread is free again.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Final

from rtc_agent.engines.llm.job import CancelToken, ChatJob
from rtc_agent.engines.llm.messages import ChatDelta, ChatRequest, ChatResult
from rtc_agent.errors import EngineError


class _End:
    """The end-of-stream marker (posted on the loop when the worker call finished, whatever its outcome)."""


_END: Final = _End()


class DeltaBridge:
    """A bounded single-producer (engine thread) / single-consumer (event loop) channel of deltas.

    ``put`` (thread side) blocks while ``maxsize`` deltas are unread, returns at once (dropping the delta) when
    ``cancel`` fired or the loop is closed. ``get``/``release`` are the loop side: ``release`` frees the slot of a
    delta once it was taken. ``finish`` (loop side) posts the end marker, which takes no slot.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, maxsize: int, cancel: CancelToken) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize!r}")
        self._loop = loop
        self._queue: asyncio.Queue[ChatDelta | _End] = asyncio.Queue()
        self._free = threading.Semaphore(maxsize)
        self._cancel = cancel
        self.maxsize = maxsize
        cancel.on_cancel(self._free.release)  # wake a producer blocked on a full bridge

    def put(self, delta: ChatDelta) -> None:
        while not self._free.acquire(timeout=0.1):
            if self._cancel.cancelled:
                return
        if self._cancel.cancelled:
            self._free.release()
            return
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, delta)
        except RuntimeError:  # the loop is closed: nobody will read
            self._cancel.cancel()

    async def get(self) -> ChatDelta | _End:
        return await self._queue.get()

    def release(self) -> None:
        self._free.release()

    def finish(self) -> None:
        self._queue.put_nowait(_END)


class ChatStream:
    """The async side of one streamed generation: ``async for delta in stream`` (or ``async with stream``).

    The generation starts at construction (a task calls ``call(job)``, normally ``Worker.call``). Iteration
    yields every delta the engine produced, in order, and then:

    - ends normally when the generation finished; ``result`` holds the :class:`ChatResult`;
    - raises the error of the call (``EngineError`` with its code, ``AtCapacity`` when the engine's queue is
      full, ``UnknownEngine``) after the deltas that came before it; ``error`` holds it too;
    - ends quietly after :meth:`cancel`/:meth:`aclose` (no error is raised for a cancelled stream).

    Cancelling the task that iterates (e.g. barge-in cancels the turn) cancels the generation too. A stream
    that is dropped without being closed cancels its generation when it is garbage-collected, but call
    :meth:`aclose` (or use ``async with``) so the engine thread is free again before the next turn.

    ``first_delta_s``: loop time from construction to the first delta with content (includes queueing).
    """

    def __init__(self, call: Callable[[ChatJob], Awaitable[Any]], request: ChatRequest, *, buffer: int = 32) -> None:
        loop = asyncio.get_running_loop()
        self.request = request
        self.result: ChatResult | None = None
        self.error: BaseException | None = None
        self.first_delta_s: float | None = None
        self._cancel = CancelToken()
        self._bridge = DeltaBridge(loop, buffer, self._cancel)
        self._job = ChatJob(request, cancel=self._cancel, sink=self._bridge.put)
        self._finished = False
        self._user_cancelled = False  # cancel()/aclose() called (the token also fires when the call failed)
        self._created = loop.time()
        self._loop = loop
        self._task: asyncio.Task[Any] = loop.create_task(_await(call(self._job)), name="rtc_agent.llm.stream")
        # the callback must not hold the stream: a stream dropped by its consumer is then garbage-collected
        # (and its __del__ cancels the generation) even while the task is pending
        self._task.add_done_callback(_finisher(self._bridge, self._cancel))

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` or :meth:`aclose` was called."""
        return self._user_cancelled

    @property
    def done(self) -> bool:
        """True when the generation is over (the engine thread no longer works on it)."""
        return self._task.done()

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> ChatDelta:
        if self._finished:
            raise StopAsyncIteration
        try:
            item = await self._bridge.get()
        except asyncio.CancelledError:
            self.cancel()
            raise
        if isinstance(item, _End):
            self._finished = True
            self._settle()
            if self.error is not None and not self._user_cancelled:
                raise self.error
            raise StopAsyncIteration
        self._bridge.release()
        if self.first_delta_s is None and (item.text or item.tool_calls):
            self.first_delta_s = self._loop.time() - self._created
        return item

    def _settle(self) -> None:
        task = self._task
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.error = exc
        else:
            self.result = task.result()

    def cancel(self) -> None:
        """Stop the generation without waiting: the engine stops at its next token (or its connection is
        closed); a job still queued in the worker is withdrawn. Idempotent."""
        self._user_cancelled = True
        if self._task.done():
            self._cancel.cancel()
            return
        self._cancel.cancel()
        if not self._job.started.is_set():
            self._task.cancel()

    async def aclose(self, grace: float = 5.0) -> None:
        """Cancel (unless already finished) and wait up to ``grace`` seconds for the engine to stop."""
        if not self._task.done():
            self.cancel()
            await asyncio.wait({self._task}, timeout=grace)
        self._finished = True
        if self._task.done():
            self._settle()

    async def collect(self) -> ChatResult:
        """Consume the rest of the stream and return the result (raises the call's error)."""
        async for _ in self:
            pass
        if self.result is None:
            raise EngineError("the generation was cancelled", code="llm_cancelled")
        return self.result

    async def __aenter__(self) -> ChatStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # no loop calls here: only the thread-safe token (wakes the producer, closes a remote connection)
        cancel = getattr(self, "_cancel", None)
        task = getattr(self, "_task", None)
        if cancel is not None and task is not None and not task.done():
            cancel.cancel()


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _finisher(bridge: DeltaBridge, cancel: CancelToken) -> Callable[[asyncio.Task[Any]], None]:
    """The done callback of a stream's task: post the end marker; when the call failed or was cancelled (e.g. the
    worker's timeout), also stop the engine, whose result nobody will read."""

    def done(task: asyncio.Task[Any]) -> None:
        if task.cancelled() or task.exception() is not None:  # exception() also marks it retrieved
            cancel.cancel()
        bridge.finish()

    return done
