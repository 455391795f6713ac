"""``AudioRing``: the last seconds of a session's 16 kHz audio with their session-clock positions."""

from __future__ import annotations

from collections import deque

import numpy as np

SAMPLE_RATE = 16000


class AudioRing:
    """The last ``seconds`` of 16 kHz audio with their session-clock positions; slices by time."""

    def __init__(self, seconds: float) -> None:
        self.limit = int(seconds * SAMPLE_RATE)
        self.chunks: deque[tuple[int, np.ndarray]] = deque()
        self.samples = 0

    def push(self, audio: np.ndarray, start_ms: int) -> None:
        self.chunks.append((start_ms, audio))
        self.samples += len(audio)
        while self.samples - len(self.chunks[0][1]) >= self.limit:
            self.samples -= len(self.chunks.popleft()[1])

    def slice(self, from_ms: int, to_ms: int) -> np.ndarray:
        parts = []
        for start, audio in self.chunks:
            end = start + len(audio) * 1000 // SAMPLE_RATE
            if end <= from_ms or start >= to_ms:
                continue
            a = max(0, (from_ms - start) * SAMPLE_RATE // 1000)
            b = min(len(audio), (to_ms - start) * SAMPLE_RATE // 1000)
            parts.append(audio[a:b])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    @property
    def start_ms(self) -> int:
        return self.chunks[0][0] if self.chunks else 0

    @property
    def end_ms(self) -> int:
        if not self.chunks:
            return 0
        start, audio = self.chunks[-1]
        return start + len(audio) * 1000 // SAMPLE_RATE
