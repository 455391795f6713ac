"""The scripted chat model: a worker engine of the ``llm`` kind (a :class:`ChatEngine`) that streams scripted
replies, for :class:`~rtc_agent.engines.llm.LLMClient` or a plain ``worker.call`` to consume."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from rtc_agent.engines.llm import CancelToken, ChatDelta, ChatEngine, ChatRequest, Usage

__all__ = ["Reply", "ScriptedChat"]

#: One scripted reply: its text in one piece, its text in streamed pieces (raw ``<tool_call>`` markup allowed), or
#: the ``Exception`` that generation raises.
Reply = str | Sequence[str] | Exception


class ScriptedChat(ChatEngine):
    """Each generation plays the next reply of ``replies``; records every request.

    - When the script has run out it plays ``default`` (``None``: the generation fails with ``IndexError``).
    - Each piece is a text delta, ``delay_s`` after the one before (the wait ends early when the job is cancelled,
      and the generation then ends with ``finish_reason="cancelled"``); the last delta has
      ``finish_reason="stop"`` and ``usage``.
    - ``requests``: every :class:`ChatRequest`, in the order the generations started.
    """

    model_name = "scripted"

    def __init__(self, *replies: Reply, default: Reply | None = None, usage: Usage | None = None,
                 delay_s: float = 0.0) -> None:
        self.replies: list[Reply] = list(replies)
        self.default = default
        self.usage = usage
        self.delay_s = delay_s
        self.requests: list[ChatRequest] = []
        self._lock = threading.Lock()

    def next_reply(self) -> Reply:
        """The reply the next generation plays (taken off the script)."""
        with self._lock:
            if self.replies:
                return self.replies.pop(0)
        if self.default is None:
            raise IndexError("the scripted chat ran out of replies")
        return self.default

    def generate(self, request: ChatRequest, cancel: CancelToken) -> Iterator[ChatDelta]:
        """Stream the next reply (see the class docstring)."""
        with self._lock:
            self.requests.append(request)
        reply = self.next_reply()
        if isinstance(reply, Exception):
            raise reply
        for piece in [reply] if isinstance(reply, str) else reply:
            if self.delay_s > 0 and cancel.wait(self.delay_s):
                yield ChatDelta(finish_reason="cancelled")
                return
            yield ChatDelta(text=piece)
        yield ChatDelta(finish_reason="stop", usage=self.usage)
