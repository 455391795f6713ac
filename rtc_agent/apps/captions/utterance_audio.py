"""``UtteranceAudio``: the audio of the utterance being captioned, with its position on the session clock."""

from __future__ import annotations

import numpy as np

from rtc_agent.engines.asr.base import SAMPLE_RATE

__all__ = ["UtteranceAudio"]


class UtteranceAudio:
    """16 kHz float32 audio from ``start_ms`` (session clock) on, appended in order; cut at either end."""

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []
        self.samples = 0
        self.start_ms = 0

    @property
    def duration_ms(self) -> int:
        return self.samples * 1000 // SAMPLE_RATE

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.duration_ms

    def append(self, pcm: np.ndarray) -> None:
        self._chunks.append(pcm)
        self.samples += len(pcm)

    def audio(self) -> np.ndarray:
        """All of it, as one array."""
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0] if self._chunks else np.zeros(0, dtype=np.float32)

    def reset(self, audio: np.ndarray, start_ms: int) -> None:
        """Hold ``audio`` (possibly empty), starting at ``start_ms``, instead of what it held."""
        self._chunks, self.samples = ([audio], len(audio)) if len(audio) else ([], 0)
        self.start_ms = start_ms

    def clear(self, start_ms: int | None = None) -> None:
        """Hold nothing, from ``start_ms`` on (``None``: where it started)."""
        self._chunks, self.samples = [], 0
        if start_ms is not None:
            self.start_ms = start_ms

    def keep_until(self, end_ms: int) -> None:
        """Drop what lies after ``end_ms``."""
        keep = max(0, (end_ms - self.start_ms) * SAMPLE_RATE // 1000)
        if keep < self.samples:
            self.reset(self.audio()[:keep], self.start_ms)

    def drop_first(self, samples: int, start_ms: int) -> None:
        """Drop the first ``samples``; what is left starts at ``start_ms``."""
        self.reset(self.audio()[samples:], start_ms)
