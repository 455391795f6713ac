"""The repetition guard: loop detection on text, and the engine's bounded fallback (scripted decodes; the real
decoder is exercised in tests/test_asr_long_audio.py and the captions tests)."""

from __future__ import annotations

import numpy as np
import pytest

from rtc_agent.engines.asr.base import SAMPLE_RATE, Segment, TranscribeRequest, Transcript
from rtc_agent.engines.asr.long_audio import DecodedWindow
from rtc_agent.engines.asr.repetition import MAX_CHARS_PER_S, compression_ratio, is_looping, looping_run
from rtc_agent.engines.asr.whisper import LOOP_WINDOW_S, WhisperEngine

LOOPS = [
    "L.A.D.D.D.D.D.D.D.D",
    "So we went to the L.A.D.D.D.D.D.D.",
    "Thank you. " * 6,
    "aaaaaaaaaaaaaaaaaaaa",
    "and then and then and then and then and then and then",
    "The meeting is at nine." + " the" * 12,
    "Ich bin hier. ja ja ja ja ja ja ja ja",
    "words words words words words and then D.D.D.D.D.D.D.D",  # a run said, then a loop
]
SPEECH = [
    "The meeting starts at nine tomorrow morning, so please bring the budget spreadsheet.",
    "No, no, no, no, that is not what I meant.",
    "It was very very very good.",
    "The population grew from 1,000,000 to 1,200,000 in ten years.",
    "Visit www.example.com for the details.",
    "Mississippi is a long river; bookkeeper is a word with three double letters.",
    "Ha ha ha, that is funny.",
    "El tren sale a las ocho y llega a Madrid a las diez.",
    "and here's some more words, words, words, words, words, words and that should be all. Thanks!",
    "",
]


@pytest.mark.parametrize("text", LOOPS)
def test_loops_are_found_even_where_gzip_misses_them(text):
    assert looping_run(text) is not None and is_looping(text)
    assert Transcript(text=text, compression_ratio=compression_ratio(text)).looks_repetitive


@pytest.mark.parametrize("text", SPEECH)
def test_ordinary_speech_is_not_a_loop(text):
    assert looping_run(text) is None and not is_looping(text)
    assert not Transcript(text=text, compression_ratio=compression_ratio(text)).looks_repetitive


FAST_LOOPS = [("calm calm calm calm", 0.6), ("I'm sorry, I'm sorry, I'm sorry,", 0.7), ("Thanks. Thanks. Thanks.", 0.5)]


@pytest.mark.parametrize(("text", "audio_s"), FAST_LOOPS)
def test_a_few_copies_faster_than_speech_are_a_loop(text, audio_s):
    assert looping_run(text) is None  # too few copies for the usual rule
    assert looping_run(text, audio_s) is not None and is_looping(text, audio_s)
    t = Transcript(text=text, segments=[Segment(0.0, audio_s, " " + text)], audio_s=audio_s)
    assert t.looks_repetitive
    cut = t.without_loop()
    assert not cut.looks_repetitive and len(cut.text.split()) <= 2


@pytest.mark.parametrize("text", [*SPEECH, "no, no, no", "Thanks. Thanks. Thanks.", "calm calm calm calm"])
def test_repeats_at_the_pace_of_speech_are_not_a_loop(text):
    for chars_per_s in (10.0, 15.0, 0.9 * MAX_CHARS_PER_S):  # slow, usual and fast talkers
        audio_s = max(len(text), 1) / chars_per_s
        assert looping_run(text, audio_s) is None
        assert not Transcript(text=text, compression_ratio=compression_ratio(text), audio_s=audio_s).looks_repetitive


def test_short_loops_are_below_the_gzip_threshold():  # why the n-gram check exists
    assert compression_ratio("L.A.D.D.D.D.D.D.D.D") < 2.4


def test_without_loop_keeps_the_words_before_the_loop_and_one_copy_of_it():
    segments = [Segment(0.0, 1.5, " I went home."), Segment(1.5, 3.0, " D.D.D.D.D.D.D.D.D.D.D.D")]
    t = Transcript(text="I went home. D.D.D.D.D.D.D.D.D.D.D.D", segments=segments, compression_ratio=3.0)
    cut = t.without_loop()
    assert cut.text.startswith("I went home.") and len(cut.text) <= len("I went home. D.D.")
    assert not cut.looks_repetitive and cut.compression_ratio < 2.4
    assert cut.segments[0] == segments[0] and "".join(s.text for s in cut.segments).strip() == cut.text
    clean = Transcript(text="Nothing repeats here.", segments=[Segment(0.0, 1.0, " Nothing repeats here.")])
    assert clean.without_loop() is clean
    for text in LOOPS:  # every loop goes, whatever its unit
        assert not Transcript(text=text).without_loop().looks_repetitive


