"""The scripted vision engine: a :class:`VLMEngine` whose realtime sessions decode from a token source the test
scripts (``tests.test_vision_session.ScriptedSource``, or any ``TokenSource``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rtc_agent.engines.vlm import SessionOptions, VLMEngine
from rtc_agent.engines.vlm.realtime import RealtimeVisionSession

__all__ = ["ScriptedVLM"]


class ScriptedVLM(VLMEngine):
    """A vision engine whose every session runs a fresh token source made by ``make_source()``.

    Loading, the one-session-per-instance slot and closing are the real :class:`VLMEngine`'s; the session is a
    real :class:`RealtimeVisionSession` over the source, with the options the app asked for. ``sources``: the
    source of every session opened, in order.
    """

    def __init__(self, make_source: Callable[[], Any]) -> None:
        super().__init__()
        self.make_source = make_source
        self.sources: list[Any] = []

    def _open(self, options: SessionOptions, release: Callable[[], None]) -> RealtimeVisionSession:
        source = self.make_source()
        self.sources.append(source)
        return RealtimeVisionSession(source, initial_prompt=options.initial_prompt,
                                     frame_queue_size=options.frame_queue_size,
                                     max_tokens_per_turn=options.max_tokens_per_turn,
                                     max_new_tokens=options.max_new_tokens, on_close=release)
