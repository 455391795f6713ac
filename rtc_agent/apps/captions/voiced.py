"""How much of a stretch of audio is louder than its recording's noise: a check that words Whisper wrote for audio
the VAD did not take for speech were said, not made up over silence or hiss."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from rtc_agent.engines.asr.base import SAMPLE_RATE

__all__ = ["VoicedAudio"]

FRAME_S = 0.02
#: The noise floor is this percentile of the frames' levels, at least MIN_FLOOR_DB (digital silence has none).
FLOOR_PERCENTILE = 10
MIN_FLOOR_DB = -70.0
#: A frame this far above the floor is voiced.
OVER_FLOOR_DB = 10.0


class VoicedAudio:
    """The 20 ms frames of ``audio`` (16 kHz float32) and its noise floor; :meth:`seconds` counts the voiced ones
    in a span. The levels are computed on the first question (most finals never ask)."""

    def __init__(self, audio: np.ndarray) -> None:
        self.audio = audio

    @cached_property
    def levels_db(self) -> np.ndarray:
        size = int(FRAME_S * SAMPLE_RATE)
        frames = np.asarray(self.audio[: len(self.audio) // size * size], dtype=np.float64).reshape(-1, size)
        return 10 * np.log10(np.mean(frames ** 2, axis=1) + 1e-12) if len(frames) else np.zeros(0)

    @cached_property
    def floor_db(self) -> float:
        levels = self.levels_db
        return max(MIN_FLOOR_DB, float(np.percentile(levels, FLOOR_PERCENTILE)) if len(levels) else MIN_FLOOR_DB)

    def seconds(self, start_s: float, end_s: float, min_run_s: float = 0.0) -> float:
        """Seconds of frames from ``start_s`` to ``end_s`` at least ``OVER_FLOOR_DB`` above the floor, counting only
        runs of at least ``min_run_s`` of them (a click or a key press is shorter than a syllable)."""
        return float(np.count_nonzero(self._voiced(start_s, end_s, min_run_s))) * FRAME_S

    def _voiced(self, start_s: float, end_s: float, min_run_s: float) -> np.ndarray:
        lo, hi = max(0, int(start_s / FRAME_S)), max(0, int(np.ceil(end_s / FRAME_S)))
        voiced = self.levels_db[lo:hi] >= self.floor_db + OVER_FLOOR_DB
        frames = round(min_run_s / FRAME_S)
        if frames <= 1 or not voiced.any():
            return voiced
        edges = np.diff(np.concatenate([[0], voiced.astype(np.int8), [0]]))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        kept = np.zeros_like(voiced)
        for a, b in zip(starts, ends, strict=True):
            if b - a >= frames:
                kept[a:b] = True
        return kept
