"""``LanguageRule``: one spoken language per session when the client asks for ``auto``.

Whisper's language detector judges each window on its own: on a few hundred milliseconds, or on an accent it
knows less well, it flaps between languages (English partials came out in Thai script). A person rarely switches
language mid-sentence and rarely switches at all, so the session keeps one language and changes it only on
strong, repeated evidence:

- **Before it settles**, an utterance takes its language from a detection over at least ``min_audio_s`` of its
  audio (nothing shorter is labelled; a shorter utterance is decided at its end), weighted by the ``prior`` (the
  browser's language) when there is one: the prior unless another language scores ``settle_prob``; without a prior,
  the top language once it scores ``choose_prob`` (else at the utterance's end). The session **settles** on a
  language after one utterance detected with probability at least ``settle_prob`` (``settle_prior_prob`` when it is
  the prior), or after ``majority_of`` utterances of which most agree.
- **Once settled**, every utterance is decoded in that language; its detection is still weighed at the end of
  the utterance. The language **switches** only after ``switch_after`` consecutive utterances, each at least
  ``switch_min_audio_s`` long, detected as one other language with probability at least ``switch_prob`` while
  the settled one scores under ``switch_max_current``. An utterance that agrees with the settled language, or a
  long one that is not clearly another, clears the count. A switch takes effect from the next utterance: an
  utterance never changes language midway.

Detections are rankings ``[(code, probability), ...]`` as the engine reports them (``Transcript.language_probs``;
engines that report only one language give ``[(code, prob)]``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

Ranking = list[tuple[str, float]]


@dataclass
class LanguageRuleConfig:
    min_audio_s: float = 1.5
    settle_prob: float = 0.8
    settle_prior_prob: float = 0.5
    choose_prob: float = 0.5  # without a prior, an utterance's language needs this much (or its end) to be chosen
    prior_weight: float = 4.0  # the prior's probability is multiplied by this before ranking (then renormalized)
    majority_of: int = 3
    switch_prob: float = 0.9
    switch_max_current: float = 0.05
    switch_min_audio_s: float = 2.0
    switch_after: int = 2


@dataclass
class LanguageRule:
    """State of one session. ``fixed``: a language the client chose (the rule then never changes it)."""

    fixed: str | None = None
    prior: str | None = None
    config: LanguageRuleConfig = field(default_factory=LanguageRuleConfig)
    settled: str | None = None
    _votes: list[str] = field(default_factory=list)
    _strikes: list[str] = field(default_factory=list)
    switches: int = 0

    def __post_init__(self) -> None:
        if self.fixed:
            self.settled = self.fixed

    @property
    def current(self) -> str | None:
        """The language new utterances are decoded in (None: not known yet, detect it)."""
        return self.fixed or self.settled

    def weigh(self, ranking: Ranking) -> Ranking:
        """The ranking with the prior's weight applied (renormalized), most likely first."""
        if not ranking:
            return []
        raw = dict(ranking)
        prior_prob = raw.get(self.prior, 0.0) if self.prior else 0.0
        # the ranking is the top of a distribution over every language (summing to 1): weighting the prior adds
        # (weight - 1) * its probability to the whole
        total = max(1.0, sum(raw.values())) + (self.config.prior_weight - 1.0) * prior_prob
        scores = {code: prob * (self.config.prior_weight if code == self.prior else 1.0) / total
                  for code, prob in raw.items()}
        return sorted(scores.items(), key=lambda x: -x[1])

    def choose(self, ranking: Ranking, audio_s: float, *, final: bool = False) -> str | None:
        """The language for an utterance whose language is not decided yet, from a detection over ``audio_s`` of
        it. None while there is too little audio (unless ``final``: the utterance ended, decide now)."""
        if self.current:
            return self.current
        if audio_s < self.config.min_audio_s and not final:
            return None
        weighed = self.weigh(ranking)
        if not weighed:
            return self.prior
        top, prob = weighed[0]
        if self.prior and top != self.prior and prob < self.config.settle_prob:
            return self.prior  # the expected language unless another one is clear
        if not self.prior and prob < self.config.choose_prob and not final:
            return None  # unsure: wait for more of the utterance
        return top

    def observe(self, ranking: Ranking, audio_s: float) -> str | None:
        """The detection over a whole utterance (at its end). Returns the language the session settled on or
        switched to because of it, if any."""
        if self.fixed or not ranking:
            return None
        weighed = self.weigh(ranking)
        top, prob = weighed[0]
        if self.settled is None:
            if audio_s < self.config.min_audio_s:
                return None
            need = self.config.settle_prior_prob if top == self.prior else self.config.settle_prob
            if prob >= need:
                self.settled = top
                return top
            self._votes.append(top)
            if len(self._votes) >= self.config.majority_of:
                code, count = Counter(self._votes).most_common(1)[0]
                if count * 2 > len(self._votes):
                    self.settled = code
                    return code
            return None
        raw = dict(ranking)
        current_prob = raw.get(self.settled, 0.0)
        raw_top, raw_prob = max(ranking, key=lambda x: x[1])
        strong = (raw_top != self.settled and raw_prob >= self.config.switch_prob
                  and current_prob < self.config.switch_max_current and audio_s >= self.config.switch_min_audio_s)
        if not strong:
            if audio_s >= self.config.switch_min_audio_s or top == self.settled:
                self._strikes.clear()  # a long utterance that is not clearly another language breaks the run
            return None
        if self._strikes and self._strikes[-1] != raw_top:
            self._strikes.clear()
        self._strikes.append(raw_top)
        if len(self._strikes) >= self.config.switch_after:
            self.settled = raw_top
            self._strikes.clear()
            self.switches += 1
            return raw_top
        return None
