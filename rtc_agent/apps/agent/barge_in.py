"""``BargeInGate``: whether the user's speech over the agent's reply is an interruption a person means.

Pure numpy, fed the received 16 kHz audio (echo-cancelled by the browser) frame by frame, in 5 ms blocks. A block
is *loud* when its RMS level is above the gate's threshold: ``floor_dbfs`` (breathing and room noise stay under
it), or, when higher, the median level of the input heard while the agent's own voice was playing (its residual
echo and the room's background talk, over the last ``echo_window_ms``) plus ``margin_db``. The agent app cancels a
reply only when the speech the VAD found has ``min_ms`` of loud blocks; it holds its audio (tentatively) only on a
loud block, and lets it go on when no loud block came for a while.
"""

from __future__ import annotations

from collections import deque

import numpy as np

BLOCK_MS = 5
_QUIET = -120.0  # the level of digital silence, in dB


class BargeInGate:
    """See the module docstring. ``min_ms``: loud speech that cancels a reply; ``floor_dbfs``: the lowest level
    that counts; ``margin_db``: how far above the input heard during the agent's voice speech must be;
    ``history_ms``: how far back :meth:`loud_ms_since` can look."""

    def __init__(self, *, min_ms: int = 300, floor_dbfs: float = -40.0, margin_db: float = 10.0,
                 echo_window_ms: int = 2000, history_ms: int = 4000, sample_rate: int = 16000) -> None:
        if min_ms < 0 or echo_window_ms < BLOCK_MS or history_ms < BLOCK_MS:
            raise ValueError("min_ms must be >= 0 and the windows at least one block")
        self.min_ms = min_ms
        self.floor_dbfs = floor_dbfs
        self.margin_db = margin_db
        self.block_samples = sample_rate * BLOCK_MS // 1000
        self._echo: deque[float] = deque(maxlen=echo_window_ms // BLOCK_MS)  # levels heard during the reply
        self._loud_ends: deque[int] = deque(maxlen=history_ms // BLOCK_MS)  # end ms of recent loud blocks
        self._rest = np.zeros(0, dtype=np.float32)
        self._rest_start_ms = 0
        self.last_loud_ms: int | None = None

    @property
    def threshold_db(self) -> float:
        """The level a block must pass: the floor, or the echo median plus the margin when that is higher (the
        echo median counts once 200 ms of the reply were heard)."""
        if len(self._echo) < 200 // BLOCK_MS:
            return self.floor_dbfs
        return max(self.floor_dbfs, float(np.median(np.fromiter(self._echo, dtype=np.float64))) + self.margin_db)

    def feed(self, audio: np.ndarray, start_ms: int, *, agent_audible: bool) -> None:
        """``audio``: float samples (-1..1) starting at ``start_ms``; ``agent_audible``: the agent's voice was
        playing (the input then holds its residual echo)."""
        if not len(self._rest):
            self._rest_start_ms = start_ms
        data = np.concatenate([self._rest, np.asarray(audio, dtype=np.float32)])
        whole = len(data) // self.block_samples * self.block_samples
        blocks = data[:whole].reshape(-1, self.block_samples)
        self._rest = data[whole:]
        first_ms = self._rest_start_ms
        self._rest_start_ms = first_ms + len(blocks) * BLOCK_MS
        if not len(blocks):
            return
        rms = np.sqrt(np.mean(blocks.astype(np.float64) ** 2, axis=1))
        levels = 20 * np.log10(np.maximum(rms, 10 ** (_QUIET / 20)))
        threshold = self.threshold_db
        for i, level in enumerate(levels):
            end = first_ms + (i + 1) * BLOCK_MS
            if level > threshold:
                self._loud_ends.append(end)
                self.last_loud_ms = end
            if agent_audible:
                self._echo.append(float(level))

    def loud_ms_since(self, ms: int) -> int:
        """Milliseconds of loud blocks that ended after ``ms`` (within the history)."""
        return BLOCK_MS * sum(1 for end in self._loud_ends if end > ms)

    def quiet_since(self, ms: int) -> bool:
        """No loud block ended after ``ms``."""
        return self.last_loud_ms is None or self.last_loud_ms <= ms

    def meant(self, speech_start_ms: int) -> bool:
        """The speech that started at ``speech_start_ms`` has been loud for ``min_ms``: an interruption."""
        return self.loud_ms_since(speech_start_ms - BLOCK_MS) >= self.min_ms
