"""``StreamingTranscriber``: live captions of one audio stream, independent of the recognizer behind it.

Like whisper_streaming's ``OnlineASRProcessor``, it owns the audio buffer and the commit rule and calls an ASR
backend only through ``recognize(TranscribeRequest) -> Transcript``. Speech boundaries come from outside (the
VAD segmenter), so silence is never sent to the recognizer.

Partials: within an utterance the growing buffer is decoded (greedy) as soon as the VAD confirms speech, then
every ``decode_interval_ms`` of audio, one decode at a time, with the committed words forced as the decoder
prefix; LocalAgreement-2 commits what two consecutive continuations agree on. Every decode yields a
``caption.partial`` (committed text never changes once sent).

Finals: the utterance's whole audio (from ``preroll_ms`` before the VAD's start to ``tail_ms`` after its end), after
up to ``context_s`` of the session's previous utterances, is decoded once more with no forced prefix, as offline
transcription would (only the segments of this utterance are kept), with beam search (``final_beam_size``;
optionally the session's previous finals as Whisper's ``initial_prompt``, ``prompt_chars``). It starts at the first
quiet window once ``tail_ms`` of it has arrived, so when the VAD confirms the end of speech the final is usually
ready; if speech resumes, it is discarded. A final decode never waits for a partial decode still running, and it is
``urgent`` for the worker (served before the partials of every session). A final never repeats the tail of the
previous final (n-gram guard), a sentence of its own, or a run of three words or more said twice in a row (the
decoder looping in the padding after the speech; partials are cleaned the same way). Past ``trim_after_s`` the
buffer is cut at the end of a committed segment (a final caption for what precedes it); past ``hard_limit_s``
without such a boundary everything recognized so far becomes final. Results that look like silence (Whisper's
no-speech rule) or loops (compression ratio) are dropped.

Under load: utterances that start while the previous one still waits for its final decode queue up (their audio
is kept, up to ``RECENT_S``) and each gets its own final, in order; an utterance whose end is known is never
extended by a later one. Partials and finals carry ``behind_ms``: how much audio arrived after the audio they
cover (a decode that falls behind says so).

Language: a :class:`~rtc_agent.apps.captions.language.LanguageRule` keeps one language per session with
``auto``; an utterance is decoded in one language from its first decode to its final.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np

from rtc_agent.apps.audio_ring import AudioRing
from rtc_agent.apps.captions.context_cut import without_context
from rtc_agent.apps.captions.earlier_finals import EarlierFinals, FinalCaption
from rtc_agent.apps.captions.language import LanguageRule
from rtc_agent.apps.captions.local_agreement import (
    LocalAgreement,
    drop_loops,
    drop_overlap,
    drop_repeated_sentences,
    strip_committed,
)
from rtc_agent.apps.captions.speech_segmenter import SpeechEvent
from rtc_agent.engines.asr.base import SAMPLE_RATE, TranscribeRequest, Transcript
from rtc_agent.errors import AgentError
from rtc_agent.protocol import ServerEvent, error_event
from rtc_agent.protocol.events import CaptionFinal, CaptionPartial, SpeechStarted, SpeechStopped

log = logging.getLogger(__name__)

Recognize = Callable[[TranscribeRequest], Awaitable[Transcript]]
Spawn = Callable[[Coroutine[Any, Any, Any], str], asyncio.Task]

_segment_ids = itertools.count(1)
#: Audio kept outside the utterance being decoded: the next one's pre-roll, and every utterance queued behind it.
RECENT_S = 30.0

__all__ = ["RECENT_S", "FinalCaption", "StreamingTranscriber", "TranscriberConfig", "transcriber_config"]


@dataclass
class TranscriberConfig:
    language: str | None = None  # None: auto (the session's language rule decides)
    language_prior: str | None = None  # with auto: the language to expect (the browser's)
    task: str = "transcribe"
    decode_interval_ms: int = 400
    min_decode_ms: int = 300  # don't decode less audio than this
    min_commit_ms: int = 1500  # hypotheses of less audio are shown as tentative but never committed
    trim_after_s: float = 15.0
    hard_limit_s: float = 28.0
    preroll_ms: int = 200
    tail_ms: int = 150  # audio kept after the end of speech for the final decode
    # The final decode's beam (partials are greedy; 0: the engine's default) and the previous finals given to the
    # decoder as context (0: none). Measured on the speech set (README), finals in virtual time with 8 s of audio
    # context: beam 5 6.3 % WER against greedy 8.4 % (offline 5.2 %); the previous finals as the prompt made
    # the decoder copy earlier sentences (21 %), and forcing them as the decoder prefix over their audio gave 9.9 %.
    final_beam_size: int = 5
    prompt_chars: int = 0
    prompt_partials: bool = False
    # The final decode also hears the session's previous utterances (their audio, not their text; at most
    # ``context_s`` seconds of audio with the utterance) and keeps only the text of this one (context_cut.py):
    # Whisper hears a voice better with more of it. Measured on the speech set in virtual time with beam 5 (README):
    # no context 8.4 % greedy, 8 s 6.3 %, 12 s 5.2 %, 16 s 4.8 % WER (offline 5.2 %). The span is cut so the decode
    # fits ``final_budget_ms``, from the wall time per second of audio of the session's recent final decodes
    # (queueing included: under load it shrinks). Utterances longer than ``context_max_utterance_s`` are decoded
    # alone.
    context_s: float = 16.0
    final_budget_ms: int = 450
    context_max_utterance_s: float = 15.0
    no_speech_threshold: float = 0.6
    logprob_threshold: float = -1.0
    max_finals: int = 10_000  # kept for export


def transcriber_config(settings: Any, language: str | None, prior: str | None = None,
                       **options: Any) -> TranscriberConfig:
    """A config for ``language`` (None: auto, expecting ``prior``) with the server ``settings``' context and
    final-decode budget (``captions_context_s``, ``captions_final_budget_ms``) and any other ``options``."""
    return TranscriberConfig(language=language, language_prior=prior,
                             context_s=float(getattr(settings, "captions_context_s", TranscriberConfig.context_s)),
                             final_budget_ms=int(getattr(settings, "captions_final_budget_ms",
                                                         TranscriberConfig.final_budget_ms)), **options)


@dataclass
class _Queued:
    """An utterance the VAD found while the one before it was still waiting for its final."""

    start_ms: int
    end_ms: int | None = None


@dataclass
class _FinalResult:
    transcript: Transcript | None  # None: the decode failed (the final is what the partials committed)
    covered_ms: int


class StreamingTranscriber:
    def __init__(self, recognize: Recognize, emit: Callable[[ServerEvent], None], spawn: Spawn,
                 config: TranscriberConfig | None = None) -> None:
        self.recognize = recognize
        self.emit = emit
        self.spawn = spawn
        self.config = config or TranscriberConfig()
        self.rule = LanguageRule(fixed=self.config.language, prior=self.config.language_prior)
        self.earlier = EarlierFinals(context_s=self.config.context_s, budget_ms=self.config.final_budget_ms,
                                     preroll_ms=self.config.preroll_ms, max_finals=self.config.max_finals)
        self._recent = AudioRing(RECENT_S)
        self._queue: deque[_Queued] = deque()
        self._chunks: list[np.ndarray] = []
        self._samples = 0
        self._buffer_start_ms = 0
        self._la = LocalAgreement()
        self._boundary: tuple[int, float] | None = None  # (committed words, seconds into the buffer)
        self._segment_id: str | None = None
        self._segment_start_ms = 0
        self._utterance = 0  # generation: results of an older utterance are ignored
        self._active = False
        self._ending_at: int | None = None
        self._pause_at: int | None = None  # the quiet in progress (speech may resume)
        self._final: _FinalResult | None = None
        self._decoding: asyncio.Task | None = None  # a partial decode in flight
        self._final_decoding: asyncio.Task | None = None  # a final decode in flight (never waits for a partial)
        self._want_decode = False
        self._last_decode_at_ms = 0
        self._last_decode_wall_ms = 0.0
        self._partials_sent = 0
        self._error_reported = False
        self._utterance_language: str | None = None
        self._last_language: str | None = self.config.language
        self._last_final_end_ms: int | None = None
        # numbers for stats()
        self.decodes = 0
        self.final_decodes = 0
        self.dropped_results = 0
        self.decode_seconds = 0.0
        self.repeats_dropped = 0
        self.max_behind_ms = 0

    # --- input ---

    @property
    def buffer_ms(self) -> int:
        return self._samples * 1000 // SAMPLE_RATE

    @property
    def _buffer_end_ms(self) -> int:
        return self._buffer_start_ms + self.buffer_ms

    @property
    def language(self) -> str | None:
        """The session's language: the one it settled on (or was given), else the last one used."""
        return self.rule.current or self._last_language

    @property
    def pending_utterances(self) -> int:
        """Utterances found by the VAD that have no final yet (the one in progress included)."""
        return int(self._active) + len(self._queue)

    def set_language(self, language: str | None, prior: str | None = None) -> None:
        """A new language choice (``None``: auto) from the client; takes effect from the next utterance."""
        self.config.language, self.config.language_prior = language, prior
        self.rule = LanguageRule(fixed=language, prior=prior)

    def push_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        """16 kHz mono float32 audio in order; kept for the pre-roll and, during speech, in the buffer."""
        self._recent.push(pcm, start_ms)
        if self._active and self._ending_at is None:
            self._append(pcm)

    def _append(self, pcm: np.ndarray) -> None:
        self._chunks.append(pcm)
        self._samples += len(pcm)

    def on_speech(self, event: SpeechEvent, now_ms: int) -> None:
        """A boundary from the VAD segmenter."""
        if self._queue:  # the boundaries belong to the utterances waiting behind the current one
            if event.kind == "start":
                self._queue.append(_Queued(event.ms))
            elif event.kind == "end" and self._queue[-1].end_ms is None:
                self._queue[-1].end_ms = event.ms
        elif event.kind == "start":
            if self._active and self._ending_at is not None:
                self._queue.append(_Queued(event.ms))  # begins when the previous final is out; its audio is kept
            else:
                self._begin(event.ms)
        elif self._active and self._ending_at is None:
            if event.kind == "pause":
                self._pause_at = event.ms
            elif event.kind == "resume":
                self._pause_at = None
                self._final = None  # a final decoded at the pause is out of date
            elif event.kind == "end":
                self._end(event.ms)
        self.poll(now_ms)

    def _end(self, end_ms: int) -> None:
        self.emit(SpeechStopped(audio_end_ms=end_ms))
        self._ending_at = end_ms
        self._pause_at = None
        self._cut_after(end_ms + self.config.tail_ms)

    def _begin(self, start_ms: int, end_ms: int | None = None) -> None:
        if self._active:  # a start without an end, or the queue outgrew the kept audio: close it as it is
            self._finalize()
        self._utterance += 1
        self._active = True
        self._ending_at = None
        self._pause_at = None
        self._final = None
        self._la.reset()
        self._boundary = None
        self._partials_sent = 0
        self._error_reported = False
        self._utterance_language = self.rule.current
        self._segment_id = f"seg_{next(_segment_ids)}"
        from_ms = start_ms - self.config.preroll_ms
        to_ms = self._recent.end_ms if end_ms is None else min(self._recent.end_ms, end_ms + self.config.tail_ms)
        preroll = self._recent.slice(from_ms, to_ms)
        self._chunks, self._samples = ([preroll], len(preroll)) if len(preroll) else ([], 0)
        self._buffer_start_ms = max(from_ms, self._recent.start_ms) if len(preroll) else start_ms
        self._segment_start_ms = start_ms
        self._last_decode_at_ms = start_ms
        # the VAD confirms speech after its minimum duration: decode what is there at once, so the first
        # partial is not a whole interval later than the ones after it (unless decodes are slow: a busy engine)
        self._want_decode = self.decode_interval_ms <= self.config.decode_interval_ms
        self.emit(SpeechStarted(audio_start_ms=start_ms))
        if end_ms is not None:
            self._end(end_ms)

    def _cut_after(self, end_ms: int) -> None:
        keep = max(0, (end_ms - self._buffer_start_ms) * SAMPLE_RATE // 1000)
        if keep < self._samples:
            audio = self._audio()[:keep]
            self._chunks, self._samples = [audio], len(audio)

    def _audio(self) -> np.ndarray:
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0] if self._chunks else np.zeros(0, dtype=np.float32)

    # --- scheduling ---

    def poll(self, now_ms: int) -> None:
        """Start a decode when one is due; finish an utterance whose final is ready (then begin the next one
        that waited)."""
        for _ in range(len(self._queue) + 2):
            self._begin_queued()
            if not self._active or self._running(self._final_decoding):
                return
            if self._ending_at is None:
                break
            if self._final is not None and self._final.covered_ms >= self._final_target_ms():
                self._finalize()
                continue  # the next utterance may be waiting
            self._start_decode(now_ms, final=True)
            return
        if not self._active or self._ending_at is not None:
            return
        if self._pause_at is not None:  # (no final decode is running: see above)
            at = self._pause_at + self.config.tail_ms
            if (self._final is None or self._final.covered_ms < at) and self._buffer_end_ms >= at:
                self._start_decode(now_ms, final=True)  # speculative: ready when the VAD confirms the end
            return
        if self._utterance_language is None and self.buffer_ms < self.rule.config.min_audio_s * 1000:
            return  # the language is not known yet: nothing is decoded (or labelled) from too little audio
        if self._running(self._decoding):
            return
        due = now_ms - self._last_decode_at_ms >= self.decode_interval_ms
        if (due or self._want_decode) and self.buffer_ms >= self.config.min_decode_ms:
            self._start_decode(now_ms, final=False)

    @staticmethod
    def _running(task: asyncio.Task | None) -> bool:
        return task is not None and not task.done()

    def _final_target_ms(self) -> int:
        """The audio a final decode must cover: to the end of speech plus the tail (or all there is)."""
        end = self._ending_at if self._ending_at is not None else self._buffer_end_ms
        return min(end + self.config.tail_ms, self._buffer_end_ms)

    def _begin_queued(self) -> None:
        """Begin the next queued utterance once the current one is final (or at once when the current one's
        final takes so long that the kept audio would run out: then its text is final as it is)."""
        if not self._queue:
            return
        if not self._active or self._recent.end_ms - self._queue[0].start_ms > (RECENT_S - 2) * 1000:
            nxt = self._queue.popleft()
            self._begin(nxt.start_ms, nxt.end_ms)

    @property
    def decode_interval_ms(self) -> float:
        """The configured interval, stretched when decodes come back slowly (a busy engine shared by many
        sessions): partials then come less often, but every session stays real time."""
        return max(self.config.decode_interval_ms, 1.5 * self._last_decode_wall_ms)

    def _start_decode(self, now_ms: int, *, final: bool) -> None:
        self._want_decode = False
        task = self.spawn(self._decode(now_ms, final), "captions-decode")
        if final:
            self._final_decoding = task
        else:
            self._last_decode_at_ms = now_ms
            self._decoding = task

    @property
    def finals(self) -> deque[FinalCaption]:
        """The session's finals so far (kept for export)."""
        return self.earlier.finals

    def context_limit_s(self) -> float:
        """The most audio (seconds, the utterance included) a final decode may hear now."""
        return self.earlier.limit_s()

    async def _decode(self, now_ms: int, final: bool) -> None:
        audio = self._audio()
        context_ms = 0
        context_text = ""
        if final:
            target = self._pause_at + self.config.tail_ms if self._pause_at is not None else self._final_target_ms()
            audio = audio[: max(0, (target - self._buffer_start_ms) * SAMPLE_RATE // 1000)]
            if self.config.context_s > 0 and len(audio) <= self.config.context_max_utterance_s * SAMPLE_RATE:
                found = self.earlier.span(target, self._recent.start_ms, self._buffer_start_ms,
                                          self._utterance_language)
                if found is not None and found[0] < self._buffer_start_ms:
                    context = self._recent.slice(found[0], self._buffer_start_ms)
                    context_ms = len(context) * 1000 // SAMPLE_RATE
                    audio = np.concatenate([context, audio]) if context_ms else audio
                    context_text = found[1]
        covered = self._buffer_start_ms + (len(audio) * 1000 // SAMPLE_RATE - context_ms)
        utterance = self._utterance
        detect = self.rule.fixed is None and (final or self._utterance_language is None)
        request = TranscribeRequest(
            audio=audio, language=self._utterance_language, task=self.config.task,
            prompt=(self.earlier.prompt(self._utterance_language, self.config.prompt_chars)
                    if final or self.config.prompt_partials else ""),
            prefix="" if final else " ".join(self._la.committed),
            beam_size=(self.config.final_beam_size or None) if final else 1, detect_language=detect,
            urgent=final,
        )
        started = time.monotonic()
        try:
            transcript: Transcript | None = await self.recognize(request)
            wall_s = time.monotonic() - started
            if not final:
                self._last_decode_wall_ms = wall_s * 1000
            else:
                self.earlier.decoded(wall_s, request.duration_s)
        except AgentError as exc:
            if not self._error_reported:
                self._error_reported = True
                self.emit(error_event(exc))
            transcript = None
        finally:
            if final:
                self._final_decoding = None
            else:
                self._decoding = None
        if utterance != self._utterance:
            return
        if transcript is not None:
            self.decodes += 1
            self.final_decodes += int(final)
            self.decode_seconds += transcript.decode_s
        if final:
            if transcript is not None and context_ms:
                transcript = without_context(transcript, context_ms / 1000, context_text)
            self._apply_final(transcript, covered)
        elif transcript is not None:
            self._apply(transcript, covered)
        self.poll(max(now_ms, covered))

    # --- results ---

    def _usable(self, t: Transcript) -> bool:
        if t.looks_repetitive:
            return False
        silent = t.no_speech_prob > self.config.no_speech_threshold and t.avg_logprob < self.config.logprob_threshold
        return not (silent and not self._la.committed)

    def _ranking(self, t: Transcript) -> list[tuple[str, float]]:
        if t.language_probs:
            return list(t.language_probs)
        return [(t.language, t.language_prob if t.language_prob is not None else 1.0)] if t.language else []

    def _decide_language(self, t: Transcript, *, final: bool) -> bool:
        """For an utterance whose language is still open: decide it from this result. False when the result is
        in another language than the one chosen (it is dropped and the audio decoded again)."""
        if self._utterance_language is not None:
            return True
        ranking = self._ranking(t)
        chosen = self.rule.choose(ranking, t.audio_s, final=final)
        if chosen is None:
            if final or not ranking:  # the utterance ended (or the engine reports no language): take it as it is
                self._utterance_language = t.language
                return True
            return False  # unsure: wait for more of the utterance
        self._utterance_language = chosen
        return chosen == t.language

    def _behind_ms(self, covered_ms: int) -> int:
        return max(0, self._recent.end_ms - covered_ms)

    def _apply(self, t: Transcript, covered_ms: int) -> None:
        if not self._decide_language(t, final=False):
            self._want_decode = self._utterance_language is not None  # decode again in the chosen language
            return
        if not self._usable(t):
            self.dropped_results += 1
            self._la.previous = []
            return
        words = drop_loops(t.text).split()
        continuation = words if t.prefix_applied else strip_committed(words, self._la.committed)
        if t.audio_s * 1000 < self.config.min_commit_ms:
            self._la.previous = continuation  # too little audio to trust: compare against it, commit nothing
            newly: list[str] = []
        else:
            newly = self._la.update(continuation)
        if newly and t.prefix_applied:
            self._note_boundary(t, len(newly))
        if not self._la.committed and not self._la.tentative:
            return
        self._partials_sent += 1
        behind = self._behind_ms(covered_ms)
        self.max_behind_ms = max(self.max_behind_ms, behind)
        self.emit(CaptionPartial(
            segment_id=self._segment_id or "", committed=" ".join(self._la.committed),
            tentative=" ".join(self._la.tentative), audio_start_ms=self._segment_start_ms,
            audio_end_ms=covered_ms, language=self._utterance_language, behind_ms=behind,
        ))
        self._trim()

    def _apply_final(self, t: Transcript | None, covered_ms: int) -> None:
        if t is not None and not self._decide_language(t, final=True):
            return  # decoded in a language the rule did not choose: poll() decodes it again
        if self._ending_at is None and self._pause_at is None:
            return  # speech resumed while it ran
        self._final = _FinalResult(t, covered_ms)

    def _note_boundary(self, t: Transcript, committed_now: int) -> None:
        """Remember the last timestamped segment end that lies within the committed words."""
        count = 0
        best: tuple[int, float] | None = None
        for segment in t.segments[:-1]:  # the last segment may still grow
            count += len(segment.text.split())
            if count > committed_now:
                break
            best = (count, segment.end)
        if best is not None:
            before = len(self._la.committed) - committed_now
            self._boundary = (before + best[0], best[1])

    def _trim(self) -> None:
        seconds = self._samples / SAMPLE_RATE
        if seconds <= self.config.trim_after_s:
            return
        if self._boundary is not None and self._boundary[1] >= 1.0:
            words, at_s = self._boundary
            end_ms = self._buffer_start_ms + int(at_s * 1000)
            self._emit_final(" ".join(self._la.drop_committed(words)), self._segment_start_ms, end_ms)
            cut = int(at_s * SAMPLE_RATE)
            audio = self._audio()[cut:]
            self._chunks, self._samples = [audio], len(audio)
            self._buffer_start_ms = end_ms
        elif seconds > self.config.hard_limit_s:
            text = " ".join([*self._la.committed, *self._la.tentative])
            end_ms = self._buffer_end_ms
            self._emit_final(text, self._segment_start_ms, end_ms)
            self._la.reset()
            self._chunks, self._samples = [], 0
            self._buffer_start_ms = end_ms
        else:
            return
        self._boundary = None
        self._final = None
        self._segment_id = f"seg_{next(_segment_ids)}"
        self._segment_start_ms = self._buffer_start_ms
        self._partials_sent = 0

    def _final_text(self) -> str:
        """The final decode's text when it is usable, else what the partials showed; without repeats."""
        streamed = [*self._la.committed, *self._la.tentative]
        t = self._final.transcript if self._final is not None else None
        words = t.text.split() if t is not None and self._usable(t) and t.text.strip() else streamed
        text = drop_repeated_sentences(drop_loops(" ".join(words)))
        previous = self.earlier.last
        if previous is not None:
            # audio shared with the previous utterance (its pre-roll) may repeat a word or two of it; longer
            # repeats of its tail are the decoder copying its context
            overlap = (self._buffer_start_ms < previous.end_ms + 50)
            text = drop_overlap(text, previous.text, min_n=1 if overlap else 3)
        if len(text.split()) < len(words):
            self.repeats_dropped += 1
        return text

    def _finalize(self) -> None:
        end_ms = self._ending_at if self._ending_at is not None else self._buffer_end_ms
        text = self._final_text()
        t = self._final.transcript if self._final is not None else None
        if self._utterance_language is None and t is not None:
            self._utterance_language = t.language
        if text or self._partials_sent:
            self._emit_final(text, self._segment_start_ms, end_ms)
        if t is not None and self.rule.fixed is None:
            utterance_s = (end_ms - self._segment_start_ms) / 1000
            self.rule.observe(self._ranking(t), utterance_s)
        self._last_language = self._utterance_language or self._last_language
        self._active = False
        self._ending_at = None
        self._pause_at = None
        self._final = None
        self._utterance += 1
        self._la.reset()
        self._chunks, self._samples = [], 0
        self._segment_id = None

    def _emit_final(self, text: str, start_ms: int, end_ms: int) -> None:
        segment_id = self._segment_id or f"seg_{next(_segment_ids)}"
        language = self._utterance_language
        self.emit(CaptionFinal(segment_id=segment_id, text=text, audio_start_ms=start_ms, audio_end_ms=end_ms,
                               language=language, behind_ms=self._behind_ms(end_ms)))
        if text:
            self.earlier.add(FinalCaption(segment_id, text, start_ms, end_ms, language))
        self._last_final_end_ms = end_ms

    def flush(self, now_ms: int) -> None:
        """The audio ended: treat it as the end of speech (of every utterance still open)."""
        if self._queue:
            if self._queue[-1].end_ms is None:
                self._queue[-1].end_ms = now_ms
        elif self._active and self._ending_at is None:
            self._end(now_ms)
        self.poll(now_ms)

    def stats(self) -> dict[str, Any]:
        return {
            "language": self.language,
            "language_settled": self.rule.settled is not None,
            "language_switches": self.rule.switches,
            "decodes": self.decodes,
            "final_decodes": self.final_decodes,
            "mean_decode_ms": round(1000 * self.decode_seconds / self.decodes, 1) if self.decodes else None,
            "dropped_results": self.dropped_results,
            "repeats_dropped": self.repeats_dropped,
            "finals": len(self.finals),
            "pending_utterances": self.pending_utterances,
            "max_behind_ms": self.max_behind_ms,
            "buffer_ms": self.buffer_ms if self._active else 0,
        }
