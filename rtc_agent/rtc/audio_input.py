"""``AudioInput``: the incoming microphone track, resampled once to 16 kHz mono.

aiortc decodes Opus to 48 kHz stereo s16 and queues decoded frames without bound on a track nobody reads, so
the reader starts with the session and drains the track until it ends. Everything downstream sees only 16 kHz
mono int16 and positions on the session clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from rtc_agent.rtc.clock import SessionClock
from rtc_agent.rtc.resampler import audio_resampler

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000

AudioSink = Callable[[np.ndarray, int], None]
"""Receives ``(pcm, start_ms)``: int16 mono samples at 16 kHz and their position on the session clock. It must
not block: it runs on the event loop for every 20 ms frame."""


class AudioInput:
    """Drains one audio track, converts every frame to 16 kHz mono int16 and advances the session clock."""

    def __init__(self, track: MediaStreamTrack, clock: SessionClock, sink: AudioSink) -> None:
        self.track = track
        self.clock = clock
        self.sink = sink
        self.frames = 0
        self.sink_errors = 0
        # The resampler's graph runs on this thread (see rtc.resampler); the reader drops it when the track ends
        # (see run), so an ended session kept for GET and exports holds no libavfilter state.
        self._resampler: av.AudioResampler | None = audio_resampler(SAMPLE_RATE)
        clock.use_audio(SAMPLE_RATE)

    @property
    def received_ms(self) -> int:
        return self.clock.samples * 1000 // SAMPLE_RATE

    def convert(self, frame: av.AudioFrame) -> np.ndarray:
        """One received frame as 16 kHz mono int16 (may be empty while the resampler fills; empty once the
        reader has ended)."""
        if self._resampler is None:
            return np.zeros(0, dtype=np.int16)
        chunks = [f.to_ndarray().reshape(-1) for f in self._resampler.resample(frame)]
        if not chunks:
            return np.zeros(0, dtype=np.int16)
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    async def run(self) -> None:
        """Read until the track ends (or the reader is cancelled). Sink failures are logged and counted, never
        stop the reader."""
        try:
            while True:
                try:
                    frame = await self.track.recv()
                except MediaStreamError:
                    return
                self.frames += 1
                pcm = self.convert(frame)
                if pcm.size == 0:
                    continue
                start_ms = self.received_ms
                self.clock.advance(pcm.size)
                try:
                    self.sink(pcm, start_ms)
                except Exception:
                    self.sink_errors += 1
                    if self.sink_errors <= 3:
                        log.exception("audio sink failed")
        finally:
            self.close()

    def close(self) -> None:
        """Drop the resampler now; later frames convert to nothing."""
        self._resampler = None
