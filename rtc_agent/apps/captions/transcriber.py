"""``StreamingTranscriber``: live captions of one audio stream, independent of the recognizer behind it.

Like whisper_streaming's ``OnlineASRProcessor``, it owns the audio buffer and the commit rule and calls an ASR
backend only through ``recognize(TranscribeRequest) -> Transcript``. Speech boundaries come from outside (the
VAD segmenter), so silence is never sent to the recognizer. This module decides when decodes run and what they
hear; :class:`~rtc_agent.apps.captions.caption_writer.CaptionWriter` turns their results into captions.

Partials: within an utterance the growing buffer is decoded (greedy) as soon as the VAD confirms speech, then
every ``decode_interval_ms`` of audio (stretched when decodes come back slowly), one decode at a time, with the
committed words forced as the decoder prefix; every decode yields a ``caption.partial``.

Finals: the utterance's whole audio (from ``preroll_ms`` before the VAD's start to ``tail_ms`` after its end), after
up to ``context_s`` of the session's previous utterances, is decoded once more, as offline transcription would
(only the segments of this utterance are kept), with beam search (``final_beam_size``; optionally the previous
finals as ``initial_prompt``, ``prompt_chars``; or forced over their audio, ``force_context``, with the last part
of one the budget cuts into, ``partial_context_ms``, once the engine has forced one). It starts at the first
quiet window once ``tail_ms`` of it has arrived, so when the VAD confirms the end of speech the final is usually
ready; if speech resumes, it is discarded. A final decode never waits for a partial decode still running, and it is
``urgent`` for the worker (served before the partials of every session). The context span is cut so the decode
fits ``final_budget_ms`` (:class:`~rtc_agent.apps.captions.earlier_finals.EarlierFinals`; more of it for an
utterance its partials found hard to hear: :mod:`~rtc_agent.apps.captions.partial_confidence`); where no earlier
utterance fits, the decode still hears the pause before the utterance when enough of it is voiced (speech the VAD
missed: :mod:`~rtc_agent.apps.captions.final_audio`).

A long utterance (``split_min_s``, and longer than the budget decodes at the measured speed) that pauses for at
least ``tail_ms`` and goes on is split there: the final decode made at the pause is the final of the part before
it, and the final at the utterance's end decodes only the rest (hearing the part before as context).

Under load: utterances that start while the previous one still waits for its final decode queue up (their audio
is kept, up to ``RECENT_S``) and each gets its own final, in order; an utterance whose end is known is never
extended by a later one.

Language: a :class:`~rtc_agent.apps.captions.language.LanguageRule` keeps one language per session with
``auto``; an utterance is decoded in one language from its first decode to its final.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np

from rtc_agent.apps.audio_ring import AudioRing
from rtc_agent.apps.captions.caption_writer import CaptionWriter
from rtc_agent.apps.captions.context_cut import without_context
from rtc_agent.apps.captions.earlier_finals import EarlierFinals, FinalCaption
from rtc_agent.apps.captions.final_audio import DecodeAudio, final_audio
from rtc_agent.apps.captions.language import LanguageRule
from rtc_agent.apps.captions.partial_confidence import PartialConfidence
from rtc_agent.apps.captions.speech_segmenter import SpeechEvent
from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.apps.captions.utterance_audio import UtteranceAudio
from rtc_agent.apps.captions.voiced import VoicedAudio
from rtc_agent.engines.asr.base import SAMPLE_RATE, TranscribeRequest, Transcript
from rtc_agent.errors import AgentError
from rtc_agent.protocol import ServerEvent, error_event
from rtc_agent.protocol.events import SpeechStarted, SpeechStopped

Recognize = Callable[[TranscribeRequest], Awaitable[Transcript]]
Spawn = Callable[[Coroutine[Any, Any, Any], str], asyncio.Task]

#: Audio kept outside the utterance being decoded: the next one's pre-roll, and every utterance queued behind it.
RECENT_S = 30.0

__all__ = ["RECENT_S", "Recognize", "Spawn", "StreamingTranscriber"]


@dataclass
class _Queued:
    """An utterance the VAD found while the one before it was still waiting for its final."""

    start_ms: int
    end_ms: int | None = None


class StreamingTranscriber:
    """Captions of one stream (see the module docstring). ``emit`` gets every event; ``spawn(coro, name)`` runs
    the decodes as tasks of the session."""

    def __init__(self, recognize: Recognize, emit: Callable[[ServerEvent], None], spawn: Spawn,
                 config: TranscriberConfig | None = None) -> None:
        self.recognize = recognize
        self.emit = emit
        self.spawn = spawn
        self.config = config or TranscriberConfig()
        self.earlier = EarlierFinals(context_s=self.config.context_s, budget_ms=self.config.final_budget_ms,
                                     preroll_ms=self.config.preroll_ms, max_finals=self.config.max_finals)
        self._recent = AudioRing(RECENT_S)
        self._buffer = UtteranceAudio()
        self.writer = CaptionWriter(self.config, emit, self.earlier, self._buffer, self._recent)
        self._queue: deque[_Queued] = deque()
        self._utterance = 0  # generation: results of an older utterance are ignored
        self._active = False
        self._ending_at: int | None = None
        self._pause_at: int | None = None  # the quiet in progress (speech may resume)
        self._split_at: int | None = None  # where the last pause's decoded audio ended, when its quiet lasted
        self._decoding: asyncio.Task | None = None  # a partial decode in flight
        self._final_decoding: asyncio.Task | None = None  # a final decode in flight (never waits for a partial)
        self._want_decode = False
        self._last_decode_at_ms = 0
        self._last_decode_wall_ms = 0.0
        self._error_reported = False
        self._engine_forces = False  # the engine forced a final's context once: partial contexts are safe
        self._confidence = PartialConfidence()  # of the utterance's partials
        # numbers for stats()
        self.decodes = self.final_decodes = self.splits = self.forced_context_finals = self.hard_finals = 0
        self.decode_seconds = 0.0

    # --- state ---

    @property
    def buffer_ms(self) -> int:
        return self._buffer.duration_ms

    @property
    def audio_end_ms(self) -> int:
        """The end of the audio pushed so far, on the session clock (0 before any)."""
        return self._recent.end_ms

    @property
    def rule(self) -> LanguageRule:
        """The session's language rule."""
        return self.writer.rule

    @property
    def pending_utterances(self) -> int:
        """Utterances found by the VAD that have no final yet (the one in progress included)."""
        return int(self._active) + len(self._queue)

    @property
    def finals(self) -> deque[FinalCaption]:
        """The session's finals so far (kept for export)."""
        return self.earlier.finals

    def context_limit_s(self) -> float:
        """The most audio (seconds, the utterance included) a final decode may hear now."""
        return self.earlier.limit_s()

    # --- input ---

    def set_language(self, language: str | None, prior: str | None = None) -> None:
        """A new language choice (``None``: auto) from the client; takes effect from the next utterance."""
        self.config.language, self.config.language_prior = language, prior
        self.writer.rule = LanguageRule(fixed=language, prior=prior)

    def push_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        """16 kHz mono float32 audio in order; kept for the pre-roll and, during speech, in the buffer."""
        self._recent.push(pcm, start_ms)
        if self._active and self._ending_at is None:
            self._buffer.append(pcm)

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
                pause, self._pause_at = self._pause_at, None
                quiet_through_tail = pause is not None and event.ms - pause >= self.config.tail_ms
                self._split_at = pause + self.config.tail_ms if quiet_through_tail and pause is not None else None
                if not self._split():
                    self.writer.final = None  # a final decoded at the pause is out of date
            elif event.kind == "end":
                self._end(event.ms)
        self.poll(now_ms)

    def flush(self, now_ms: int) -> None:
        """The audio ended: treat it as the end of speech (of every utterance still open)."""
        if self._queue:
            if self._queue[-1].end_ms is None:
                self._queue[-1].end_ms = now_ms
        elif self._active and self._ending_at is None:
            self._end(now_ms)
        self.poll(now_ms)

    def _end(self, end_ms: int) -> None:
        self.emit(SpeechStopped(audio_end_ms=end_ms))
        self._ending_at = end_ms
        self._pause_at = None
        self._buffer.keep_until(end_ms + self.config.tail_ms)

    def _begin(self, start_ms: int, end_ms: int | None = None) -> None:
        if self._active:  # a start without an end, or the queue outgrew the kept audio: close it as it is
            self._finalize()
        self._utterance += 1
        self._active = True
        self._ending_at = None
        self._pause_at = None
        self._split_at = None
        self._error_reported = False
        self._confidence.reset()
        self.writer.begin(start_ms)
        from_ms = start_ms - self.config.preroll_ms
        to_ms = self._recent.end_ms if end_ms is None else min(self._recent.end_ms, end_ms + self.config.tail_ms)
        preroll = self._recent.slice(from_ms, to_ms)
        self._buffer.reset(preroll, max(from_ms, self._recent.start_ms) if len(preroll) else start_ms)
        self._last_decode_at_ms = start_ms
        # the VAD confirms speech after its minimum duration: decode what is there at once, so the first
        # partial is not a whole interval later than the ones after it (unless decodes are slow: a busy engine)
        self._want_decode = self.decode_interval_ms <= self.config.decode_interval_ms
        self.emit(SpeechStarted(audio_start_ms=start_ms))
        if end_ms is not None:
            self._end(end_ms)

    def _finalize(self) -> None:
        self.writer.finish(self._ending_at if self._ending_at is not None else self._buffer.end_ms)
        self._active = False
        self._ending_at = None
        self._pause_at = None
        self._utterance += 1
        self._buffer.clear()

    # --- scheduling ---

    def poll(self, now_ms: int) -> None:
        """Start a decode when one is due; finish an utterance whose final is ready (then begin the next one
        that waited)."""
        writer = self.writer
        for _ in range(len(self._queue) + 2):
            self._begin_queued()
            if not self._active or self._running(self._final_decoding):
                return
            if self._ending_at is None:
                break
            if writer.final is not None and writer.final.covered_ms >= self._final_target_ms():
                self._finalize()
                continue  # the next utterance may be waiting
            self._start_decode(now_ms, final=True)
            return
        if not self._active or self._ending_at is not None:
            return
        if self._pause_at is not None:  # (no final decode is running: see above)
            at = self._pause_at + self.config.tail_ms
            if (writer.final is None or writer.final.covered_ms < at) and self._buffer.end_ms >= at:
                self._start_decode(now_ms, final=True)  # speculative: ready when the VAD confirms the end
            return
        if writer.utterance_language is None and self.buffer_ms < self.rule.config.min_audio_s * 1000:
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
        end = self._ending_at if self._ending_at is not None else self._buffer.end_ms
        return min(end + self.config.tail_ms, self._buffer.end_ms)

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

    def _split(self) -> bool:
        """A long utterance paused and went on: when the final decode made at the pause (covering to
        ``_split_at``) is here, the part before the pause gets its final and the utterance goes on from there
        (see ``TranscriberConfig.split_min_s``). False when it does not split now."""
        at, final = self._split_at, self.writer.final
        min_s = self.config.split_min_s
        if at is None or final is None or not self._covers(final.covered_ms, at) or min_s <= 0 or not self._active:
            return False
        if at - self._buffer.start_ms < 1000 * max(min_s, self.earlier.fits_s()):
            return False
        if not self.writer.split(at - self.config.tail_ms, final.covered_ms):
            return False
        self._split_at = None
        self._utterance += 1  # partial decodes in flight heard the part before the split
        self.splits += 1
        return True

    @staticmethod
    def _covers(covered_ms: int, at_ms: int | None) -> bool:
        """Whether a decode that covered audio to ``covered_ms`` is the one of the pause ending at ``at_ms``
        (within the millisecond rounding of the sample counts)."""
        return at_ms is not None and abs(covered_ms - at_ms) <= 2

    def _start_decode(self, now_ms: int, *, final: bool) -> None:
        self._want_decode = False
        task = self.spawn(self._decode(now_ms, final), "captions-decode")
        if final:
            self._final_decoding = task
        else:
            self._last_decode_at_ms = now_ms
            self._decoding = task

    def _final_audio(self, hard: bool) -> DecodeAudio:
        """What a final decode hears (:func:`final_audio`): to the pause's tail, or to the final's target;
        ``hard``: with the larger budget of an utterance hard to hear."""
        target = self._pause_at + self.config.tail_ms if self._pause_at is not None else self._final_target_ms()
        return final_audio(self._buffer, self._recent, self.earlier, self.config, target,
                           self.writer.utterance_language, self.config.partial_context_ms if self._engine_forces else 0,
                           hard)

    async def _decode(self, now_ms: int, final: bool) -> None:
        hard = final and self._confidence.final_hard()
        self.hard_finals += int(hard)
        heard = self._final_audio(hard) if final else DecodeAudio(self._buffer.audio())
        audio, context_ms = heard.audio, heard.context_ms
        covered = self._buffer.start_ms + (len(audio) * 1000 // SAMPLE_RATE - context_ms)
        utterance = self._utterance
        language = self.writer.utterance_language
        request = TranscribeRequest(
            audio=audio, language=language, task=self.config.task,
            prompt=(self.earlier.prompt(language, self.config.prompt_chars)
                    if final or self.config.prompt_partials else ""),
            prefix="" if final else self.writer.committed_text(),
            beam_size=(self.config.final_beam_size or None) if final else 1,
            detect_language=self.rule.fixed is None and (final or language is None), urgent=final, cut_loops=not final,
            context=heard.forced,
        )
        started = time.monotonic()
        try:
            transcript: Transcript | None = await self.recognize(request)
            wall_s = time.monotonic() - started
            if not final:
                self._last_decode_wall_ms = wall_s * 1000
            elif transcript is not None and not transcript.decoded_again:  # a guard's second decode is no speed
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
            if not final:
                self._confidence.add(transcript)
            self.decode_seconds += transcript.decode_s
        if final:
            if transcript is not None and context_ms:
                self._engine_forces = self._engine_forces or transcript.context_forced
                self.forced_context_finals += int(transcript.context_forced)
                transcript = without_context(transcript, context_ms / 1000, heard.context_text,
                                             heard.context_speech_ms / 1000, VoicedAudio(audio).seconds)
            quiet = self._ending_at is not None or self._pause_at is not None  # else speech resumed while it ran
            at_split = self._covers(covered, self._split_at)  # after a pause that may end a long utterance's part
            self.writer.keep_final(transcript, covered, quiet=quiet or at_split)
            if at_split and not self._split() and not quiet:
                self.writer.final = None
        elif transcript is not None and self.writer.apply_partial(transcript, covered):
            self._want_decode = True  # decode again in the language chosen
        self.poll(max(now_ms, covered))

    def stats(self) -> dict[str, Any]:
        return {
            "language": self.writer.language,
            "language_settled": self.rule.settled is not None,
            "language_switches": self.rule.switches,
            "decodes": self.decodes,
            "final_decodes": self.final_decodes,
            "splits": self.splits,
            "forced_context_finals": self.forced_context_finals,
            "hard_finals": self.hard_finals,
            "mean_decode_ms": round(1000 * self.decode_seconds / self.decodes, 1) if self.decodes else None,
            "dropped_results": self.writer.dropped_results,
            "repeats_dropped": self.writer.repeats_dropped,
            "lost_finals": self.writer.lost_finals,
            "finals": len(self.finals),
            "pending_utterances": self.pending_utterances,
            "max_behind_ms": self.writer.max_behind_ms,
            "buffer_ms": self.buffer_ms if self._active else 0,
        }
