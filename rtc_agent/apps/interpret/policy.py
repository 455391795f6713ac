"""The SimulInfer (Hy-SimulMT) simultaneous-translation policy as a plain class (DESIGN.md section 5).

:class:`SimulPolicy` takes audio chunks in source-clock order and gives ``translation.*`` events out; the model
sits behind a :class:`~rtc_agent.engines.st.base.SpeechTranslator`. Rules:

- Chunks (cut by :class:`~rtc_agent.apps.interpret.chunker.ChunkCutter`): the first is exactly 1600 ms, later
  ones ``chunk_ms`` (800 or 1600); :class:`~rtc_agent.apps.interpret.policy_config.PolicyConfig` validates that.
- A chunk the VAD found silent is a ``SKIP``: no model call, not added to the dialogue.
- Every voiced chunk is one turn: the translator gets the whole history (every chunk since the last cut, with what
  was emitted after it) plus the new chunk; non-empty text is an ``EMIT``, empty a ``WAIT``.
- Fallback flush (the backlog re-translated in one request, ``translation.flush``): after ``max_waits`` (4)
  consecutive WAITs (``empty_chunks``), after ``silence_flush_ms`` (2400) of silence (``silence``), at the end of
  the audio (``end``) and before a cut (``cut``), each only when something is left untranslated (a WAIT backlog,
  or text the translator holds back). A flush covers the source range since the previous one and is never
  attempted twice for the same range, whatever its outcome. A WAIT backlog longer than ``max_backlog_ms`` loses
  its oldest chunks: they are no longer flushed and count as untranslated.
- Context cuts (``translation.reset``): ``length`` (the model stopped on its token limit), ``budget``
  (``prompt + completion + budget_margin >= max_model_len``), ``window`` (the dialogue holds ``window_s`` seconds
  of speech). A cut flushes first, then clears the dialogue only: chunk numbering, the source clock and the VAD
  (owned by the caller) go on untouched.
- Source language: a :class:`~rtc_agent.apps.captions.language.LanguageRule` (the captions' rule: ``fixed`` by the
  client, else settled on strong evidence and switched only on strong repeated evidence), weighted by the client's
  ``language_prior``, chooses the ``source_language`` of every request. It observes the detector's ranking that the
  translator reports for each turn (``Translation.extra["language_probs"]``), unless another detector drives it
  (:meth:`SimulPolicy.follow_language`, the interpret app's source captions).
- Every chunk gets exactly one ``translation.chunk`` event with all its fields; ``latency_ms`` is the time from the
  chunk being complete to its event (waiting behind earlier turns plus the model call).

Turns run one at a time (``process`` must not be called concurrently); the caller queues chunks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rtc_agent.apps.captions.language import LanguageRule
from rtc_agent.apps.interpret.chunker import AudioChunk
from rtc_agent.apps.interpret.policy_config import PolicyConfig
from rtc_agent.engines.st.base import SpeechTranslator, TranslateRequest, Translation, Turn
from rtc_agent.errors import AgentError
from rtc_agent.protocol import ServerEvent, error_event
from rtc_agent.protocol.events import TranslationChunk, TranslationFlush, TranslationReset

log = logging.getLogger(__name__)

__all__ = ["SimulPolicy"]

Emit = Callable[[ServerEvent], None]
OnText = Callable[[str, int, int], None]


class SimulPolicy:
    """See the module docstring. ``emit`` gets every event; ``on_text(text, start_ms, end_ms)`` every emitted
    translation (EMIT and flush text), e.g. for speech output. ``source_language`` ``None`` is auto (the
    language rule decides, expecting ``language_prior``)."""

    def __init__(self, config: PolicyConfig, translator: SpeechTranslator, emit: Emit, *,
                 source_language: str | None = None, target_language: str = "en",
                 language_prior: str | None = None, on_text: OnText | None = None) -> None:
        self.config = config
        self.translator = translator
        self.emit = emit
        self.on_text = on_text
        self.rule = LanguageRule(fixed=source_language, prior=language_prior)
        self.observe_languages = True  # False: follow_language() drives the rule (the source captions)
        self.target_language = target_language
        self.history: list[Turn] = []
        self.backlog: list[Turn] = []  # WAIT turns since the last answer (what a flush re-translates)
        self.waits = 0  # consecutive WAITs
        self._open_start_ms: int | None = None  # start of the range processed since the last flush
        self._last_voiced_end_ms: int | None = None
        self._last_speech_ms: int | None = None  # where speech was last heard (for the silence rule)
        self.flushed_until_ms = 0  # flushes never cover audio before this again
        self._error_reported = False
        self._last_index = -1
        # stats
        self.chunks = 0
        self.counts = {"EMIT": 0, "WAIT": 0, "SKIP": 0}
        self.model_calls = 0
        self.skipped_calls = 0  # model calls saved by VAD skipping
        self.flushes: dict[str, int] = {}
        self.resets: dict[str, int] = {}
        self.untranslated_ms = 0
        self.dropped_chunks = 0
        self.errors = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.emitted: list[tuple[str, int, int]] = []  # (text, start_ms, end_ms), bounded
        self.max_emitted = 10_000

    # --- state ----------------------------------------------------------------------------------------------

    @property
    def history_ms(self) -> int:
        """Speech held in the dialogue (voiced chunks since the last cut)."""
        return sum(t.duration_ms for t in self.history)

    @property
    def backlog_ms(self) -> int:
        return sum(t.duration_ms for t in self.backlog)

    def needs_flush(self) -> bool:
        """True when a flush would cover a new range with something untranslated in it."""
        if self._open_start_ms is None or self._last_voiced_end_ms is None:
            return False
        if self._last_voiced_end_ms <= self.flushed_until_ms:
            return False
        return bool(self.backlog) or bool(getattr(self.translator, "pending", False))

    @property
    def source_language(self) -> str | None:
        """The source language of the next request (``None``: not known yet, the translator detects it)."""
        return self.rule.current

    def set_languages(self, source: str | None, target: str, prior: str | None = None) -> None:
        """Languages for the next turns (``source`` ``None``: auto). A change cuts nothing; the next turn simply
        uses them. Auto stays settled where it was unless the choice or the prior changed."""
        if source != self.rule.fixed or (source is None and prior != self.rule.prior):
            self.rule = LanguageRule(fixed=source, prior=prior)
        self.target_language = target

    def follow_language(self, language: str) -> None:
        """With auto: the language another detector settled on or switched to (the interpret app's source
        captions); the next turns use it. Ignored when the client fixed the language."""
        if self.rule.fixed is None:
            self.rule.settled = language

    def _detect(self) -> bool:
        return self.observe_languages and self.rule.fixed is None

    def _observe_language(self, result: Translation | None) -> None:
        ranking = result.extra.get("language_probs") if result is not None else None
        if not self.observe_languages or self.rule.fixed is not None or not ranking:
            return
        audio_s = result.extra.get("language_audio_s") if result is not None else None
        if self.rule.observe([(str(c), float(p)) for c, p in ranking],  # type: ignore[union-attr]
                             float(audio_s) if isinstance(audio_s, int | float) else 0.0):
            log.info("source language: %s", self.rule.current)

    # --- input ----------------------------------------------------------------------------------------------

    async def process(self, chunk: AudioChunk) -> None:
        """One chunk: SKIP, or one model turn (EMIT/WAIT), then any flush and cut it triggers."""
        if chunk.index <= self._last_index:
            raise ValueError(f"chunks must come in order: {chunk.index} after {self._last_index}")
        self._last_index = chunk.index
        self.chunks += 1
        if not chunk.voiced:
            await self._skip(chunk)
            return
        self._last_speech_ms = chunk.speech_end_ms if chunk.speech_end_ms is not None else chunk.end_ms
        turn = Turn(chunk.audio, chunk.start_ms, chunk.end_ms)
        request = TranslateRequest(history=tuple(self.history), audio=chunk.audio, start_ms=chunk.start_ms,
                                   end_ms=chunk.end_ms, source_language=self.source_language,
                                   target_language=self.target_language, detect_language=self._detect())
        result = await self._call(request)
        self._observe_language(result)
        self.history.append(turn)
        if self._open_start_ms is None:
            self._open_start_ms = chunk.start_ms
        self._last_voiced_end_ms = chunk.end_ms
        text = result.text.strip() if result is not None else ""
        turn.text = text
        turn.source_text = (result.source_text or "") if result is not None else ""
        action = "EMIT" if text else "WAIT"
        self.counts[action] += 1
        self._emit_chunk(chunk, action, text, result, attempted=True)
        if text:
            self.waits = 0
            self.backlog = []
            self._say(text, chunk.start_ms, chunk.end_ms)
        else:
            self.waits += 1
            self.backlog.append(turn)
            self._bound_backlog()
        if self.config.max_waits and self.waits >= self.config.max_waits:
            await self.flush("empty_chunks")
        reason = self._cut_reason(result)
        if reason is not None:
            await self.cut(reason)

    async def _skip(self, chunk: AudioChunk) -> None:
        self.counts["SKIP"] += 1
        self.skipped_calls += 1
        self._emit_chunk(chunk, "SKIP", "", None, attempted=False)
        quiet_ms = chunk.end_ms - self._last_speech_ms if self._last_speech_ms is not None else 0
        if quiet_ms >= self.config.silence_flush_ms and self.needs_flush():
            await self.flush("silence")

    def drop(self, chunk: AudioChunk, reason: str = "overloaded") -> None:
        """A chunk the caller could not process in time (its queue was full): reported as a SKIP with
        ``stop_reason`` = ``reason``, its speech counted as untranslated. It never enters the dialogue."""
        if chunk.index <= self._last_index:
            raise ValueError(f"chunks must come in order: {chunk.index} after {self._last_index}")
        self._last_index = chunk.index
        self.chunks += 1
        self.counts["SKIP"] += 1
        self.dropped_chunks += 1
        if chunk.voiced:
            self.untranslated_ms += chunk.duration_ms
        self.emit(TranslationChunk(index=chunk.index, action="SKIP", text="", source_text=None,
                                   audio_start_ms=chunk.start_ms, audio_end_ms=chunk.end_ms, stop_reason=reason,
                                   st_attempted=False, latency_ms=None))

    async def finish(self) -> None:
        """The audio ended: flush what is left (``end``)."""
        if self.needs_flush():
            await self.flush("end")

    # --- model calls ----------------------------------------------------------------------------------------

    async def _call(self, request: TranslateRequest) -> Translation | None:
        self.model_calls += 1
        try:
            result = await self.translator.translate(request)
        except AgentError as exc:
            self.errors += 1
            log.warning("translation turn failed: %s", exc)
            if not self._error_reported:
                self._error_reported = True
                self.emit(error_event(exc))
            return None
        self._error_reported = False
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        return result

    def _emit_chunk(self, chunk: AudioChunk, action: str, text: str, result: Translation | None, *,
                    attempted: bool) -> None:
        latency = round((time.monotonic() - chunk.ready_at) * 1000, 1) if attempted else None
        self.emit(TranslationChunk(
            index=chunk.index, action=action, text=text,  # type: ignore[arg-type]
            source_text=(result.source_text if result is not None else None),
            audio_start_ms=chunk.start_ms, audio_end_ms=chunk.end_ms,
            prompt_tokens=result.prompt_tokens if result is not None else 0,
            completion_tokens=result.completion_tokens if result is not None else 0,
            stop_reason=(result.stop_reason if result is not None else ("error" if attempted else None)),
            st_attempted=attempted, latency_ms=latency,
            source_language=(str(result.extra["language"]) if result is not None and result.extra.get("language")
                             else None),
        ))

    def _say(self, text: str, start_ms: int, end_ms: int) -> None:
        self.emitted.append((text, start_ms, end_ms))
        if len(self.emitted) > self.max_emitted:
            del self.emitted[: len(self.emitted) - self.max_emitted]
        if self.on_text is not None:
            self.on_text(text, start_ms, end_ms)

    def _bound_backlog(self) -> None:
        while self.backlog and self.backlog_ms > self.config.max_backlog_ms:
            dropped = self.backlog.pop(0)
            self.untranslated_ms += dropped.duration_ms
            self.flushed_until_ms = max(self.flushed_until_ms, dropped.end_ms)
            self._open_start_ms = self.backlog[0].start_ms if self.backlog else None

    # --- flush and cut --------------------------------------------------------------------------------------

    async def flush(self, trigger: str) -> None:
        """Re-translate the backlog in one request (``translation.flush``), once per source range."""
        if not self.needs_flush() or self._open_start_ms is None or self._last_voiced_end_ms is None:
            return
        start_ms = max(self._open_start_ms, self.flushed_until_ms)
        end_ms = self._last_voiced_end_ms
        self.flushed_until_ms = end_ms  # before the call: a failed flush is not retried either
        backlog = self.backlog
        n = len(backlog)
        before = self.history[: len(self.history) - n] if n else list(self.history)
        audio = (np.concatenate([t.audio for t in backlog]) if backlog else np.zeros(0, dtype=np.float32))
        request = TranslateRequest(history=tuple(before), audio=audio,
                                   start_ms=backlog[0].start_ms if backlog else end_ms, end_ms=end_ms,
                                   source_language=self.source_language, target_language=self.target_language,
                                   flush=True, final=trigger != "empty_chunks", detect_language=self._detect())
        result = await self._call(request)
        self._observe_language(result)
        text = result.text.strip() if result is not None else ""
        self.flushes[trigger] = self.flushes.get(trigger, 0) + 1
        if result is None or not text:
            self.untranslated_ms += sum(t.duration_ms for t in backlog)
        if text and self.history:
            last = self.history[-1]
            last.text = (last.text + " " + text).strip()
            last.flushed = True
        self.backlog = []
        self.waits = 0
        self._open_start_ms = None
        self.emit(TranslationFlush(trigger=trigger, text=text, audio_start_ms=start_ms,  # type: ignore[arg-type]
                                   audio_end_ms=end_ms))
        if text:
            self._say(text, start_ms, end_ms)

    def _cut_reason(self, result: Translation | None) -> str | None:
        if result is not None and result.stop_reason == "length":
            return "length"
        limit = self.config.max_model_len
        if result is not None and limit is not None and (
                result.prompt_tokens + result.completion_tokens + self.config.budget_margin >= limit):
            return "budget"
        if self.config.window_s is not None and self.history_ms >= self.config.window_s * 1000:
            return "window"
        return None

    async def cut(self, reason: str) -> None:
        """Flush, then clear the dialogue (``translation.reset``). The source clock and VAD are not touched."""
        if self.needs_flush():
            await self.flush("cut")
        self.history = []
        self.backlog = []
        self.waits = 0
        self._open_start_ms = None
        self._last_voiced_end_ms = None
        self.translator.reset()
        self.resets[reason] = self.resets.get(reason, 0) + 1
        self.emit(TranslationReset(reason=reason))  # type: ignore[arg-type]

    # --- reporting ------------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {
            "chunks": self.chunks,
            "emit": self.counts["EMIT"],
            "wait": self.counts["WAIT"],
            "skip": self.counts["SKIP"],
            "model_calls": self.model_calls,
            "model_calls_saved": self.skipped_calls,
            "flushes": dict(self.flushes),
            "resets": dict(self.resets),
            "untranslated_ms": self.untranslated_ms,
            "dropped_chunks": self.dropped_chunks,
            "errors": self.errors,
            "history_ms": self.history_ms,
            "backlog_ms": self.backlog_ms,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "translator": getattr(self.translator, "name", type(self.translator).__name__),
            "source_language": self.source_language,
            "language_settled": self.rule.settled is not None,
            "language_switches": self.rule.switches,
        }

    def translation(self) -> str:
        """Everything emitted so far (EMITs and flushes), in order."""
        return " ".join(text for text, _, _ in self.emitted)
