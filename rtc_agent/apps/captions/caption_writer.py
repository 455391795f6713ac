"""``CaptionWriter``: the captions of one stream's utterances, written from the results of their decodes.

It knows nothing of when decodes run (:class:`~rtc_agent.apps.captions.transcriber.StreamingTranscriber` decides
that); it turns each result into caption events:

- partials: LocalAgreement-2 commits what two consecutive continuations agree on (committed text never changes
  once sent); every usable result yields a ``caption.partial``. Hypotheses of less than ``min_commit_ms`` of audio
  are shown as tentative and commit nothing.
- finals: the final decode's text when it is usable, else what the partials showed (not their tentative words alone
  when the final decode heard none); never repeating the tail of the previous final (n-gram guard), a sentence of
  its own, a run of three words or more said twice in a row, or ending in an echo of its own earlier words (a
  short one too, when partials that heard the utterance up to its end agreed on all of it without the echo); a
  final decode that stops short of the committed words gets them back, and one that lost most of them (beam search
  collapsing into a word or two: "Playback Playback") gives way to what the partials showed.
  A long utterance that pauses and goes on may be :meth:`~CaptionWriter.split` there: the final decode made at the
  pause is the final of the part before it.
  Past ``trim_after_s`` the utterance's audio is cut at the end of a committed segment (a final caption for what
  precedes it); past ``hard_limit_s`` without such a boundary everything recognized so far becomes final.
- results that look like silence (Whisper's no-speech rule) or loops (compression ratio) are dropped.
- language: the session's :class:`~rtc_agent.apps.captions.language.LanguageRule` chooses each utterance's
  language from its first results; a result in another language is dropped (the caller decodes again).

Partials and finals carry ``behind_ms``: how much audio arrived after the audio they cover.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from rtc_agent.apps.audio_ring import AudioRing
from rtc_agent.apps.captions.earlier_finals import EarlierFinals, FinalCaption
from rtc_agent.apps.captions.language import LanguageRule
from rtc_agent.apps.captions.local_agreement import (
    LocalAgreement,
    drop_echoed_tail,
    drop_loops,
    drop_overlap,
    drop_repeated_sentences,
    drop_unheard_echo,
    loses_committed,
    strip_committed,
    with_committed_tail,
)
from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.apps.captions.utterance_audio import UtteranceAudio
from rtc_agent.engines.asr.base import SAMPLE_RATE, Transcript
from rtc_agent.protocol import ServerEvent
from rtc_agent.protocol.events import CaptionFinal, CaptionPartial
from rtc_agent.words import normalized

__all__ = ["CaptionWriter", "FinalDecode"]

_segment_ids = itertools.count(1)
#: Partials "heard the utterance up to its end" when their last decode covered the audio up to this close to where
#: the speech ended: less than a short word.
HEARD_SLACK_MS = 150


@dataclass
class FinalDecode:
    """A final decode's result, kept until the end of speech is confirmed."""

    transcript: Transcript | None  # None: the decode failed (the final is what the partials committed)
    covered_ms: int


