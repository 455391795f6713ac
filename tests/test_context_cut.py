"""Cutting a final decode of context + utterance to the utterance (``apps/captions/context_cut.py``): segments on
either side of the boundary by their timestamps, a straddling one split where its words stop repeating the
context's known text, when the timing agrees."""

from __future__ import annotations

from rtc_agent.apps.captions.context_cut import context_words_in, without_context
from rtc_agent.engines.asr.base import Segment, Transcript


def said(text: str) -> list[str]:
    return text.split()


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


def test_the_timing_counts_the_speech_on_each_side_not_the_pause_between():
    """A short context final ("1"), a long pause, then the utterance: by the segment's whole span the boundary
    would fall three words in and the one-word match would be refused; counting only the context's speech (it ends
    at 0.83 s) the match agrees and the context's word goes."""
    t = transcript((0.0, 5.4, " 1. From fairest creatures we desire and crease."))
    assert without_context(t, 2.31, "1").text == "1. From fairest creatures we desire and crease."
    assert without_context(t, 2.31, "1", speech_end_s=0.83).text == "From fairest creatures we desire and crease."
    # the context's speech reaching the boundary is the timing as before
    assert without_context(t, 2.31, "1", speech_end_s=2.31).text == "1. From fairest creatures we desire and crease."


def test_a_voiced_segment_in_the_pause_before_the_utterance_is_kept():
    """The VAD missed "So this is the sick corpus" between the last final (its speech ends at 1.5 s) and the
    utterance (from 9.5 s): the decode with context heard it, and it goes with the utterance when its audio is
    voiced; a segment over silence there is dropped, and so are the words that repeat the context's end."""
    t = transcript((0.0, 1.4, " And that should be all, thanks!"), (4.6, 6.2, " So this is the sick corpus."),
                   (9.5, 12.0, " I have a cold."), audio_s=12.0)
    loud = lambda start, end: end - start  # noqa: E731 - every frame voiced
    quiet = lambda start, end: 0.1  # noqa: E731
    args = (9.5, "And that should be all, thanks!", 1.65)
    assert without_context(t, *args, voiced=loud).text == "So this is the sick corpus. I have a cold."
    assert without_context(t, *args, voiced=quiet).text == "I have a cold."
    assert without_context(t, *args).text == "I have a cold."  # no audio check: never kept
    again = transcript((2.0, 3.0, " all, thanks!"), (9.5, 12.0, " I have a cold."), audio_s=12.0)
    assert without_context(again, *args, voiced=loud).text == "I have a cold."
    cut = without_context(t, *args, voiced=loud)
    assert [(s.start, s.end) for s in cut.segments] == [(0.0, 0.0), (0.0, 2.5)]


def test_a_segment_from_the_pause_into_the_utterance_is_the_utterances_repeat_or_not():
    """The prompt said again after a pause: Whisper starts its segment in the pause (4.0 s; the context's speech
    ends at 3.55 s, the utterance starts at 4.35 s) and runs it into the utterance. Its words repeat the context's
    end and are kept, as without the pause rule; a missed sentence run into the utterance is kept whole too."""
    t = transcript((0.0, 3.5, " Please enter your password, followed by the pound key."),
                   (4.0, 6.1, " Followed by the pound key."), audio_s=6.1)
    context = "Please enter your password, followed by the pound key."
    for voiced in (None, lambda start, end: end - start):
        assert without_context(t, 4.35, context, 3.55, voiced).text == "Followed by the pound key."
    t = transcript((0.0, 1.4, " And that should be all, thanks!"),
                   (4.6, 12.0, " So this is the sick corpus. I have a cold."), audio_s=12.0)
    assert without_context(t, 9.5, "And that should be all, thanks!", 1.65, lambda start, end: end - start).text == \
        "So this is the sick corpus. I have a cold."