class ScriptedWhisper(WhisperEngine):
    """``_decode`` answers from a script: per call, the text each request gets (by the request's audio length,
    so that the requests can be told apart), and every call is recorded."""

    def __init__(self, answers: dict[tuple[int, int], str]) -> None:
        super().__init__(cache_dir="/nonexistent")
        self.answers = answers  # (seconds of audio, attempt) -> text; a missing attempt repeats the last one
        self.calls: list[tuple[int | None, list[TranscribeRequest]]] = []  # (the window asked for, the batch)

    def _decode(self, requests, window_s=None):
        self.calls.append((window_s, list(requests)))
        out = []
        for r in requests:
            seconds = round(r.duration_s)
            attempt = sum(1 for _, batch in self.calls for q in batch if round(q.duration_s) == seconds) - 1
            known = [a for (s, a) in self.answers if s == seconds and a <= attempt]
            text = self.answers[(seconds, max(known))]
            out.append(DecodedWindow(Transcript(text=text, segments=[Segment(0.0, r.duration_s, " " + text)],
                                                compression_ratio=compression_ratio(text), audio_s=r.duration_s),
                                     r.duration_s))
        return out


def _request(seconds: int, **extra) -> TranscribeRequest:
    return TranscribeRequest(np.zeros(seconds * SAMPLE_RATE, dtype=np.float32), prompt="before", **extra)


def test_a_loop_is_decoded_again_without_the_prompt_first():
    engine = ScriptedWhisper({(3, 0): "L.A.D.D.D.D.D.D.D.D", (3, 1): "Lad is here.", (5, 0): "Fine words."})
    out = engine.run_batch([_request(3), _request(5)])
    assert [t.text for t in out] == ["Lad is here.", "Fine words."]
    assert len(engine.calls) == 2
    (again,) = engine.calls[1][1]
    assert again.prompt == "" and not again.full_window  # only the looping request, the same short window


def test_a_loop_that_survives_without_the_prompt_gets_a_longer_window():
    engine = ScriptedWhisper({(3, 0): "D.D.D.D.D.D.D.D.D", (3, 2): "Dee is here."})
    (out,) = engine.run_batch([_request(3)])
    assert out.text == "Dee is here." and not out.looks_repetitive
    window_s, (last,) = engine.calls[-1]
    assert last.prompt == "" and window_s == LOOP_WINDOW_S and len(engine.calls) == 3


@pytest.mark.parametrize(("seconds", "window_s"), [(3, LOOP_WINDOW_S), (9.5, 22), (14.2, 30), (28, 30)])
def test_the_longer_window_is_at_least_twice_the_short_one(seconds, window_s):
    request = TranscribeRequest(np.zeros(int(seconds * SAMPLE_RATE), dtype=np.float32))
    assert ScriptedWhisper({}).loop_window_s(request) == window_s


def test_a_loop_in_a_window_as_long_as_the_longer_one_is_cut_without_decoding_again():
    engine = ScriptedWhisper({(30, 0): "Fine words. " + "D." * 20})  # 29.5 s: a 30 s window of its own
    (out,) = engine.run_batch([TranscribeRequest(np.zeros(int(29.5 * SAMPLE_RATE), dtype=np.float32), prompt="x")])
    assert len(engine.calls) == 2 and not out.looks_repetitive  # the window, again without the prompt: no more


def test_a_transcript_decoded_again_says_so():
    """Its time says nothing of the engine's usual speed (the captions' final-context budget leaves it out)."""
    engine = ScriptedWhisper({(3, 0): "D.D.D.D.D.D.D.D.D", (3, 2): "Dee is here.", (5, 0): "Fine words.",
                              (30, 0): "First window words.", (10, 0): "ja ja ja ja ja ja ja ja ja",
                              (10, 1): "Second window words."})
    looped, fine, long = engine.run_batch([_request(3), _request(5), _request(40)])
    assert looped.decoded_again and not fine.decoded_again
    assert long.decoded_again and long.text == "First window words. Second window words."  # one of its windows


