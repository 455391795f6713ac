"""``SpeechOutput``: the outgoing audio track, 48 kHz mono, paced at 20 ms.

One clock drives it: frame timestamps come from a sample counter, and ``recv`` sleeps until the wall-clock time of
the next frame (aiortc pulls frames as fast as ``recv`` returns them). When nothing is queued it sends silence, so
the track stays live and its timestamps stay steady. Speech is queued as :class:`Utterance` objects, played in
order, never overlapping. :meth:`SpeechOutput.clear` drops everything queued; the next frame is silence, so
barge-in takes effect within one 20 ms frame. Each utterance reports how many ms of it were actually sent.
"""

from __future__ import annotations

import asyncio
import fractions
import itertools
import logging
from collections import deque
from collections.abc import Callable

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from rtc_agent.errors import AgentError
from rtc_agent.rtc.pacing import FramePacer
from rtc_agent.rtc.resampler import audio_resampler

log = logging.getLogger(__name__)

SAMPLE_RATE = 48000
FRAME_SAMPLES = 960  # 20 ms

_ids = itertools.count(1)


def pcm_frame(pcm: np.ndarray, sample_rate: int, pts: int) -> av.AudioFrame:
    """An s16 mono ``av.AudioFrame`` with a sample-counter timestamp."""
    frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = sample_rate
    frame.pts = pts
    frame.time_base = fractions.Fraction(1, sample_rate)
    return frame


class OutputOverflow(AgentError):
    code = "output_overflow"
    status = 503


class Utterance:
    """A piece of speech on the outgoing track: written (possibly in parts), then played.

    ``write`` accepts int16 or float (-1..1) mono samples at the utterance's ``sample_rate``; ``finish`` marks the
    end. ``done`` resolves with the ms actually sent once the utterance has played out or was cleared.
    """

    def __init__(self, output: SpeechOutput, sample_rate: int, utterance_id: str | None,
                 response_id: str | None) -> None:
        self.id = utterance_id or f"utt_{next(_ids)}"
        self.response_id = response_id
        self.sample_rate = sample_rate
        self._output = output
        self._chunks: deque[np.ndarray] = deque()
        self._offset = 0  # samples already taken from _chunks[0]
        self.queued_samples = 0  # 48 kHz samples waiting
        self.written_samples = 0
        self.sent_samples = 0
        self.finished = False
        self.cleared = False
        self.started = False
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._resampler = (
            None if sample_rate == SAMPLE_RATE else audio_resampler(SAMPLE_RATE)
        )

    @property
    def sent_ms(self) -> int:
        return self.sent_samples * 1000 // SAMPLE_RATE

    @property
    def written_ms(self) -> int:
        return self.written_samples * 1000 // SAMPLE_RATE

    def write(self, pcm: np.ndarray) -> None:
        """Queue more samples. Raises :class:`OutputOverflow` when the track's queue limit would be passed."""
        if self.finished or self.cleared:
            raise RuntimeError(f"utterance {self.id} is already {'cleared' if self.cleared else 'finished'}")
        samples = self._to_48k(pcm)
        if samples.size == 0:
            return
        self._output._reserve(samples.size)
        self._chunks.append(samples)
        self.queued_samples += samples.size
        self.written_samples += samples.size

    def finish(self) -> None:
        """No more samples will come; the utterance ends when its queue has played out."""
        if self.finished:
            return
        if self._resampler is not None and not self.cleared:
            tail = self._flush_resampler()
            if tail.size:
                self._output._reserve(tail.size)
                self._chunks.append(tail)
                self.queued_samples += tail.size
                self.written_samples += tail.size
        self.finished = True
        self._resampler = None  # its filter graph's state is not needed past the end
        if self.queued_samples == 0 and self.started:
            self._output._complete(self)

    def _to_48k(self, pcm: np.ndarray) -> np.ndarray:
        pcm = np.asarray(pcm).reshape(-1)
        if pcm.dtype != np.int16:
            pcm = (np.clip(pcm.astype(np.float32), -1.0, 1.0) * 32767.0).astype(np.int16)
        if self._resampler is None:
            return pcm.copy()
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.sample_rate
        return self._join(self._resampler.resample(frame))

    def _flush_resampler(self) -> np.ndarray:
        assert self._resampler is not None
        return self._join(self._resampler.resample(None))

    @staticmethod
    def _join(frames: list[av.AudioFrame]) -> np.ndarray:
        parts = [f.to_ndarray().reshape(-1) for f in frames]
        if not parts:
            return np.zeros(0, dtype=np.int16)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _take(self, out: np.ndarray, start: int) -> int:
        """Copy queued samples into ``out[start:]``; returns how many were copied."""
        pos = start
        while pos < out.size and self._chunks:
            chunk = self._chunks[0]
            n = min(out.size - pos, chunk.size - self._offset)
            out[pos:pos + n] = chunk[self._offset:self._offset + n]
            pos += n
            self._offset += n
            if self._offset == chunk.size:
                self._chunks.popleft()
                self._offset = 0
        taken = pos - start
        self.queued_samples -= taken
        self.sent_samples += taken
        return taken

    def _drop(self) -> int:
        dropped = self.queued_samples
        self._chunks.clear()
        self._offset = 0
        self.queued_samples = 0
        self.cleared = True
        self.finished = True
        self._resampler = None
        return dropped


