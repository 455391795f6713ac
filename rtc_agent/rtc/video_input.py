"""``VideoInput``: the incoming camera track, drained at full rate and sampled at the app's rate.

The reader takes every decoded frame off the track (aiortc queues frames without bound otherwise) and keeps only
the latest one with the session-clock time it arrived. A sampler hands that frame to the app at ``fps``, scaled so
its longest edge is at most ``max_edge`` and converted to RGB only then, so a 30 fps camera costs one conversion
per sample, not per frame. Frames are never queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

log = logging.getLogger(__name__)

FrameSink = Callable[[np.ndarray, int], None]
"""Receives ``(rgb, ts_ms)``: an ``(h, w, 3)`` uint8 RGB image and its arrival on the session clock."""


def scaled_size(width: int, height: int, max_edge: int) -> tuple[int, int]:
    """Width and height scaled to fit ``max_edge``, kept even (codecs and converters prefer even sizes)."""
    scale = min(1.0, max_edge / max(width, height))
    w = max(2, round(width * scale) // 2 * 2)
    h = max(2, round(height * scale) // 2 * 2)
    return w, h


class VideoInput:
    """Drains one video track and samples its latest frame at a fixed rate."""

    def __init__(self, track: MediaStreamTrack, clock: Callable[[], int], sink: FrameSink | None,
                 fps: float, max_edge: int) -> None:
        self.track = track
        self.clock = clock
        self.sink = sink
        self.fps = fps
        self.max_edge = max_edge
        self.frames_received = 0
        self.frames_sampled = 0
        self.width = 0
        self.height = 0
        self._latest: tuple[av.VideoFrame, int] | None = None
        self._ended = asyncio.Event()

    def to_rgb(self, frame: av.VideoFrame) -> np.ndarray:
        w, h = scaled_size(frame.width, frame.height, self.max_edge)
        return frame.to_ndarray(width=w, height=h, format="rgb24")

    async def run(self) -> None:
        """Read until the track ends, keeping only the latest frame."""
        try:
            while True:
                try:
                    frame = await self.track.recv()
                except MediaStreamError:
                    return
                self.frames_received += 1
                self.width, self.height = frame.width, frame.height
                self._latest = (frame, self.clock())
        finally:
            self._ended.set()

    def take_sample(self) -> tuple[np.ndarray, int] | None:
        """The latest frame as RGB, once: ``None`` when no new frame arrived since the previous sample."""
        if self._latest is None:
            return None
        frame, ts_ms = self._latest
        self._latest = None
        self.frames_sampled += 1
        return self.to_rgb(frame), ts_ms

    async def sample(self) -> None:
        """Hand the latest frame to the sink every ``1 / fps`` seconds until the track ends."""
        period = 1.0 / self.fps
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while not self._ended.is_set():
            next_at += period
            delay = next_at - loop.time()
            if delay < -period:  # fell far behind (a stalled loop): skip the missed samples
                next_at = loop.time()
                delay = 0
            try:
                await asyncio.wait_for(self._ended.wait(), timeout=max(0.0, delay))
                return
            except TimeoutError:
                pass
            sample = self.take_sample()
            if sample is not None and self.sink is not None:
                try:
                    self.sink(*sample)
                except Exception:
                    log.exception("frame sink failed")
