"""``InterpretPipeline``: audio -> Silero VAD (worker) -> :class:`ChunkCutter` -> :class:`SimulPolicy`.

Two ways to drive it:

- live (the WebRTC app): ``push_audio`` from ``on_audio`` (never blocks), with two session tasks: ``run_vad`` is the
  session's :class:`~rtc_agent.apps.voice_activity.VoiceActivity` pump (32 ms windows through the worker's ``vad``
  engine, batched across sessions), whose windows the cutter turns into chunks; ``run_policy`` runs the turns one
  by one. Chunks wait in a bounded queue: when the model falls more than ``max_queued_chunks`` behind, the oldest
  waiting chunk is dropped (reported in order as a ``SKIP`` with ``stop_reason: overloaded``, its speech counted
  untranslated). Audio the VAD pump drops (its backlog limit) reaches the cutter as silence, so the grid stays on
  the clock.
- whole audio (``POST /v1/translate/stream``, the benchmark): ``translate_audio`` (or ``translate_blocks`` for audio
  decoded block by block) runs VAD and turns in sequence, as fast as the engines go, emitting events as each chunk
  is processed.

The VAD state (``vad_stream``) and the chunk grid belong to the pipeline: the policy's context cuts never touch them.
Live mode can share them: ``on_window(prob, start_ms, end_ms)`` gets every VAD window the pump judged (before the
cutter, also after ``finish``) and ``on_audio(pcm, start_ms)`` every audio push, so another consumer (the interpret
app's source captions) uses the same VAD probabilities instead of running a second VAD. With ``translating``
false (the interpret app's text route: the captions' finals are translated as text instead) the chunks are not
translated at all: the VAD pump and ``on_window``/``on_audio`` go on, the policy gets no turns.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

import numpy as np

from rtc_agent.apps.interpret.chunker import WINDOW_MS, WINDOW_SAMPLES, AudioChunk, ChunkCutter
from rtc_agent.apps.interpret.policy import SimulPolicy
from rtc_agent.apps.voice_activity import VoiceActivity
from rtc_agent.engines.vad import VadRequest, VadStream

__all__ = ["InterpretPipeline"]

SAMPLE_RATE = 16000
VAD_BLOCK_WINDOWS = 50  # whole-audio mode: VAD requests of 1.6 s


class InterpretPipeline:
    def __init__(self, policy: SimulPolicy, worker: Any, cutter: ChunkCutter, *, vad_engine: str = "vad",
                 max_queued_chunks: int = 6, vad_backlog_s: float = 10.0, vad_timeout_s: float = 10.0,
                 on_window: Callable[[float, int, int], None] | None = None,
                 on_audio: Callable[[np.ndarray, int], None] | None = None) -> None:
        if max_queued_chunks < 1:
            raise ValueError("max_queued_chunks must be >= 1")
        self.policy = policy
        self.worker = worker
        self.cutter = cutter
        self.vad_engine = vad_engine
        self.voice = VoiceActivity(worker, self._on_window, engine=vad_engine, backlog_limit_s=vad_backlog_s)
        self.vad_stream: VadStream = self.voice.stream
        self.max_queued_chunks = max_queued_chunks
        self.vad_timeout_s = vad_timeout_s
        self.on_window = on_window
        self.on_audio = on_audio
        self._audio: deque[np.ndarray] = deque()  # audio pushed and not yet cut, from sample ``_audio_start``
        self._audio_start = 0
        self._audio_samples = 0
        self._audio_limit = int((vad_backlog_s + 2.0) * SAMPLE_RATE)
        self._chunks: deque[tuple[AudioChunk, bool]] = deque()  # (chunk, dropped)
        self._chunk_wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._started = False
        self.translating = True  # False: chunks are cut but not translated (see the module docstring)
        self.vad_windows = 0

    # --- live mode ------------------------------------------------------------------------------------------

    def push_audio(self, audio: np.ndarray, start_ms: int) -> None:
        """16 kHz mono float32 audio in clock order (non-blocking)."""
        if self._closed:
            return
        audio = np.asarray(audio, dtype=np.float32)
        if self.on_audio is not None:
            self.on_audio(audio, start_ms)
        if not self._started:
            self._started = True
            self.cutter.start_at(start_ms)  # the grid starts where the audio starts
            self._audio_start = start_ms * SAMPLE_RATE // 1000
        self._audio.append(audio)
        self._audio_samples += len(audio)
        while self._audio_samples > self._audio_limit and len(self._audio) > 1:  # the VAD pump dropped it too
            old = self._audio.popleft()
            self._audio_samples -= len(old)
            self._audio_start += len(old)
        self.voice.push(audio, start_ms)

    def _window_audio(self, start_sample: int) -> np.ndarray:
        """The 512 samples from ``start_sample`` (zeros where the audio is gone); drops what precedes them."""
        skip = start_sample - self._audio_start
        while self._audio and skip >= len(self._audio[0]):
            old = self._audio.popleft()
            skip -= len(old)
            self._audio_samples -= len(old)
            self._audio_start += len(old)
        if not self._audio or skip < 0:
            return np.zeros(WINDOW_SAMPLES, dtype=np.float32)
        if skip:
            self._audio[0] = self._audio[0][skip:]
            self._audio_samples -= skip
            self._audio_start += skip
        while len(self._audio) > 1 and len(self._audio[0]) < WINDOW_SAMPLES:
            first = self._audio.popleft()
            self._audio[0] = np.concatenate([first, self._audio[0]])
        window = self._audio[0][:WINDOW_SAMPLES]
        self._audio[0] = self._audio[0][WINDOW_SAMPLES:]
        self._audio_samples -= len(window)
        self._audio_start += len(window)
        if not len(self._audio[0]):
            self._audio.popleft()
        if len(window) < WINDOW_SAMPLES:
            window = np.concatenate([window, np.zeros(WINDOW_SAMPLES - len(window), dtype=np.float32)])
        return window

    def _on_window(self, prob: float, start_ms: int, end_ms: int) -> None:
        """One VAD window from the pump, in order."""
        if self.on_window is not None:
            self.on_window(prob, start_ms, end_ms)
        if self._closed:
            return
        self.vad_windows += 1
        gap = (start_ms - self.cutter.position_ms) // WINDOW_MS
        if gap > 0:  # audio the pump dropped: silence for the cutter
            zeros = np.zeros((gap, WINDOW_SAMPLES), dtype=np.float32)
            for chunk in self.cutter.feed(zeros, np.zeros(gap, dtype=np.float32)):
                self._queue_chunk(chunk)
        window = self._window_audio(start_ms * SAMPLE_RATE // 1000)
        for chunk in self.cutter.feed(window.reshape(1, WINDOW_SAMPLES), np.array([prob], dtype=np.float32)):
            self._queue_chunk(chunk)

    async def run_vad(self) -> None:
        """Session task: the VAD pump (until the session cancels it)."""
        await self.voice.run()

    async def _vad(self, windows: np.ndarray) -> np.ndarray:
        probs = await self.worker.call(self.vad_engine, VadRequest(self.vad_stream, windows),
                                       timeout=self.vad_timeout_s)
        self.vad_windows += len(windows)
        return np.asarray(probs, dtype=np.float32)

    def _queue_chunk(self, chunk: AudioChunk) -> None:
        if not self.translating:
            return
        self._chunks.append((chunk, False))
        live = [i for i, (_, dropped) in enumerate(self._chunks) if not dropped]
        if len(live) > self.max_queued_chunks:
            i = live[0]
            old, _ = self._chunks[i]
            old.audio = np.zeros(0, dtype=np.float32)  # free the audio; the marker keeps its place in order
            self._chunks[i] = (old, True)
        self._idle.clear()
        self._chunk_wake.set()

    async def run_policy(self) -> None:
        """Session task: the turns, one at a time, in order."""
        while True:
            await self._chunk_wake.wait()
            self._chunk_wake.clear()
            while self._chunks:
                chunk, dropped = self._chunks.popleft()
                if dropped:
                    self.policy.drop(chunk)
                else:
                    await self.policy.process(chunk)
            self._idle.set()

    @property
    def queued_chunks(self) -> int:
        return sum(1 for _, dropped in self._chunks if not dropped)

    async def finish(self) -> None:
        """Live mode: the audio ended. Waits for queued turns, processes the partial last chunk and flushes."""
        self._closed = True
        await self._idle.wait()
        last = self.cutter.finish()
        if not self.translating:
            return
        if last is not None:
            await self.policy.process(last)
        await self.policy.finish()

    # --- whole-audio mode -----------------------------------------------------------------------------------

    async def translate_audio(self, audio: np.ndarray, *, start_ms: int = 0) -> None:
        """Run the whole ``audio`` (16 kHz float32) through VAD and policy in order, then the end flush."""

        async def once() -> AsyncIterator[np.ndarray]:
            yield audio

        await self.translate_blocks(once(), start_ms=start_ms)

    async def translate_blocks(self, blocks: AsyncIterable[np.ndarray], *, start_ms: int = 0) -> None:
        """Like :meth:`translate_audio` for audio arriving in ``blocks`` of any size (16 kHz float32, in order):
        the result is the same as for their concatenation, and memory holds one block at a time (plus less than
        one VAD request of carry-over), whatever the total length."""
        self.cutter.start_at(start_ms)
        step = VAD_BLOCK_WINDOWS * WINDOW_SAMPLES
        pending = np.zeros(0, dtype=np.float32)
        async for block in blocks:
            block = np.asarray(block, dtype=np.float32).reshape(-1)
            pending = np.concatenate([pending, block]) if len(pending) else block
            whole = len(pending) // step * step
            for i in range(0, whole, step):
                await self._translate_windows(pending[i:i + step].reshape(-1, WINDOW_SAMPLES))
            pending = pending[whole:]
        tail = (-len(pending)) % WINDOW_SAMPLES
        if tail:
            pending = np.concatenate([pending, np.zeros(tail, dtype=np.float32)])
        if len(pending):
            await self._translate_windows(pending.reshape(-1, WINDOW_SAMPLES))
        last = self.cutter.finish()
        if last is not None:
            await self.policy.process(last)
        await self.policy.finish()

    async def _translate_windows(self, windows: np.ndarray) -> None:
        probs = await self._vad(windows)
        for chunk in self.cutter.feed(windows, probs):
            await self.policy.process(chunk)

    def stats(self) -> dict[str, Any]:
        return {"vad_dropped_ms": self.voice.dropped_ms, "queued_chunks": self.queued_chunks,
                "in_speech": self.cutter.segmenter.in_speech}