def test_voiced_audio_counts_frames_above_the_recordings_noise():
    import numpy as np

    from rtc_agent.apps.captions.voiced import VoicedAudio

    rng = np.random.default_rng(0)
    audio = (0.001 * rng.standard_normal(16000 * 4)).astype(np.float32)  # hiss at -60 dBFS
    audio[16000:24000] += (0.1 * np.sin(np.arange(8000) * 0.1)).astype(np.float32)  # 0.5 s of tone at 1 s
    voiced = VoicedAudio(audio)
    assert abs(voiced.seconds(0.0, 4.0) - 0.5) <= 0.04
    assert voiced.seconds(2.0, 4.0) == 0.0
    assert VoicedAudio(np.zeros(16000, dtype=np.float32)).seconds(0.0, 1.0) == 0.0  # digital silence
    clicks = audio.copy()
    for start in range(2 * 16000, 3 * 16000, 1600):  # ten 40 ms clicks in the third second
        clicks[start:start + 640] += 0.1
    runs = VoicedAudio(clicks)
    assert runs.seconds(2.0, 3.0) >= 0.3 and runs.seconds(2.0, 3.0, min_run_s=0.1) == 0.0
    assert abs(runs.seconds(0.0, 4.0, min_run_s=0.1) - 0.5) <= 0.04


def test_a_context_that_ends_in_an_echo_of_its_own_words_still_matches():
    """The context's final ended in an echo its decode heard in the padding ("...some words just saying"): the
    utterance's decode repeats the context's words without the echo, and they are still the context's."""
    words = ["We're", "just", "saying", "some", "words,", "and", "here's", "some", "more", "words."]
    assert context_words_in(words, "We're just saying some words just saying") == 5
    assert context_words_in(words, "We're just saying some words thanks everyone") == 0  # not an echo: other words
    t = transcript((0.0, 6.7, " We're just saying some words, and here's some more words, words, words."))
    assert without_context(t, 3.0, "We're just saying some words just saying", speech_end_s=2.7).text == \
        "and here's some more words, words, words."


def test_context_words_match_whether_a_compound_is_written_open_closed_or_hyphenated():
    """Two decodes of the same audio write a compound differently; the words still repeat the context's."""
    context = "Making a famine where abundance lies Thy self-thy foe."
    assert context_words_in(said("Thyself thy foe, to thy sweet self too cruel."), context) == 3
    assert context_words_in(said("thy self thy foe to thy sweet"), context) == 4
    assert context_words_in(said("He was not an ill disposed young man"), "for them. He was not an ill-disposed") == 6
    assert context_words_in(said("to thy sweet self"), context) == 0  # other words: nothing cut


def test_a_word_the_match_ends_inside_counts_only_at_the_contexts_end():
    context = "who had vanished behind the curtain on the left"
    assert context_words_in(said("the curtains on the right"), "behind the curtain") == 2  # 7 of 8 letters
    assert context_words_in(said("on the leftmost side"), context) == 2  # "leftmost": 4 of 8 letters, a new word
    assert context_words_in(said("the curtain is"), "behind the curtain on the left") == 0  # not its end


def test_a_straddling_segment_that_writes_the_contexts_compound_closed_is_cut_after_it():
    t = transcript((0.0, 5.0, " Thyself thy foe, to thy sweet self too cruel."))
    cut = without_context(t, 1.6, "Making a famine where abundance lies Thy self-thy foe.")
    assert cut.text == "to thy sweet self too cruel."


def test_the_contexts_last_word_said_again_right_after_the_match_is_the_contexts():
    """The earlier final lost "words, words, words, words" (its loop cut); the next decode hears them again with
    the context: they go with the context, and the cut then agrees with the timing."""
    context = "and here's some more words"
    words = said("And here are some more words, words, words, words, words, and that should be all. Thanks!")
    assert context_words_in(words, context) == 10
    assert context_words_in(said("some more words and words"), "here's some more words") == 3  # not right after
    t = transcript((0.0, 7.24, " " + " ".join(words)))
    assert without_context(t, 5.76, context, speech_end_s=4.35).text == "and that should be all. Thanks!"
