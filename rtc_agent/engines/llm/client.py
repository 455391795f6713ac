"""What an app holds to talk to a chat engine: :class:`LLMClient`, streamed or whole replies through the worker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rtc_agent.engines.llm.job import ChatJob
from rtc_agent.engines.llm.messages import ChatRequest, ChatResult
from rtc_agent.engines.llm.stream import ChatStream

if TYPE_CHECKING:
    from rtc_agent.worker import Worker


class LLMClient:
    """What an app holds to talk to a chat engine registered with a :class:`~rtc_agent.worker.Worker`.

    ``stream(request)`` starts a streamed generation (see :class:`ChatStream`); ``complete(request)`` returns the
    whole :class:`ChatResult`. ``timeout`` (seconds, None = none) bounds queueing, loading and the whole
    generation of one call; ``buffer`` is the bridge's capacity in deltas.
    """

    def __init__(self, worker: Worker, name: str = "llm", *, timeout: float | None = None, buffer: int = 32) -> None:
        self.worker = worker
        self.name = name
        self.timeout = timeout
        self.buffer = buffer

    def stream(self, request: ChatRequest, *, timeout: float | None = None) -> ChatStream:
        """Start generating now; must be called on the worker's event loop."""
        limit = self.timeout if timeout is None else timeout
        return ChatStream(lambda job: self.worker.call(self.name, job, timeout=limit), request, buffer=self.buffer)

    async def complete(self, request: ChatRequest, *, timeout: float | None = None) -> ChatResult:
        """The whole reply. Cancelling the caller stops the generation."""
        limit = self.timeout if timeout is None else timeout
        job = ChatJob(request)
        try:
            return await self.worker.call(self.name, job, timeout=limit)
        except BaseException:
            job.cancel.cancel()
            raise
