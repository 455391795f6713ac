"""``SourceCaptions``: the interpret app's Source pane, recognized by the captions pipeline.

With the embedded speech-translation engine (Whisper's translate task) the source speech is shown by the same
:class:`~rtc_agent.apps.captions.transcriber.StreamingTranscriber` the captions app uses, on the worker's shared
``asr`` Whisper (batched with every other session's decodes), fed by the interpretation pipeline's own VAD windows
(no second VAD): ``input_audio_buffer.speech_started``/``stopped``, ``caption.partial`` and ``caption.final``
(with the utterance's ``language``). Partials come every ``decode_interval_ms`` (800 ms, twice the captions'
interval) to leave compute for the translation, or less often where the server's decode plan
(:mod:`rtc_agent.worker.decode_plan`, ``worker.decode_plans``) asks for that; the final's beam is the plan's too.
The plan is read at the start and every ``PLAN_REFRESH_MS`` of audio after.

With ``auto`` the transcriber's :class:`~rtc_agent.apps.captions.language.LanguageRule` decides the session's
language; ``on_language(code)`` is called whenever it settles or switches, so the translation follows it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rtc_agent.apps.captions.app import feed_window, finish_finals
from rtc_agent.apps.captions.earlier_finals import FinalCaption
from rtc_agent.apps.captions.speech_segmenter import SpeechSegmenter
from rtc_agent.apps.captions.transcriber import Spawn, StreamingTranscriber
from rtc_agent.apps.captions.transcriber_config import apply_plan, transcriber_config
from rtc_agent.engines.asr.base import TranscribeRequest, Transcript
from rtc_agent.protocol import ServerEvent
from rtc_agent.worker.decode_plan import PLAN_REFRESH_MS

__all__ = ["SourceCaptions"]

DECODE_INTERVAL_MS = 800


class SourceCaptions:
    """Captions of the source speech. ``source``: a language code or ``auto``; ``prior``: the language to expect
    with ``auto``. ``now_ms``: the session clock. ``observe(stage, seconds)``: decode latencies (optional).
    ``settings``: the server's (the final decodes' context and budget; None: the defaults)."""

    def __init__(self, worker: Any, emit: Callable[[ServerEvent], None], spawn: Spawn, now_ms: Callable[[], int],
                 *, source: str = "auto", prior: str | None = None,
                 on_language: Callable[[str], None] | None = None, engine: str = "asr", threshold: float = 0.5,
                 min_speech_ms: int = 200, min_silence_ms: int = 250,
                 decode_interval_ms: int = DECODE_INTERVAL_MS,
                 observe: Callable[[str, float], None] | None = None, settings: Any = None) -> None:
        self.worker = worker
        self.engine = engine
        self.emit = emit
        self.now_ms = now_ms
        self.on_language = on_language
        self.observe = observe
        self.transcriber = StreamingTranscriber(
            self._recognize, emit, spawn,
            transcriber_config(settings, None if source == "auto" else source, prior,
                               decode_interval_ms=decode_interval_ms))
        self.segmenter = SpeechSegmenter(threshold=threshold, min_speech_ms=min_speech_ms,
                                         min_silence_ms=min_silence_ms)
        self.judged_until_ms = 0  # the end of the last VAD window seen
        self._language = self.transcriber.rule.current
        self._closing = False
        self._min_interval_ms = decode_interval_ms
        self._plans = getattr(worker, "decode_plans", None)
        self._plan_at_ms = 0
        self._replan()

    def _replan(self) -> None:
        if self._plans is not None:
            apply_plan(self.transcriber.config, self._plans.plan(), self._min_interval_ms)

    async def _recognize(self, request: TranscribeRequest) -> Transcript:
        started = time.monotonic()
        transcript = await self.worker.call(self.engine, request)
        if self.observe is not None:
            self.observe("interpret_source_decode", time.monotonic() - started)
        return transcript

    @property
    def language(self) -> str | None:
        """The language the rule chose (settled or fixed), ``None`` while it is not known."""
        return self.transcriber.rule.current

    def push_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        """16 kHz mono float32 audio in clock order (the pipeline's pushes)."""
        if not self._closing:
            self.transcriber.push_audio(pcm, start_ms)

    def on_window(self, prob: float, start_ms: int, end_ms: int) -> None:
        """One VAD window (the pipeline's), in order."""
        self.judged_until_ms = end_ms
        if end_ms - self._plan_at_ms >= PLAN_REFRESH_MS:
            self._plan_at_ms = end_ms
            self._replan()
        feed_window(self.segmenter, self.transcriber, prob, start_ms, end_ms, self.now_ms())
        current = self.transcriber.rule.current
        if current != self._language:
            self._language = current
            if current and self.on_language is not None:
                self.on_language(current)

    def set_language(self, source: str, prior: str | None) -> None:
        """The client's new choice (``auto`` or a code); takes effect from the next utterance."""
        self.transcriber.set_language(None if source == "auto" else source, prior)
        self._language = self.transcriber.rule.current

    def finals(self) -> list[FinalCaption]:
        return list(self.transcriber.finals)

    async def finish(self, timeout: float) -> None:
        """The session ends: the last utterance gets its final caption (within ``timeout`` s), as in the captions
        app; new audio is ignored from now on."""
        self._closing = True
        await finish_finals(self.transcriber, lambda: self.judged_until_ms, timeout, self.emit)

    def stats(self) -> dict[str, Any]:
        return {**self.transcriber.stats(), "in_speech": self.segmenter.in_speech}