def test_a_partial_that_loops_is_cut_without_a_longer_window():
    """A caption's partial asks for ``cut_loops``: the next partial replaces it, a 30 s window costs several."""
    engine = ScriptedWhisper({(3, 0): "D.D.D.D.D.D.D.D.D", (3, 1): "Dee is here."})
    (out,) = engine.run_batch([TranscribeRequest(np.zeros(3 * SAMPLE_RATE, dtype=np.float32), cut_loops=True)])
    assert len(engine.calls) == 1 and not out.looks_repetitive and len(out.text) < len("D.D.D.D.D.D.D.D.D")


def test_a_full_window_request_without_a_prompt_is_cut_at_once():
    engine = ScriptedWhisper({(4, 0): "Thank you. " * 6})
    (out,) = engine.run_batch([TranscribeRequest(np.zeros(4 * SAMPLE_RATE, dtype=np.float32), full_window=True)])
    assert len(engine.calls) == 1 and out.text == "Thank you."


def test_a_fast_loop_in_a_short_final_is_cut_to_one_copy():
    engine = ScriptedWhisper({(1, 0): "calm calm calm calm"})
    short = TranscribeRequest(np.zeros(int(0.6 * SAMPLE_RATE), dtype=np.float32), prompt="before", beam_size=5)
    (out,) = engine.run_batch([short])
    assert out.text == "calm" and len(engine.calls) == 2  # the cut covers 0.6 s: no longer-window decode


def test_a_loop_after_the_speech_is_cut_without_a_longer_window():
    said = "The library closes early on Fridays during the winter."
    engine = ScriptedWhisper({(3, 0): said + " winter" * 12})
    (out,) = engine.run_batch([_request(3, beam_size=5)])
    assert out.text.startswith(said) and not out.looks_repetitive and len(out.text) <= len(said) + len(" winter")
    assert len(engine.calls) == 2 and all(window_s is None for window_s, _ in engine.calls)


def test_a_loop_after_the_speech_that_follows_a_forced_context_is_cut_without_a_longer_window():
    """The words must cover the speech after the context (2 s here), not the whole audio with it (8 s)."""
    said = "Press star for help."
    engine = ScriptedWhisper({(8, 0): said + " help" * 12})
    context = (Segment(0.2, 5.8, "The library closes early on Fridays during the winter."),)
    (out,) = engine.run_batch([_request(8, beam_size=5, context=context)])
    assert out.text.startswith(said) and not out.looks_repetitive
    assert len(engine.calls) == 2 and all(window_s is None for window_s, _ in engine.calls)


def test_the_fallback_is_bounded_and_a_loop_that_stays_is_cut():
    for loop in LOOPS:
        engine = ScriptedWhisper({(4, 0): loop, (6, 0): "Nothing wrong here."})
        out = engine.run_batch([_request(4), _request(6, full_window=True)])
        assert len(engine.calls) <= 3  # the window, again without the prompt, the longer window: never more
        assert sum(1 for _, batch in engine.calls for r in batch if round(r.duration_s) == 6) == 1
        assert not out[0].looks_repetitive and len(out[0].text) < len(loop.strip())
        assert out[1].text == "Nothing wrong here."


def test_long_audio_windows_each_get_the_guard():
    engine = ScriptedWhisper({(30, 0): "First window words.", (10, 0): "ja ja ja ja ja ja ja ja ja",
                              (10, 1): "Second window words."})
    (out,) = engine.run_batch([_request(40)])
    assert out.text == "First window words. Second window words."
    assert [round(r.duration_s) for _, batch in engine.calls for r in batch] == [30, 10, 10]


def test_each_batch_leaves_a_service_sample_for_the_running_speed():
    engine = ScriptedWhisper({(4, 0): "Fine words.", (8, 0): "More fine words.", (6, 0): "Six."})
    engine.run_batch([_request(4), _request(8, beam_size=5), _request(6, beam_size=3)])
    (sample,), cursor = engine.service_log.since(0)
    assert cursor == 1 and sample.seconds >= 0
    assert [(shape, round(size)) for shape, size in sample.items] == [("partial", 4), ("final", 8), ("final:3", 6)]
