"""The LLM engine contract: :class:`ChatEngine`, a worker engine whose model call is a blocking generator.

The engine side is a plain blocking generator (:meth:`ChatEngine.generate`), easy to write and to test; the base
class's ``run_batch`` drives it and pushes each delta into the job's sink. Chats go through :meth:`Worker.call`
like every other model call, so an LLM gets the worker's bounded queue (``AtCapacity(code="engine_overloaded")``
when full), its concurrency limit (``EngineSpec.concurrency`` threads: 1 for the embedded model on a small CPU,
more for a remote server), queue-delay and run-time metrics and call timeouts, with nothing LLM-specific in the
worker. Leases are not used: a chat holds no state in the engine between calls (the whole history travels in
each request), so the limit is per generation, not per session.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from rtc_agent.engines.llm.job import CancelToken, ChatJob
from rtc_agent.engines.llm.messages import ChatAccumulator, ChatDelta, ChatRequest, ChatResult

log = logging.getLogger(__name__)


class ChatEngine(ABC):
    """Base of LLM engines (the worker's :class:`~rtc_agent.worker.Engine` contract plus :meth:`generate`).

    Subclasses implement ``load(progress)`` (optional), ``generate(request, cancel)`` and ``close()`` (optional).
    ``run_batch`` accepts :class:`ChatJob` or bare :class:`ChatRequest` items and returns one
    :class:`ChatResult` (or the ``Exception`` that ended it) per item; the jobs of a batch run one after the
    other, so register chat engines with ``max_batch=1`` and scale with ``concurrency``.
    """

    #: The model name reported in results and session descriptions.
    model_name: str = ""

    def load(self, progress: Callable[[str], None]) -> None:  # noqa: B027 - optional hook
        """Load weights or check the server; blocking."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; blocking."""

    @abstractmethod
    def generate(self, request: ChatRequest, cancel: CancelToken) -> Iterator[ChatDelta]:
        """Generate one reply; a blocking generator, run in a worker thread.

        Yields text and tool-call deltas as they are produced, and ends with one delta whose ``finish_reason`` is
        set. When ``cancel`` fires it stops promptly (between tokens, or by closing its connection) and ends with
        ``finish_reason="cancelled"``; errors raised after a cancel are ignored by ``run_batch``. Closing the
        generator early (``.close()``) must release everything it holds. Errors are ``EngineError`` with a
        specific ``code`` where the cause is known.
        """

    def run_batch(self, requests: list[Any]) -> list[Any]:
        return [self._run_job(item) for item in requests]

    def _run_job(self, item: Any) -> ChatResult | Exception:
        if isinstance(item, ChatRequest):
            item = ChatJob(item)
        if not isinstance(item, ChatJob):
            return TypeError(f"a chat engine takes ChatJob or ChatRequest items, got {type(item).__name__}")
        job = item
        job.started.set()
        acc = ChatAccumulator()
        start = time.monotonic()
        first: float | None = None
        if job.cancel.cancelled:  # cancelled while queued: do not start
            return ChatResult(text="", finish_reason="cancelled", model=self.model_name)
        gen = self.generate(job.request, job.cancel)
        try:
            for delta in gen:
                if first is None and (delta.text or delta.tool_calls):
                    first = time.monotonic() - start
                acc.add(delta)
                if job.sink is not None:
                    job.sink(delta)
                if job.cancel.cancelled:
                    break
        except Exception as exc:
            if not job.cancel.cancelled:
                return exc
            log.debug("%s: error after cancel ignored: %r", type(self).__name__, exc)
        finally:
            gen.close()
        if job.cancel.cancelled:
            acc.finish_reason = "cancelled"
        return acc.result(model=self.model_name, first_token_s=first, duration_s=time.monotonic() - start)
