"""Outgoing media for a Python peer: PCM audio and synthetic video, paced in real time.

Benchmarks and tests send real audio and video through a real peer connection with these tracks; a user can
script the server the same way (see :class:`rtc_agent.rtc.client.ClientPeer`).
"""

from __future__ import annotations

import fractions
from pathlib import Path

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from rtc_agent.rtc.pacing import FramePacer
from rtc_agent.rtc.resampler import audio_resampler
from rtc_agent.rtc.speech_output import pcm_frame

VIDEO_CLOCK = 90000


def load_audio(path: str | Path, sample_rate: int = 48000) -> np.ndarray:
    """Decode any audio file ffmpeg reads into mono int16 at ``sample_rate``."""
    resampler = audio_resampler(sample_rate)
    parts: list[np.ndarray] = []
    with av.open(str(path)) as container:
        for frame in container.decode(audio=0):
            parts.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(frame))
    parts.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(None))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


class PcmSourceTrack(MediaStreamTrack):
    """Plays mono int16 samples in 20 ms frames at real time; then silence (``tail="silence"``) or the end."""

    kind = "audio"

    def __init__(self, pcm: np.ndarray, sample_rate: int = 48000, *, tail: str = "end") -> None:
        super().__init__()
        if tail not in ("end", "silence"):
            raise ValueError("tail must be 'end' or 'silence'")
        self.pcm = np.asarray(pcm, dtype=np.int16).reshape(-1)
        self.sample_rate = sample_rate
        self.tail = tail
        self.frame_samples = sample_rate // 50
        self.pacer = FramePacer(sample_rate, self.frame_samples)
        self.position = 0  # samples of ``pcm`` sent so far

    @classmethod
    def from_file(cls, path: str | Path, *, tail: str = "end") -> PcmSourceTrack:
        return cls(load_audio(path), 48000, tail=tail)

    @property
    def finished(self) -> bool:
        return self.position >= self.pcm.size

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self.finished and self.tail == "end":
            self.stop()
            raise MediaStreamError
        pts = await self.pacer.next_pts()
        chunk = self.pcm[self.position:self.position + self.frame_samples]
        self.position += chunk.size
        if chunk.size < self.frame_samples:
            chunk = np.concatenate([chunk, np.zeros(self.frame_samples - chunk.size, dtype=np.int16)])
        return pcm_frame(chunk, self.sample_rate, pts)


class PatternVideoTrack(MediaStreamTrack):
    """A moving colour pattern at ``fps`` for ``seconds`` (``None`` = until stopped)."""

    kind = "video"

    def __init__(self, width: int = 320, height: int = 240, fps: int = 15, seconds: float | None = None) -> None:
        super().__init__()
        self.width, self.height, self.fps = width, height, fps
        self.limit = None if seconds is None else round(seconds * fps)
        self.pacer = FramePacer(VIDEO_CLOCK, VIDEO_CLOCK // fps)
        self.frames_sent = 0
        y, x = np.mgrid[0:height, 0:width]
        self._base = ((x * 255 // max(1, width - 1)) ^ (y * 255 // max(1, height - 1))).astype(np.uint8)

    async def recv(self) -> av.VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self.limit is not None and self.frames_sent >= self.limit:
            self.stop()
            raise MediaStreamError
        pts = await self.pacer.next_pts()
        shift = (self.frames_sent * 4) % 256
        rgb = np.stack([self._base, np.roll(self._base, shift, axis=1), 255 - self._base], axis=-1)
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = pts
        frame.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        self.frames_sent += 1
        return frame