class CaptionWriter:
    """Caption events from decode results (see the module docstring).

    ``buffer`` is the utterance's audio (cut when a long utterance gets a final for its first part), ``recent`` the
    stream's recent audio (its end is where ``behind_ms`` counts from), ``earlier`` the session's finals.
    """

    def __init__(self, config: TranscriberConfig, emit: Callable[[ServerEvent], None], earlier: EarlierFinals,
                 buffer: UtteranceAudio, recent: AudioRing) -> None:
        self.config = config
        self.emit = emit
        self.earlier = earlier
        self.buffer = buffer
        self.recent = recent
        self.rule = LanguageRule(fixed=config.language, prior=config.language_prior)
        self.la = LocalAgreement()
        self.boundary: tuple[int, float] | None = None  # (committed words, seconds into the buffer)
        self.segment_id: str | None = None
        self.segment_start_ms = 0
        self.partials_sent = 0
        self.heard_ms = 0  # the audio the last partial of the segment covered
        self.utterance_language: str | None = None  # one language from an utterance's first decode to its final
        self.last_language: str | None = config.language
        self.final: FinalDecode | None = None
        # numbers for stats()
        self.dropped_results = 0
        self.repeats_dropped = 0
        self.lost_finals = 0  # final decodes that lost what the partials committed (their words kept instead)
        self.max_behind_ms = 0

    @property
    def language(self) -> str | None:
        """The session's language: the one it settled on (or was given), else the last one used."""
        return self.rule.current or self.last_language

    def committed_text(self) -> str:
        return " ".join(self.la.committed)

    def begin(self, start_ms: int) -> None:
        """A new utterance, speech from ``start_ms``."""
        self.la.reset()
        self.utterance_language = self.rule.current
        self._next_segment(start_ms)

    def behind_ms(self, covered_ms: int) -> int:
        return max(0, self.recent.end_ms - covered_ms)

    # --- results ---

    def _usable(self, t: Transcript) -> bool:
        if t.looks_repetitive:
            return False
        silent = t.no_speech_prob > self.config.no_speech_threshold and t.avg_logprob < self.config.logprob_threshold
        return not (silent and not self.la.committed)

    @staticmethod
    def _ranking(t: Transcript) -> list[tuple[str, float]]:
        if t.language_probs:
            return list(t.language_probs)
        return [(t.language, t.language_prob if t.language_prob is not None else 1.0)] if t.language else []

    def _decide_language(self, t: Transcript, *, final: bool) -> bool:
        """For an utterance whose language is still open: decide it from this result. False when the result is
        in another language than the one chosen (it is dropped and the audio decoded again)."""
        if self.utterance_language is not None:
            return True
        ranking = self._ranking(t)
        chosen = self.rule.choose(ranking, t.audio_s, final=final)
        if chosen is None:
            if final or not ranking:  # the utterance ended (or the engine reports no language): take it as it is
                self.utterance_language = t.language
                return True
            return False  # unsure: wait for more of the utterance
        self.utterance_language = chosen
        return chosen == t.language

    def apply_partial(self, t: Transcript, covered_ms: int) -> bool:
        """A partial decode's result, covering the utterance's audio up to ``covered_ms``. True when the audio
        should be decoded again at once (the result was in another language than the one now chosen)."""
        if not self._decide_language(t, final=False):
            return self.utterance_language is not None
        if not self._usable(t):
            self.dropped_results += 1
            self.la.previous = []
            return False
        words = drop_loops(t.text).split()
        continuation = words if t.prefix_applied else strip_committed(words, self.la.committed)
        if t.audio_s * 1000 < self.config.min_commit_ms:
            self.la.previous = continuation  # too little audio to trust: compare against it, commit nothing
            newly: list[str] = []
        else:
            newly = self.la.update(continuation)
        if newly and t.prefix_applied:
            self._note_boundary(t, len(newly))
        if not self.la.committed and not self.la.tentative:
            return False
        self.partials_sent += 1
        self.heard_ms = covered_ms
        behind = self.behind_ms(covered_ms)
        self.max_behind_ms = max(self.max_behind_ms, behind)
        self.emit(CaptionPartial(
            segment_id=self.segment_id or "", committed=" ".join(self.la.committed),
            tentative=" ".join(self.la.tentative), audio_start_ms=self.segment_start_ms,
            audio_end_ms=covered_ms, language=self.utterance_language, behind_ms=behind,
        ))
        self._trim()
        return False

    def keep_final(self, t: Transcript | None, covered_ms: int, *, quiet: bool) -> None:
        """A final decode's result (``None``: it failed), kept for :meth:`finish` while the speech is ``quiet``
        (paused or ended); dropped when it is in a language the rule did not choose (the caller decodes again)."""
        if t is not None and not self._decide_language(t, final=True):
            return
        if quiet:
            self.final = FinalDecode(t, covered_ms)

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
            before = len(self.la.committed) - committed_now
            self.boundary = (before + best[0], best[1])

    def _trim(self) -> None:
        """A long utterance: a final for its part up to a committed boundary (or all of it past the hard limit)."""
        seconds = self.buffer.samples / SAMPLE_RATE
        if seconds <= self.config.trim_after_s:
            return
        if self.boundary is not None and self.boundary[1] >= 1.0:
            words, at_s = self.boundary
            end_ms = self.buffer.start_ms + int(at_s * 1000)
            self.emit_final(" ".join(self.la.drop_committed(words)), self.segment_start_ms, end_ms)
            self.buffer.drop_first(int(at_s * SAMPLE_RATE), end_ms)
        elif seconds > self.config.hard_limit_s:
            text = " ".join([*self.la.committed, *self.la.tentative])
            end_ms = self.buffer.end_ms
            self.emit_final(text, self.segment_start_ms, end_ms)
            self.la.reset()
            self.buffer.clear(end_ms)
        else:
            return
        self._next_segment(self.buffer.start_ms)

    def _next_segment(self, start_ms: int) -> None:
        self.boundary = None
        self.final = None
        self.segment_id = f"seg_{next(_segment_ids)}"
        self.segment_start_ms = start_ms
        self.partials_sent = 0
        self.heard_ms = 0

    def split(self, end_ms: int, cut_ms: int) -> bool:
        """The utterance paused at ``end_ms`` and goes on: the kept final decode, of its audio up to ``cut_ms``,
        becomes the final of that part; the utterance goes on as a new segment of the audio from ``cut_ms`` (with
        nothing committed: its partials start again). False, and nothing done, when there is no kept decode or it
        has no usable text."""
        t = self.final.transcript if self.final is not None else None
        if t is None or not self._usable(t):
            return False
        text = self._final_text()
        if not text:
            return False
        self.emit_final(text, self.segment_start_ms, end_ms)
        self.buffer.drop_first(max(0, (cut_ms - self.buffer.start_ms) * SAMPLE_RATE // 1000), cut_ms)
        self.la.reset()
        self._next_segment(cut_ms)
        return True

    def _final_text(self) -> str:
        """The final decode's text when it is usable, else what the partials showed; without repeats. A usable
        final decode with no words (after its context is cut) wins over partials that committed nothing: their
        tentative words were guesses from less audio ("K", "Uh u" for a breath), unless they repeat the end of the
        previous final (the cut may have taken a repeat for the context's own words). A final decode's text keeps
        the committed words it stopped short of, and loses a short echo the partials show was not said; one that
        lost most of the committed words (:func:`loses_committed`) gives way to the partials' words."""
        streamed = [*self.la.committed, *self.la.tentative]
        t = self.final.transcript if self.final is not None else None
        usable = t is not None and self._usable(t)
        if usable and t is not None and t.text.strip():
            words = t.text.split()
            if self._committed_within_final():
                if loses_committed(words, self.la.committed):
                    words = streamed
                    self.lost_finals += 1
                else:
                    words = with_committed_tail(words, self.la.committed)
                    if self._partials_heard_all():
                        words = drop_unheard_echo(words, self.la.committed)
        elif usable and not self.la.committed and not self._repeats_previous(self.la.tentative):
            words = []
        else:
            words = streamed
        text = drop_repeated_sentences(drop_echoed_tail(drop_loops(" ".join(words))))
        previous = self.earlier.last
        if previous is not None:
            # audio shared with the previous utterance (its pre-roll) may repeat a word or two of it; longer
            # repeats of its tail are the decoder copying its context
            overlap = (self.buffer.start_ms < previous.end_ms + 50)
            text = drop_overlap(text, previous.text, min_n=1 if overlap else 3)
        if len(text.split()) < len(words):
            self.repeats_dropped += 1
        return text

    def _committed_within_final(self) -> bool:
        """Whether the partials heard no audio past the final decode's: not so when the speech resumed after a pause
        and partials ran on before the final decode made at the pause split the utterance there."""
        return self.final is not None and bool(self.la.committed) and self.heard_ms <= self.final.covered_ms

    def _partials_heard_all(self) -> bool:
        """Whether the partials agreed on every word they heard (none tentative) and their last decode heard the
        utterance up to (``HEARD_SLACK_MS`` before) where its speech ended: the final decode's audio ends
        ``tail_ms`` after that."""
        if self.final is None or self.la.tentative or not self.la.committed:
            return False
        return self.final.covered_ms - self.config.tail_ms - self.heard_ms <= HEARD_SLACK_MS

    def _repeats_previous(self, words: list[str]) -> bool:
        """Whether ``words`` are the last words of the previous final (case and punctuation aside)."""
        previous = self.earlier.last
        if previous is None or not words:
            return False
        return normalized(previous.text.split())[-len(words):] == normalized(words)

    def finish(self, end_ms: int) -> None:
        """The utterance ended at ``end_ms``: its final caption (from the kept final decode, if any)."""
        text = self._final_text()
        t = self.final.transcript if self.final is not None else None
        if self.utterance_language is None and t is not None:
            self.utterance_language = t.language
        if text or self.partials_sent:
            self.emit_final(text, self.segment_start_ms, end_ms)
        if t is not None and self.rule.fixed is None:
            utterance_s = (end_ms - self.segment_start_ms) / 1000
            self.rule.observe(self._ranking(t), utterance_s)
        self.last_language = self.utterance_language or self.last_language
        self.final = None
        self.la.reset()
        self.segment_id = None

    def emit_final(self, text: str, start_ms: int, end_ms: int) -> None:
        segment_id = self.segment_id or f"seg_{next(_segment_ids)}"
        language = self.utterance_language
        self.emit(CaptionFinal(segment_id=segment_id, text=text, audio_start_ms=start_ms, audio_end_ms=end_ms,
                               language=language, behind_ms=self.behind_ms(end_ms)))
        if text:
            self.earlier.add(FinalCaption(segment_id, text, start_ms, end_ms, language))
