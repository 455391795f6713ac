"""``PartialConfidence``: how sure an utterance's partial decodes were of their words, which says how hard the
utterance is to hear.

A partial decode is greedy and hears only the utterance (no earlier speech); its ``avg_logprob`` is the mean
log-probability per token Whisper gave the words it chose. Where the partials of an utterance average below
``HARD_LOGPROB`` (about a quarter of the utterances on the speech set: noise, accents, a cold, fast casual speech),
its final decode may take more time to hear earlier speech (``EarlierFinals.limit_s``): that is where the earlier
speech changes the words, and a confident utterance spends only the usual budget. An utterance found hard at one
final decode stays hard for the later ones (a final decode made at a pause is discarded when the speech goes on):
the partials' mean may rise past the threshold as clearer words follow, but the hard part is still in the audio
the last final decode hears, and it should not hear less earlier speech than the decode before it.
"""

from __future__ import annotations

from rtc_agent.engines.asr.base import Transcript

__all__ = ["HARD_LOGPROB", "PartialConfidence"]

#: An utterance whose partials' mean ``avg_logprob`` is below this is hard to hear. Measured on the speech set in
#: virtual time (README): the partials' means are -0.86 / -0.58 / -0.43 at the 10th / 50th / 90th percentile, and
#: this threshold marks about a quarter of the utterances.
HARD_LOGPROB = -0.7


class PartialConfidence:
    """The running mean ``avg_logprob`` of one utterance's partial decodes (engines that give none report 0.0:
    never hard)."""

    def __init__(self) -> None:
        self._total = 0.0
        self._count = 0
        self._found_hard = False

    def reset(self) -> None:
        """A new utterance."""
        self._total, self._count, self._found_hard = 0.0, 0, False

    def add(self, transcript: Transcript) -> None:
        """A partial decode of the utterance came back."""
        self._total += transcript.avg_logprob
        self._count += 1

    @property
    def mean(self) -> float | None:
        """The mean ``avg_logprob`` so far; None before the first partial."""
        return self._total / self._count if self._count else None

    @property
    def hard(self) -> bool:
        """Whether the partials found the utterance hard to hear (mean below ``HARD_LOGPROB``)."""
        mean = self.mean
        return mean is not None and mean < HARD_LOGPROB

    def final_hard(self) -> bool:
        """Whether a final decode starting now takes the larger budget: the utterance is :attr:`hard`, or was when
        an earlier final decode of it started."""
        self._found_hard = self._found_hard or self.hard
        return self._found_hard
