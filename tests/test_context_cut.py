"""Cutting a final decode of context + utterance to the utterance (``apps/captions/context_cut.py``): segments on
either side of the boundary by their timestamps, a straddling one split where its words stop repeating the
context's known text, when the timing agrees."""

from __future__ import annotations

from rtc_agent.apps.captions.context_cut import context_words_in, without_context
from rtc_agent.engines.asr.base import Segment, Transcript


def transcript(*segments: tuple[float, float, str], audio_s: float = 9.0) -> Transcript:
    return Transcript(text="".join(s[2] for s in segments).strip(), segments=[Segment(*s) for s in segments],
                      audio_s=audio_s)


def test_segments_are_kept_by_their_side_of_the_boundary_and_shifted():
    t = transcript((0.0, 3.6, " I think we should ask the customer."), (4.0, 7.0, " The library closes early."))
    cut = without_context(t, 3.7, "I think we should ask the customer.")
    assert cut.text == "The library closes early."
    assert [(round(s.start, 2), round(s.end, 2)) for s in cut.segments] == [(0.3, 3.3)]
    assert abs(cut.audio_s - 5.3) < 1e-9


def test_a_straddling_segment_is_split_after_the_context_words():
    t = transcript((0.0, 5.5, " That feature is not available on this line. The number is not answering."))
    assert without_context(t, 3.6, "That feature is not available on this line.").text == \
        "The number is not answering."
    # the context decode may hear the context a little differently ("key is" run together, a word changed)
    t = transcript((0.0, 5.8, " Please enter the channel number followed by the pound key is now in the conference."))
    assert without_context(t, 3.8, "Please enter the channel number, followed by the pound key.").text == \
        "is now in the conference."


def test_a_segment_whose_middle_is_past_the_boundary_loses_the_context_sentence():
    t = transcript((0.0, 7.0, " The conference is now locked. You have entered too many invalid numbers."))
    assert without_context(t, 2.3, "The conference is now locked.").text == \
        "You have entered too many invalid numbers."


def test_an_utterance_that_repeats_the_context_words_keeps_them():
    """Timing says almost all of the segment is after the boundary: the repeat is what was said again."""
    t = transcript((0.0, 4.0, " Please enter your password, followed by the pound key."),
                   (4.0, 6.1, " Followed by the pound key."))
    assert without_context(t, 4.35, "Please enter your password, followed by the pound key.").text == \
        "Followed by the pound key."


def test_without_a_text_match_the_middle_decides():
    t = transcript((0.0, 4.0, " All by the time you please check the number and dial again"))
    assert without_context(t, 2.1, "Followed by the pound key.").text == ""
    assert without_context(t, 1.9, "Followed by the pound key.").text.startswith("All by")
    assert without_context(t, 1.9, "").text.startswith("All by")


def test_context_words_must_reach_the_end_of_the_context():
    words = ["the", "pound", "key", "is", "now", "here"]
    assert context_words_in(words, "Enter the number followed by the pound key.") == 3
    assert context_words_in(words, "The pound key is broken, call someone.") == 0  # matches, but not its end
    assert context_words_in([], "anything") == 0 and context_words_in(words, "") == 0
