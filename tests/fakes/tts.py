"""The scripted speech synthesizer: a worker engine of the ``tts`` kind that speaks a constant tone."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from rtc_agent.engines.tts import Synthesis, SynthesisRequest, TTSEngine
from rtc_agent.errors import EngineError

__all__ = ["HOLD_GUARD_S", "ScriptedTTS", "ms_per_char"]

HOLD_GUARD_S = 10.0  # a held text waits at most this long for the gate: a hang guard, never a latency assertion


def ms_per_char(text: str) -> float:
    """The default speech length: one millisecond per character of the text, in seconds."""
    return len(text) / 1000


class ScriptedTTS(TTSEngine):
    """Says each text as a constant tone of ``seconds(text)`` (default :func:`ms_per_char`) at ``sample_rate``.

    - ``hold``: texts that wait for ``gate`` (a ``threading.Event``; at most :data:`HOLD_GUARD_S`) before they are
      spoken; ``started`` is set when the engine takes its first request.
    - ``fail``: texts answered with ``EngineError(code="scripted")``.
    - ``ran``: every request, in the order the engine took them.
    """

    voice = "scripted"
    sample_rate = 16000

    def __init__(self, hold: tuple[str, ...] = (), fail: tuple[str, ...] = (), *,
                 seconds: Callable[[str], float] = ms_per_char, level: int = 1000) -> None:
        self.hold = hold
        self.fail = fail
        self.seconds = seconds
        self.level = level
        self.gate = threading.Event()
        self.started = threading.Event()
        self.ran: list[SynthesisRequest] = []

    def load(self, progress: Callable[[str], None]) -> None:
        """Nothing to load."""

    def run_batch(self, requests: list[SynthesisRequest]) -> list[Synthesis | Exception]:
        """One :class:`Synthesis` (or the scripted failure) per request, in order."""
        out: list[Synthesis | Exception] = []
        for r in requests:
            self.ran.append(r)
            self.started.set()
            if r.text in self.hold:
                self.gate.wait(HOLD_GUARD_S)
            if r.text in self.fail:
                out.append(EngineError("scripted failure", code="scripted"))
                continue
            pcm = np.full(round(self.sample_rate * self.seconds(r.text)), self.level, dtype=np.int16)
            out.append(Synthesis(pcm=pcm, sample_rate=self.sample_rate, text=r.text, voice=r.voice or self.voice,
                                 speed=r.speed))
        return out

    def close(self) -> None:
        """Nothing to release (a held text still waits for ``gate``)."""
