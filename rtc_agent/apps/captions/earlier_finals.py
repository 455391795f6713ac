"""``EarlierFinals``: a session's finals so far, and what a new final decode hears of them.

A final decode hears the session's earlier speech (its audio) besides the utterance, as much as fits a time budget
at the speed recent final decodes ran; optionally their text as Whisper's ``initial_prompt``. This module keeps the
finals and that speed, and picks the span: it knows nothing of audio buffers or recognizers.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from rtc_agent.engines.asr.base import Segment

__all__ = ["EarlierFinals", "FinalCaption", "HeardContext"]

#: The speed of final decodes is the median of this many recent ones: one decode the engine's repetition guard ran
#: again (3-5x its usual time) does not take the next finals' context away, two slow ones in a row (a busy
#: engine) do.
RATE_WINDOW = 3
#: A final decode of an utterance shorter than this (seconds) may take ``SHORT_BUDGET_FACTOR`` times the budget to
#: hear earlier speech: heard alone, a short phrase over noise is where Whisper makes up words ("I'm going to add some
#: salt and sugar" for "Followed by the pound key"), and its own decode is short.
SHORT_UTTERANCE_S = 2.0
SHORT_BUDGET_FACTOR = 1.5
#: A final decode of an utterance its partials found hard to hear (``PartialConfidence.final_hard``: noise, an accent,
#: fast casual speech) may take this many times the budget: more earlier speech is where such an utterance's words
#: change. Measured on the speech set in virtual time (README): with about a quarter of the utterances hard, the
#: whole set 8.59 -> 7.08 % WER (2.2 times the budget the same), where 2.2 times it for every final gave 7.44 %.
HARD_BUDGET_FACTOR = 2.0


@dataclass
class FinalCaption:
    segment_id: str
    text: str
    start_ms: int
    end_ms: int
    language: str | None


@dataclass(frozen=True)
class HeardContext:
    """The earlier speech a final decode hears: its audio from ``begin_ms``, with these ``finals`` in it (the
    first one cut when it began before ``begin_ms``)."""

    begin_ms: int
    finals: tuple[FinalCaption, ...]

    @property
    def text(self) -> str:
        return " ".join(f.text for f in self.finals)

    @property
    def end_ms(self) -> int:
        """Where the last of the finals ends."""
        return max(f.end_ms for f in self.finals)

    def segments(self) -> tuple[Segment, ...]:
        """The finals as segments, times in seconds from ``begin_ms`` (a cut first one from 0, its text whole)."""
        return tuple(Segment(max(0, f.start_ms - self.begin_ms) / 1000, (f.end_ms - self.begin_ms) / 1000, f.text)
                     for f in self.finals)


class EarlierFinals:
    """The finals of one session (at most ``max_finals``) and the speed of its recent final decodes.

    ``context_s``: the most audio (seconds, the utterance included) a final decode may hear; ``budget_ms``: the
    time a final decode may take; ``preroll_ms``: audio each final's decode began before its start.
    """

    def __init__(self, *, context_s: float, budget_ms: int, preroll_ms: int, max_finals: int) -> None:
        self.context_s = context_s
        self.budget_ms = budget_ms
        self.preroll_ms = preroll_ms
        self.finals: deque[FinalCaption] = deque(maxlen=max_finals)
        self._rates: deque[float] = deque(maxlen=RATE_WINDOW)  # recent final decodes: wall s per s of audio

    def __len__(self) -> int:
        return len(self.finals)

    @property
    def last(self) -> FinalCaption | None:
        return self.finals[-1] if self.finals else None

    def add(self, final: FinalCaption) -> None:
        self.finals.append(final)

    @property
    def rate(self) -> float | None:
        """Wall seconds per second of audio of recent final decodes (the median of the last ``RATE_WINDOW``); None
        before the first."""
        return statistics.median(self._rates) if self._rates else None

    def decoded(self, wall_s: float, audio_s: float) -> None:
        """A final decode of ``audio_s`` seconds took ``wall_s`` (queueing included: under load it shrinks the
        next spans)."""
        if audio_s > 0:
            self._rates.append(wall_s / audio_s)

    def fits_s(self) -> float:
        """The most audio (seconds) a final decode can hear within ``budget_ms`` at the speed recent final decodes
        ran (infinite before the first one)."""
        return float("inf") if not self.rate else self.budget_ms / 1000 / self.rate

    def limit_s(self, utterance_s: float | None = None, hard: bool = False) -> float:
        """The most audio (seconds, the utterance included) a final decode may hear: ``context_s``, less when
        recent final decodes ran too slowly for ``budget_ms`` (``SHORT_BUDGET_FACTOR`` times it for an utterance
        of ``utterance_s`` shorter than ``SHORT_UTTERANCE_S``, ``HARD_BUDGET_FACTOR`` times it for one ``hard`` to
        hear, the larger where both apply)."""
        if self.rate is None:
            return self.context_s
        short = utterance_s is not None and utterance_s < SHORT_UTTERANCE_S
        factor = max(SHORT_BUDGET_FACTOR if short else 1.0, HARD_BUDGET_FACTOR if hard else 1.0)
        return max(0.0, min(self.context_s, self.budget_ms / 1000 * factor / self.rate))

    def _latest(self, language: str | None) -> Iterator[FinalCaption]:
        """The finals, latest first, up to one in another language than ``language`` (all of them when None)."""
        for final in reversed(self.finals):
            if language is not None and final.language != language:
                return
            yield final

    def context_from_ms(self, target_ms: int, kept_from_ms: int, utterance_from_ms: int | None = None,
                        hard: bool = False) -> int:
        """The earliest audio a final decode covering audio up to ``target_ms`` may hear: :meth:`limit_s` (for the
        utterance from ``utterance_from_ms``, when given, and ``hard``) before it, at or after ``kept_from_ms``
        (the audio still kept)."""
        utterance_s = None if utterance_from_ms is None else (target_ms - utterance_from_ms) / 1000
        return max(target_ms - int(self.limit_s(utterance_s, hard) * 1000), kept_from_ms)

    def context_finals(self, target_ms: int, kept_from_ms: int, utterance_from_ms: int,
                       language: str | None, partial_ms: int = 0, hard: bool = False) -> list[FinalCaption]:
        """The finals a final decode covering audio up to ``target_ms`` hears as earlier speech, earliest first:
        the latest finals in ``language`` (any, when None; a final in another language ends the run: its speech
        would be decoded in the wrong language) whose pre-roll began within :meth:`limit_s` before ``target_ms``,
        at or after ``kept_from_ms`` (the audio still kept), and that ended before the utterance's own audio (from
        ``utterance_from_ms``); with ``partial_ms``, also the one the span cuts into when at least that much of it
        is left (:meth:`context_from_ms` is then where the audio begins); ``hard``: as :meth:`limit_s`."""
        lo = self.context_from_ms(target_ms, kept_from_ms, utterance_from_ms, hard)
        found: list[FinalCaption] = []
        for final in self._latest(language):
            before_utterance = final.end_ms <= utterance_from_ms + self.preroll_ms
            if final.start_ms - self.preroll_ms < lo:
                if 0 < partial_ms <= final.end_ms - lo and before_utterance:  # its last part is heard
                    found.append(final)
                break
            if before_utterance:
                found.append(final)
        return found[::-1]

    def context(self, target_ms: int, kept_from_ms: int, utterance_from_ms: int, language: str | None,
                partial_ms: int = 0, hard: bool = False) -> HeardContext | None:
        """What a final decode covering audio up to ``target_ms`` hears of the earlier speech: the
        :meth:`context_finals` (same arguments), from the pre-roll of the earliest (or :meth:`context_from_ms`
        where the span cuts into it); None when no final qualifies."""
        finals = self.context_finals(target_ms, kept_from_ms, utterance_from_ms, language, partial_ms, hard)
        if not finals:
            return None
        begin = max(finals[0].start_ms - self.preroll_ms,
                    self.context_from_ms(target_ms, kept_from_ms, utterance_from_ms, hard))
        return HeardContext(begin, tuple(finals))

    def prompt(self, language: str | None, chars: int) -> str:
        """The last ``chars`` characters of the finals in ``language`` (the most recent run of them): Whisper's
        ``initial_prompt``; empty when ``chars`` is 0."""
        if chars <= 0:
            return ""
        parts: list[str] = []
        size = 0
        for final in self._latest(language):
            parts.append(final.text)
            size += len(final.text) + 1
            if size >= chars:
                break
        return " ".join(reversed(parts))[-chars:].lstrip()
