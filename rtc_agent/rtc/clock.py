"""The session clock: milliseconds of audio received so far (DESIGN.md section 4).

Every ``session_ms`` and ``audio_*_ms`` the server reports is on this clock, so positions in events line up with
the audio the apps saw, whatever the network did. A session without an incoming audio track counts wall time
from its start instead.
"""

from __future__ import annotations

import time


class SessionClock:
    """Counts received audio samples; falls back to wall time for sessions that send no audio."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._samples = 0
        self._rate = 16000
        self.audio_driven = False

    def use_audio(self, sample_rate: int) -> None:
        """From now on the clock advances only with :meth:`advance` (called for every received sample)."""
        self.audio_driven = True
        self._rate = sample_rate

    def advance(self, samples: int) -> None:
        self._samples += samples

    @property
    def samples(self) -> int:
        return self._samples

    def ms(self) -> int:
        if self.audio_driven:
            return self._samples * 1000 // self._rate
        return int((time.monotonic() - self._started) * 1000)
