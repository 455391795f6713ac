"""The scripted voice-activity detector: a worker engine of the ``vad`` kind (what Silero answers, scripted)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from rtc_agent.engines.vad import VadRequest
from rtc_agent.worker import Engine

__all__ = ["ScriptedVAD", "loud_above"]

#: Speech probabilities for a ``[n, 512]`` block of windows: ``n`` float32 values.
Speech = Callable[[np.ndarray], np.ndarray]


def loud_above(level: float) -> Speech:
    """Speech (1.0) in every window whose peak is above ``level``, silence (0.0) elsewhere."""
    return lambda windows: (np.abs(windows).max(axis=1) > level).astype(np.float32)


class ScriptedVAD(Engine):
    """Answers each :class:`VadRequest` with one speech probability per window.

    - ``speech``: a constant probability for every window (default 0.0: all silence) or a function of the
      windows (e.g. :func:`loud_above`).
    - Like Silero it updates the stream's state: ``request.stream.state`` grows by 1.0 per request, so a test can
      tell whose state the engine advanced and how often.
    - ``delay_s``: each batch takes this long.
    - ``record``: keep every request in ``requests`` (arrival order). Off by default: a detector sees whole streams,
      and keeping their windows would grow memory with the audio; ``calls`` counts the requests either way.

    The class itself is a valid ``EngineSpec.factory`` (a fresh silent detector).
    """

    def __init__(self, speech: float | Speech = 0.0, *, delay_s: float = 0.0, record: bool = False) -> None:
        self.speech = speech
        self.delay_s = delay_s
        self.record = record
        self.requests: list[VadRequest] = []
        self.calls = 0
        self._lock = threading.Lock()

    def load(self, progress: Callable[[str], None]) -> None:
        """Nothing to load."""

    def run_batch(self, requests: list[VadRequest]) -> list[np.ndarray]:
        """One float32 array of ``len(request.windows)`` probabilities per request, in order."""
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        out: list[np.ndarray] = []
        for request in requests:
            with self._lock:
                self.calls += 1
                if self.record:
                    self.requests.append(request)
            request.stream.state = request.stream.state + 1.0
            out.append(self.probabilities(request.windows))
        return out

    def probabilities(self, windows: np.ndarray) -> np.ndarray:
        """The scripted probabilities of ``windows``."""
        if callable(self.speech):
            return self.speech(windows)
        return np.full(len(windows), self.speech, dtype=np.float32)

    def close(self) -> None:
        """Nothing to release."""
