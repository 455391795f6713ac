"""How sure an utterance's partials were of their words: the running mean of their ``avg_logprob``."""

from __future__ import annotations

from rtc_agent.apps.captions.partial_confidence import HARD_LOGPROB, PartialConfidence
from rtc_agent.engines.asr.base import Transcript


def partial(logprob: float) -> Transcript:
    return Transcript(text="words", avg_logprob=logprob)


def test_an_utterance_is_hard_when_its_partials_average_below_the_threshold():
    c = PartialConfidence()
    assert c.mean is None and not c.hard  # no partial yet: the usual budget
    c.add(partial(HARD_LOGPROB + 0.3))
    assert not c.hard
    c.add(partial(HARD_LOGPROB - 0.5))
    c.add(partial(HARD_LOGPROB - 0.5))
    assert c.mean is not None and abs(c.mean - (HARD_LOGPROB - 0.7 / 3)) < 1e-9
    assert c.hard
    c.reset()  # a new utterance starts from nothing
    assert c.mean is None and not c.hard


def test_an_engine_that_gives_no_logprob_is_never_hard():
    c = PartialConfidence()
    for _ in range(5):
        c.add(Transcript(text="words"))  # avg_logprob 0.0: a remote engine
    assert c.mean == 0.0 and not c.hard


def test_an_utterance_found_hard_at_a_final_decode_stays_hard_until_it_ends():
    """A final decode made at a pause found the utterance hard; clearer words follow and lift the mean past the
    threshold: the next final decode of the same utterance still takes the larger budget, a new utterance does
    not."""
    c = PartialConfidence()
    c.add(partial(HARD_LOGPROB - 0.3))
    assert not PartialConfidence().final_hard()  # no partial: the usual budget
    assert c.final_hard()
    for _ in range(3):
        c.add(partial(HARD_LOGPROB + 0.3))
    assert not c.hard and c.final_hard()
    c.reset()
    c.add(partial(HARD_LOGPROB + 0.3))
    assert not c.final_hard()


def test_an_utterance_that_becomes_hard_after_a_final_decode_is_hard_at_the_next():
    c = PartialConfidence()
    c.add(partial(HARD_LOGPROB + 0.3))
    assert not c.final_hard()
    for _ in range(3):
        c.add(partial(HARD_LOGPROB - 0.3))
    assert c.final_hard()
