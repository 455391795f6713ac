"""One synthesis played on several listeners' speech tracks at once.

:class:`FanoutSink` is a :class:`~rtc_agent.apps.base.SpeechSink` over the sinks of the listeners who currently
hear an interpretation (they come and go between utterances); each utterance it starts is a
:class:`FanoutHandle` over one utterance per listener.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import numpy as np

from rtc_agent.apps.base import SpeechSink, UtteranceHandle

_ids = itertools.count(1)


class FanoutHandle:
    """One utterance played on several sinks: done when all are done; ``sent_ms`` of the furthest."""

    def __init__(self, handles: list[UtteranceHandle]) -> None:
        self.handles = handles
        self.id = handles[0].id if handles else f"fan_{next(_ids)}"
        loop = asyncio.get_running_loop()
        self.done: asyncio.Future[int] = loop.create_future()
        if not handles:
            self.done.set_result(0)
        else:
            gathered = asyncio.gather(*[h.done for h in handles], return_exceptions=True)
            gathered.add_done_callback(self._finish)

    def _finish(self, fut: asyncio.Future) -> None:
        if not self.done.done():
            self.done.set_result(self.sent_ms)

    @property
    def sent_ms(self) -> int:
        return max((h.sent_ms for h in self.handles), default=0)

    def write(self, pcm: np.ndarray) -> None:
        for h in self.handles:
            h.write(pcm)

    def finish(self) -> None:
        for h in self.handles:
            h.finish()


class FanoutSink:
    """A :class:`SpeechSink` that plays on every sink of ``sinks`` (listener id -> its sink) at once."""

    def __init__(self) -> None:
        self.sinks: dict[str, SpeechSink] = {}

    def start_utterance(self, sample_rate: int, *, utterance_id: str | None = None,
                        response_id: str | None = None) -> FanoutHandle:
        return FanoutHandle([s.start_utterance(sample_rate, utterance_id=utterance_id, response_id=response_id)
                             for s in list(self.sinks.values())])

    def play(self, pcm: np.ndarray, sample_rate: int, *, utterance_id: str | None = None,
             response_id: str | None = None) -> FanoutHandle:
        return FanoutHandle([s.play(pcm, sample_rate, utterance_id=utterance_id, response_id=response_id)
                             for s in list(self.sinks.values())])

    def clear(self) -> list[Any]:
        out: list[Any] = []
        for s in list(self.sinks.values()):
            out += s.clear()
        return out

    def pause(self) -> None:
        for s in list(self.sinks.values()):
            s.pause()

    def resume(self) -> None:
        for s in list(self.sinks.values()):
            s.resume()

    @property
    def busy(self) -> bool:
        return any(s.busy for s in self.sinks.values())
