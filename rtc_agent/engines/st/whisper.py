"""Embedded speech translation: Whisper's translate task (any language to English) behind the SimulInfer policy.

Every turn is decided by :class:`~rtc_agent.engines.st.whisper_stream.WhisperStream`'s LocalAgreement: the words
it commits are an EMIT, no new words a WAIT; a flush commits through the last finished sentence (partial) or
everything (final), reusing the last hypothesis when it covers exactly the flushed audio.

The model calls go to the worker's ``asr`` engine (the same Whisper that serves captions: no second model is
loaded). :class:`WhisperTranslator` runs a translate stream and, optionally, a transcribe stream for the source
text (both requests go to the worker together, so they share one batch, at about 1.7 times the cost). The
policy's context cuts (window, budget) bound the dialogue itself; a cut resets the streams.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rtc_agent.engines.asr.base import TranscribeRequest, Transcript
from rtc_agent.engines.st.base import TranslateRequest, Translation, Turn, estimate_tokens
from rtc_agent.engines.st.whisper_stream import WhisperStream

__all__ = ["WHISPER_CONTEXT", "WhisperTranslator"]

WHISPER_CONTEXT = 448  # Whisper's decoder context in tokens: the policy's max_model_len for this engine


class WhisperTranslator:
    """The embedded :class:`~rtc_agent.engines.st.base.SpeechTranslator`: X -> English with Whisper.

    ``worker`` is the session's worker and ``engine`` the Whisper engine's name (``asr``). With ``source_text`` a
    transcribe stream runs next to the translate stream (same audio, one worker batch) and each answer carries the
    newly recognized source words (``POST /v1/translate/stream``; the WebRTC interpret app shows the source with
    its captions pipeline instead). Each turn decodes in the request's ``source_language`` (detecting per decode
    while that is ``None``) and reports the translate decode's language ranking in ``extra["language_probs"]``
    (with ``extra["language_audio_s"]``) for the caller's language rule. The other options are
    :class:`WhisperStream`'s. Only English targets are possible (Whisper's translate task); the caller checks the
    language pair. Token counts are estimates (Whisper reports none): the prompt is the forced prefix (with
    ``force_prefix``) plus the task tokens, the completion the new hypothesis; the policy's budget rule uses
    Whisper's decoder context (448 tokens).
    """

    name = "whisper-translate"
    max_model_len: int | None = WHISPER_CONTEXT

    def __init__(self, worker: Any, engine: str = "asr", *, source_text: bool = False, timeout_s: float = 30.0,
                 agreement: int = 2, min_commit_ms: int = 1000, force_prefix: bool = False,
                 trim_after_s: float = 8.0) -> None:
        self.worker = worker
        self.engine = engine
        self.timeout_s = timeout_s
        options: dict[str, Any] = {"agreement": agreement, "min_commit_ms": min_commit_ms,
                                   "force_prefix": force_prefix, "trim_after_s": trim_after_s}
        self.target = WhisperStream("translate", **options)
        self.source = WhisperStream("transcribe", **options) if source_text else None

    @property
    def pending(self) -> bool:
        return self.target.pending

    @property
    def language(self) -> str | None:
        """The source language of the last turn (requested, else detected by its translate decode)."""
        return self.target.language or self.target.detected_language

    def reset(self) -> None:
        self.target.reset()
        if self.source is not None:
            self.source.reset()

    async def _decode(self, stream: WhisperStream, request: TranscribeRequest) -> tuple[Transcript, bool]:
        """The hypothesis and whether it is a fresh decode (not the last one reused)."""
        cached = stream.cached()
        if cached is not None:
            return cached, False
        return await self.worker.call(self.engine, request, timeout=self.timeout_s), True

    async def translate(self, request: TranslateRequest) -> Translation:
        streams = [s for s in (self.target, self.source) if s is not None]
        for stream in streams:
            stream.set_language(request.source_language)
        turns = list(request.history)
        if len(request.audio):
            turns.append(Turn(request.audio, request.start_ms, request.end_ms))
        calls = [(s, r) for s in streams
                 if (r := s.build(turns, detect=request.detect_language and s is self.target)) is not None]
        if not calls:
            return Translation("", source_text="" if self.source is not None else None)
        results = await asyncio.gather(*(self._decode(s, r) for s, r in calls))
        texts: dict[str, str] = {}
        extra: dict[str, object] = {}
        prompt_tokens = completion_tokens = 0
        for (stream, req), (transcript, fresh) in zip(calls, results, strict=True):
            words = stream.apply(transcript, request.end_ms, flush=request.flush_mode)
            texts[stream.task] = " ".join(words)
            if stream is self.target:
                prompt_tokens = estimate_tokens(req.prefix) + 4
                completion_tokens = estimate_tokens(transcript.text)
                detected = req.language is None or req.detect_language  # else the language is only echoed
                if fresh and detected and (transcript.language_probs or transcript.language):
                    extra["language_probs"] = list(transcript.language_probs) or [
                        (transcript.language, transcript.language_prob if transcript.language_prob is not None
                         else 1.0)]
                    extra["language_audio_s"] = transcript.audio_s or req.duration_s
        if self.language:
            extra["language"] = self.language
        return Translation(
            text=texts.get("translate", ""),
            source_text=texts.get("transcribe", "") if self.source is not None else None,
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, stop_reason="stop", extra=extra,
        )
