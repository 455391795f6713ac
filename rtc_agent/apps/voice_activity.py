"""``VoiceActivity``: Silero VAD for one session's audio, run through the worker, one callback per window.

Apps push 16 kHz audio as it arrives; a task takes every complete 32 ms window, asks the ``vad`` engine (batched
with other sessions' windows) and calls ``on_window(prob, start_ms, end_ms)`` in order. Audio waiting for the VAD
is bounded: past ``backlog_limit_s`` the oldest is dropped and counted.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from rtc_agent.engines.vad import WINDOW_SAMPLES, VadRequest, VadStream

SAMPLE_RATE = 16000
WINDOW_MS = WINDOW_SAMPLES * 1000 // SAMPLE_RATE

WindowHandler = Callable[[float, int, int], None]


class VoiceActivity:
    def __init__(self, worker: Any, on_window: WindowHandler, *, engine: str = "vad",
                 backlog_limit_s: float = 10.0) -> None:
        self.worker = worker
        self.on_window = on_window
        self.engine = engine
        self.backlog_limit = int(backlog_limit_s * SAMPLE_RATE)
        self.stream = VadStream()
        self.dropped_ms = 0
        self.windows = 0
        self._pending: deque[np.ndarray] = deque()
        self._pending_samples = 0
        self._position = 0  # session-clock sample of the first pending sample
        self._wake = asyncio.Event()

    def push(self, audio: np.ndarray, start_ms: int) -> None:
        """16 kHz mono float32 audio, in order; never blocks."""
        if self._pending_samples == 0:
            self._position = start_ms * SAMPLE_RATE // 1000
        self._pending.append(audio)
        self._pending_samples += len(audio)
        while self._pending_samples > self.backlog_limit:
            old = self._pending.popleft()
            self._pending_samples -= len(old)
            self._position += len(old)
            self.dropped_ms += len(old) * 1000 // SAMPLE_RATE
        self._wake.set()

    def _take(self) -> tuple[np.ndarray, int] | None:
        n = self._pending_samples // WINDOW_SAMPLES
        if n == 0:
            return None
        audio = np.concatenate(self._pending)
        take = n * WINDOW_SAMPLES
        rest = audio[take:]
        self._pending = deque([rest]) if len(rest) else deque()
        self._pending_samples = len(rest)
        start = self._position
        self._position += take
        return audio[:take].reshape(n, WINDOW_SAMPLES), start

    async def run(self) -> None:
        """Process windows until cancelled (the owning session's task)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while (taken := self._take()) is not None:
                windows, start_sample = taken
                probs = await self.worker.call(self.engine, VadRequest(self.stream, windows))
                start_ms = start_sample * 1000 // SAMPLE_RATE
                for i, prob in enumerate(probs):
                    self.windows += 1
                    w_start = start_ms + i * WINDOW_MS
                    self.on_window(float(prob), w_start, w_start + WINDOW_MS)
