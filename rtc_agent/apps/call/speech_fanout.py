"""One synthesis played on several listeners' speech tracks at once.

:class:`FanoutSink` is a :class:`~rtc_agent.apps.base.SpeechSink` over the sinks of the listeners who currently
hear an interpretation (they come and go between utterances); each utterance it starts is a
:class:`FanoutHandle` over one utterance per listener.

A listener's sink may fail at any time: its session ended (its speech track is no longer live) or its queue is
full. A failing sink never fails the fan-out: the utterance plays on the others; a sink whose track has ended
is dropped from ``sinks`` (``gone`` counts them), one that is only full misses that utterance.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from rtc_agent.apps.base import SpeechSink, UtteranceHandle

log = logging.getLogger(__name__)

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

    def _each(self, action: Callable[[UtteranceHandle], None]) -> None:
        for h in self.handles:
            try:
                action(h)
            except Exception as exc:  # that listener's track ended or is full: the others go on
                log.info("an interpretation listener's utterance failed: %s", exc)

    def write(self, pcm: np.ndarray) -> None:
        self._each(lambda h: h.write(pcm))

    def finish(self) -> None:
        self._each(lambda h: h.finish())


def _ended(sink: Any) -> bool:
    """Whether ``sink`` is a media track that has ended (its session closed)."""
    return getattr(sink, "readyState", "live") == "ended"


class FanoutSink:
    """A :class:`SpeechSink` that plays on every sink of ``sinks`` (listener id -> its sink) at once."""

    def __init__(self) -> None:
        self.sinks: dict[str, SpeechSink] = {}
        self.gone = 0  # sinks dropped because their track ended
        self.missed = 0  # utterances a live sink could not take

    def _start(self, start: Callable[[SpeechSink], UtteranceHandle]) -> FanoutHandle:
        handles = []
        for pid, sink in list(self.sinks.items()):
            try:
                handles.append(start(sink))
            except Exception as exc:
                if _ended(sink):
                    self.sinks.pop(pid, None)
                    self.gone += 1
                    log.info("interpretation listener %s has gone: dropped from the fan-out", pid)
                else:
                    self.missed += 1
                    log.info("interpretation listener %s missed an utterance: %s", pid, exc)
        return FanoutHandle(handles)

    def start_utterance(self, sample_rate: int, *, utterance_id: str | None = None,
                        response_id: str | None = None) -> FanoutHandle:
        return self._start(lambda s: s.start_utterance(sample_rate, utterance_id=utterance_id,
                                                       response_id=response_id))

    def play(self, pcm: np.ndarray, sample_rate: int, *, utterance_id: str | None = None,
             response_id: str | None = None) -> FanoutHandle:
        return self._start(lambda s: s.play(pcm, sample_rate, utterance_id=utterance_id, response_id=response_id))

    def _all(self, action: Callable[[SpeechSink], Any]) -> list[Any]:
        out: list[Any] = []
        for pid, sink in list(self.sinks.items()):
            try:
                out.append(action(sink))
            except Exception as exc:
                log.info("interpretation listener %s: %s", pid, exc)
        return out

    def clear(self) -> list[Any]:
        return [u for cut in self._all(lambda s: s.clear()) for u in (cut or [])]

    def pause(self) -> None:
        self._all(lambda s: s.pause())

    def resume(self) -> None:
        self._all(lambda s: s.resume())

    @property
    def busy(self) -> bool:
        return any(s.busy for s in self.sinks.values() if not _ended(s))
