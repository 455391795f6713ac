"""``LoudnessOnset``: the first sign of the user's voice, before the VAD has a whole window to judge.

Pure numpy, fed the received 16 kHz audio frame by frame. It reports an onset when ``blocks`` consecutive 5 ms
blocks are louder than ``level_dbfs`` (RMS), counting across frame boundaries, so a word that starts late in a
frame is caught in that frame and a single click is not. The agent uses it to *hold* its own audio at once
(tentative barge-in, undone when the VAD finds no speech), so it may be more sensitive than the turn detector.
"""

from __future__ import annotations

import numpy as np

BLOCK_MS = 5


class LoudnessOnset:
    def __init__(self, *, level_dbfs: float = -35.0, blocks: int = 2, sample_rate: int = 16000) -> None:
        if blocks < 1:
            raise ValueError("blocks must be >= 1")
        self.level = 10 ** (level_dbfs / 20)
        self.blocks = blocks
        self.block_samples = sample_rate * BLOCK_MS // 1000
        self._run = 0  # loud blocks in a row so far
        self._rest = np.zeros(0, dtype=np.float32)  # samples short of a whole block

    def feed(self, audio: np.ndarray) -> bool:
        """``audio``: float samples (-1..1). True when this audio completes a loud run (reported once per run)."""
        data = np.concatenate([self._rest, np.asarray(audio, dtype=np.float32)])
        whole = len(data) // self.block_samples * self.block_samples
        self._rest = data[whole:]
        if not whole:
            return False
        blocks = data[:whole].reshape(-1, self.block_samples)
        loud = np.sqrt(np.mean(blocks * blocks, axis=1)) > self.level
        onset = False
        for is_loud in loud:
            self._run = self._run + 1 if is_loud else 0
            onset = onset or self._run == self.blocks
        return onset
