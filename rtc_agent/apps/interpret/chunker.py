"""``ChunkCutter``: VAD-labelled audio in, policy chunks out, on a fixed grid of the source clock.

Pure logic. It is fed Silero VAD windows (512 samples = 32 ms at 16 kHz) with their speech probabilities, in
order, and cuts them into :class:`AudioChunk` objects: the first exactly
``first_chunk_ms`` (1600 ms = 50 windows), then ``chunk_ms`` (800 ms = 25 windows, or 1600 ms). Both sizes are
whole numbers of windows, so chunk edges fall on window edges and the grid never drifts.

A chunk is voiced when any of its windows is speech: inside an utterance by the :class:`SpeechSegmenter`
(hysteresis plus its hangover after speech), or with a probability at or above the segmenter's lower threshold
(so the first syllables of an utterance, heard before the segmenter confirms it, are not skipped). The VAD state
(``VadStream``) and this grid belong to the caller and are never reset by the policy's context cuts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from rtc_agent.apps.captions.speech_segmenter import SpeechSegmenter

__all__ = ["CHUNK_SIZES_MS", "FIRST_CHUNK_MS", "WINDOW_MS", "WINDOW_SAMPLES", "AudioChunk", "ChunkCutter"]

SAMPLE_RATE = 16000
WINDOW_SAMPLES = 512
WINDOW_MS = WINDOW_SAMPLES * 1000 // SAMPLE_RATE  # 32
FIRST_CHUNK_MS = 1600
CHUNK_SIZES_MS = (800, 1600)  # the sizes of the chunks after the first


@dataclass
class AudioChunk:
    """One policy chunk: ``audio`` (float32, 16 kHz) from ``start_ms`` to ``end_ms`` on the source clock.

    ``voiced`` is the VAD's verdict; ``speech_end_ms`` where the last speech inside it ended (``None``: none);
    ``ready_at`` (``time.monotonic()``) when the chunk was complete.
    """

    index: int
    start_ms: int
    end_ms: int
    audio: np.ndarray
    voiced: bool
    speech_end_ms: int | None = None
    ready_at: float = field(default_factory=time.monotonic)

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms


class ChunkCutter:
    """Cuts a stream of VAD windows into chunks. ``start_ms`` is where the first window starts on the clock."""

    def __init__(self, *, chunk_ms: int = 800, first_chunk_ms: int = FIRST_CHUNK_MS, start_ms: int = 0,
                 threshold: float = 0.5, min_speech_ms: int = 200, min_silence_ms: int = 250) -> None:
        for name, value in (("chunk_ms", chunk_ms), ("first_chunk_ms", first_chunk_ms)):
            if value <= 0 or (value * SAMPLE_RATE // 1000) % WINDOW_SAMPLES:
                raise ValueError(f"{name} must be a positive multiple of {WINDOW_MS} ms, got {value}")
        self.chunk_ms = chunk_ms
        self.first_chunk_ms = first_chunk_ms
        self.segmenter = SpeechSegmenter(threshold=threshold, min_speech_ms=min_speech_ms,
                                         min_silence_ms=min_silence_ms)
        self.index = 0
        self.position_ms = start_ms  # where the next window starts
        self._start_ms = start_ms  # start of the chunk being filled
        self._windows: list[np.ndarray] = []
        self._voiced = False
        self._speech_end_ms: int | None = None

    def start_at(self, start_ms: int) -> None:
        """Put the grid's origin at ``start_ms`` (only before the first window)."""
        if self.index or self._windows:
            raise RuntimeError("the chunk grid is fixed once audio was fed")
        self.position_ms = self._start_ms = start_ms

    def _size_windows(self) -> int:
        size_ms = self.first_chunk_ms if self.index == 0 else self.chunk_ms
        return size_ms * SAMPLE_RATE // 1000 // WINDOW_SAMPLES

    def feed(self, windows: np.ndarray, probs: np.ndarray) -> list[AudioChunk]:
        """``windows`` ``[n, 512]`` float32 and their ``n`` speech probabilities; returns the chunks completed."""
        if len(windows) != len(probs):
            raise ValueError("one probability per window")
        out: list[AudioChunk] = []
        for window, prob in zip(windows, probs, strict=True):
            start = self.position_ms
            end = start + WINDOW_MS
            self.segmenter.feed(float(prob), start, end)
            if self.segmenter.in_speech or prob >= self.segmenter.neg_threshold:
                self._voiced = True
                if self.segmenter.in_speech or prob >= self.segmenter.threshold:
                    self._speech_end_ms = end
            self._windows.append(np.asarray(window, dtype=np.float32))
            self.position_ms = end
            if len(self._windows) >= self._size_windows():
                out.append(self._cut())
        return out

    def _cut(self) -> AudioChunk:
        audio = np.concatenate(self._windows) if self._windows else np.zeros(0, dtype=np.float32)
        chunk = AudioChunk(index=self.index, start_ms=self._start_ms, end_ms=self.position_ms, audio=audio,
                           voiced=self._voiced, speech_end_ms=self._speech_end_ms, ready_at=time.monotonic())
        self.index += 1
        self._start_ms = self.position_ms
        self._windows = []
        self._voiced = False
        self._speech_end_ms = None
        return chunk

    def finish(self) -> AudioChunk | None:
        """The audio ended: the partial last chunk (shorter than the grid), or ``None`` when there is none."""
        if not self._windows:
            return None
        return self._cut()
