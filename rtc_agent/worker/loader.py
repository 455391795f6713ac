"""Loading and closing one engine in its own thread pool, once, shared by every caller."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from rtc_agent.errors import EngineError
from rtc_agent.worker.engine import Engine, EngineSpec
from rtc_agent.worker.failures import closed_error
from rtc_agent.worker.priority import PriorityGate

logger = logging.getLogger("rtc_agent.worker")


def close_quietly(name: str, engine: Any) -> None:
    """Call ``engine.close()`` if it has one; a failure is logged, never raised."""
    close = getattr(engine, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:
        logger.exception("engine %s: close failed", name)


class EngineLoader:
    """Holds one engine: builds and loads it on first use, then keeps the instance until :meth:`close`.

    ``executor`` is the engine's thread pool (the factory, ``Engine.load`` and ``close`` run there);
    ``priority`` gives engines with ``EngineSpec.yields_to`` their step hooks; ``is_closed`` tells whether the
    worker has closed (then nothing new is loaded).
    """

    def __init__(self, spec: EngineSpec, executor: Executor, priority: PriorityGate,
                 is_closed: Callable[[], bool]) -> None:
        self.spec = spec
        self.engine: Engine | None = None
        self.task: asyncio.Task[Engine] | None = None  # the load in progress, shared by its callers
        self.progress = ""
        self._executor = executor
        self._priority = priority
        self._is_closed = is_closed

    @property
    def loading(self) -> bool:
        return self.task is not None and not self.task.done()

    async def load(self) -> Engine:
        """The loaded engine, loading it first if needed.

        The factory and ``Engine.load`` run once in the engine's thread; concurrent callers share that one
        load and later calls return the same instance (even after the worker closed). Progress messages are
        logged on ``rtc_agent.worker`` with the engine name and the elapsed time. A failed load raises
        ``EngineError(code="engine_load_failed")`` (the original as ``__cause__``) and is retried by the next
        call. Cancelling a caller does not cancel the shared load.
        """
        name = self.spec.name
        if self.engine is not None:
            return self.engine
        if self._is_closed():
            raise closed_error(name)
        if self.task is None:
            task = asyncio.get_running_loop().create_task(self._load(), name=f"rtc_agent.worker.load.{name}")
            # the outcome is always consumed here, so an abandoned load never logs "exception never retrieved"
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self.task = task
        task = self.task
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() and task.cancelled():  # the load itself was cancelled (by close), not this caller
                raise closed_error(name) from None
            raise
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(
                f"engine {name!r} failed to load: {type(exc).__name__}: {exc}", code="engine_load_failed"
            ) from exc

    async def _load(self) -> Engine:
        spec = self.spec
        name = spec.name
        start = time.monotonic()
        logger.info("engine %s: loading", name)

        def progress(message: str) -> None:
            self.progress = message
            logger.info("engine %s: %s (%.1f s)", name, message, time.monotonic() - start)

        def build() -> Engine:
            engine = spec.factory()
            try:
                engine.load(progress)
            except BaseException:
                close_quietly(name, engine)
                raise
            # after loading: a warm-up at load time runs outside any batch and need not step aside
            if spec.yields_to and hasattr(engine, "checkpoint"):
                # a job at a lower OS priority holds up no batch (see PriorityGate.step_hooks)
                checkpoint, step_done = self._priority.step_hooks(spec.yields_to, spec.yield_max_s,
                                                                  hold=spec.nice == 0)
                engine.checkpoint = checkpoint  # type: ignore[attr-defined]
                if hasattr(engine, "step_done"):
                    engine.step_done = step_done  # type: ignore[attr-defined]
            if self._is_closed():  # closed while loading: nobody will close it later
                close_quietly(name, engine)
                raise closed_error(name)
            return engine

        try:
            engine = await asyncio.get_running_loop().run_in_executor(self._executor, build)
        except BaseException as exc:
            self.task = None  # the next caller retries
            self.progress = f"load failed: {type(exc).__name__}: {exc}"
            if not isinstance(exc, asyncio.CancelledError):
                logger.error("engine %s: load failed after %.1f s: %r", name, time.monotonic() - start, exc)
            raise
        self.engine = engine
        self.progress = "loaded"
        logger.info("engine %s: loaded in %.1f s", name, time.monotonic() - start)
        return engine

    async def close(self, grace: float) -> None:
        """Close the loaded engine (if any) in its thread, waiting up to ``grace`` seconds."""
        if self.engine is None:
            return
        closing = asyncio.get_running_loop().run_in_executor(self._executor, close_quietly, self.spec.name,
                                                             self.engine)
        try:
            await asyncio.wait_for(closing, grace)
        except TimeoutError:
            logger.warning("engine %s: close did not finish within %.1f s", self.spec.name, grace)