UtteranceListener = Callable[[Utterance, str], None]
"""Called with ``(utterance, "started" | "stopped")`` when an utterance's first sample is sent and when it ends."""


class SpeechOutput(MediaStreamTrack):
    """An aiortc audio track that plays queued utterances in order, paced at 20 ms, silence when idle."""

    kind = "audio"

    def __init__(self, *, max_seconds: float = 120.0, listener: UtteranceListener | None = None) -> None:
        super().__init__()
        self.max_samples = int(max_seconds * SAMPLE_RATE)
        self.listener = listener
        self._queue: deque[Utterance] = deque()
        self._queued_samples = 0
        self.pacer = FramePacer(SAMPLE_RATE, FRAME_SAMPLES)
        self.frames_sent = 0
        self.speech_frames_sent = 0
        self.paused = False

    # --- producer side ---

    def start_utterance(self, sample_rate: int, *, utterance_id: str | None = None,
                        response_id: str | None = None) -> Utterance:
        """Queue a new utterance to be written in parts; it plays after those queued before it."""
        if self.readyState != "live":
            raise MediaStreamError("the speech output has ended")
        utterance = Utterance(self, sample_rate, utterance_id, response_id)
        self._queue.append(utterance)
        return utterance

    def play(self, pcm: np.ndarray, sample_rate: int, *, utterance_id: str | None = None,
             response_id: str | None = None) -> Utterance:
        """Queue a whole utterance."""
        utterance = self.start_utterance(sample_rate, utterance_id=utterance_id, response_id=response_id)
        try:
            utterance.write(pcm)
        except OutputOverflow:
            self._queue.remove(utterance)
            raise
        utterance.finish()
        return utterance

    def clear(self) -> list[Utterance]:
        """Drop all queued speech now (and end a pause); returns the utterances that were cut, each with its
        ``sent_ms``."""
        self.paused = False
        cut = list(self._queue)
        self._queue.clear()
        for utterance in cut:
            self._queued_samples -= utterance._drop()
            self._settle(utterance)
        self._queued_samples = max(self._queued_samples, 0)
        return cut

    def pause(self) -> None:
        """Hold playback: from the next frame on, silence is sent and nothing queued is consumed."""
        self.paused = True

    def resume(self) -> None:
        """Continue playback where :meth:`pause` held it."""
        self.paused = False

    @property
    def busy(self) -> bool:
        """True while any utterance is queued or playing."""
        return bool(self._queue)

    @property
    def queued_ms(self) -> int:
        return self._queued_samples * 1000 // SAMPLE_RATE

    def _reserve(self, samples: int) -> None:
        if self._queued_samples + samples > self.max_samples:
            raise OutputOverflow(
                f"speech output queue is full ({self.max_samples // SAMPLE_RATE} s); clear it or wait"
            )
        self._queued_samples += samples

    def _complete(self, utterance: Utterance) -> None:
        if self._queue and self._queue[0] is utterance:
            self._queue.popleft()
        elif utterance in self._queue:
            self._queue.remove(utterance)
        self._settle(utterance)

    def _settle(self, utterance: Utterance) -> None:
        if not utterance.done.done():
            utterance.done.set_result(utterance.sent_ms)
            if utterance.started and self.listener is not None:
                self.listener(utterance, "stopped")

    # --- aiortc side ---

    def next_frame_pcm(self) -> np.ndarray:
        """The next 20 ms of samples: queued speech, zero-filled; finished utterances are settled."""
        out = np.zeros(FRAME_SAMPLES, dtype=np.int16)
        pos = 0
        while pos < FRAME_SAMPLES and self._queue and not self.paused:
            utterance = self._queue[0]
            if utterance.queued_samples == 0:
                if utterance.finished:
                    self._complete(utterance)
                    continue
                break  # still being written: an underrun, send silence for the rest
            if not utterance.started:
                utterance.started = True
                if self.listener is not None:
                    self.listener(utterance, "started")
            taken = utterance._take(out, pos)
            self._queued_samples -= taken
            pos += taken
            if utterance.queued_samples == 0 and utterance.finished:
                self._complete(utterance)
        if pos:
            self.speech_frames_sent += 1
        return out

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        pts = await self.pacer.next_pts()
        frame = pcm_frame(self.next_frame_pcm(), SAMPLE_RATE, pts)
        self.frames_sent += 1
        return frame

    def stop(self) -> None:
        self.clear()
        super().stop()
