"""Scoring that does not punish spelling (rtc_agent.words.scoring) and the captions set's scoring: the repeated
finals and ``--rescore`` of a saved result. No model, no server."""

from __future__ import annotations

import json

import pytest

from rtc_agent.bench import captions as captions_bench
from rtc_agent.bench.captions_scoring import SCORING, repeated_finals, rescore, rescore_file
from rtc_agent.words import join_compounds, scoring_text, scoring_words, wer
from rtc_agent.words.numbers import canonical_numbers, spell_digits, spell_number


def W(text: str) -> list[str]:
    """The words of ``text``."""
    return text.split()


@pytest.mark.parametrize(("a", "b"), [
    ("17", "seventeen"),
    ("the 2nd week", "the second week"),
    ("1,200 people", "one thousand two hundred people"),
    ("1200 people", "twelve hundred people"),
    ("a hundred and five", "105"),
    ("the 21st century", "the twenty-first century"),
    ("in 1984", "in nineteen eighty four"),
    ("3.5%", "three point five percent"),
    ("$20", "twenty dollars"),
    ("It's gonna rain, don't worry", "it is going to rain do not worry"),
    ("I wanna go, we gotta go", "I want to go we got to go"),
    ("I can't, we won't, they're, you've, I'll, I'm", "I cannot we will not they are you have I will I am"),
    ("OK, alright, Mister Smith", "okay all right Mr. Smith"),
    ("Our neighbours realised the colour of the centre", "our neighbors realized the color of the center"),
    ("the organisation travelled", "the organization traveled"),
    ("open-source, full-featured", "open source full featured"),
    ("Uh, um, the café", "the cafe"),
    ("It\u2019s", "it's"),
])
def test_spellings_of_the_same_words_score_alike(a, b):
    assert scoring_words(a) == scoring_words(b), (scoring_text(a), scoring_text(b))
    assert wer(a, b) == 0.0


@pytest.mark.parametrize(("a", "b"), [
    ("four", "for"), ("hour", "our"), ("the world's fresh", "the worlds fresh"), ("one two three", "one hundred "
     "twenty three"), ("fifteen", "fifty"), ("the budget spreadsheet", "the budget red sheet"),
    ("on two machines", "onto machines"), ("this", "these"), ("crisis", "crises"),
])
def test_different_words_stay_different(a, b):
    assert scoring_words(a) != scoring_words(b)
    assert wer(a, b) > 0.0


def test_numbers_are_spelled_one_way():
    assert spell_number(0) == ["zero"]
    assert spell_number(1_000_001) == ["one", "million", "one"]
    assert spell_digits("007") == ["zero", "zero", "seven"]  # a code, not an amount
    assert spell_digits("4155550123445") == W("four one five five five five zero one two three four four five")
    assert spell_digits("word") is None
    assert canonical_numbers(W("press one two three then")) == W("press one two three then")  # a PIN
    assert canonical_numbers(W("one hundred and twenty three and then")) == \
        W("one hundred twenty three and then")
    assert canonical_numbers(W("wait a second")) == W("wait a second")
    assert canonical_numbers(W("a thousand times")) == W("one thousand times")


def test_other_languages_keep_their_words_and_letters():
    assert scoring_text("Четыре дня, й!") == "четыре дня й"
    assert scoring_text("¿Dónde está?") == "donde esta"


def test_compounds_join_only_where_the_sides_differ():
    ref, hyp = join_compounds(W("the spreadsheet"), W("the spread sheet"))
    assert ref == hyp == ["the", "spreadsheet"]
    # "a long" is said on both sides: joining it into the "along" said elsewhere would hide nothing but a hit
    ref, hyp = join_compounds(W("after a long season we walked along"), W("after a long season we walked along"))
    assert ref == hyp == W("after a long season we walked along")
    assert wer("we walked along the beach", "we walked a long the beach") == 0.0  # same letters where they differ


def test_wer_counts_errors_over_the_reference_words():
    assert wer("", "") == 0.0
    assert wer("", "hello") == 1.0
    assert wer("one two", "") == 1.0
    assert wer("the cat sat on the mat", "the cat sat on a mat") == pytest.approx(1 / 6)


def test_repeated_finals_of_any_length_count_when_the_reference_does_not_repeat_them():
    reference = "and that should be all thanks so this is the sick corpus alright thanks"
    assert repeated_finals(["And that should be all.", "Thanks.", "So this is the sick corpus.", "Alright, thanks."],
                           reference) == 0
    assert repeated_finals(["And that should be all.", "Thanks.", "Thanks!", "Thanks."], reference) == 1
    assert repeated_finals(["Thanks. Thanks. Thanks."], "thanks") == 2  # within one final too
    # said twice in the reference: two finals of it are no repeat
    assert repeated_finals(["Please try again.", "Please try again."], "please try again please try again") == 0
    assert repeated_finals(["Hello.", "Hello."], None) == 1
    # a word or short phrase said again and again inside one final, unlike the reference
    assert repeated_finals(["And that should be all.", "Thanks Thanks Thanks"], reference) == 2
    assert repeated_finals(["here's some more words, words, words, words, words"],
                           "here's some more words words words words") == 1  # one "words" more than said
    assert repeated_finals(["the new release, the new release is out"], "the new release is out") == 1


def _saved_result() -> dict:
    clip = {"clip": "c1", "family": "human", "voice": "v", "reference": "the 2nd week of March, thanks",
            "offline_text": "The second week of March. Thanks.", "text": "The 2nd week of March. Thanks. Thanks.",
            "streaming_wer": 0.5, "offline_wer": 0.2, "final_latency_ms": {"p50": 500.0},
            "finals": [{"text": "The 2nd week of March.", "audio_start_ms": 0, "audio_end_ms": 1000,
                        "latency_ms": 500.0}, {"text": "Thanks.", "audio_start_ms": 1200, "audio_end_ms": 1500,
                                               "latency_ms": 400.0},
                       {"text": "Thanks.", "audio_start_ms": 1500, "audio_end_ms": 1800, "latency_ms": 450.0}]}
    return {"benchmark": "captions-set", "families": {"human": {"streaming_wer": 0.5}}, "clips": [clip],
            "final_latency_ms": {"p50": 450.0}, "by_sessions": {}}


def test_rescore_scores_a_saved_result_again_without_running_anything(tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps(_saved_result()))
    out = rescore_file(path)
    clip = out["clips"][0]
    assert clip["offline_wer"] == 0.0  # "2nd" == "second"
    assert clip["streaming_wer"] == pytest.approx(1 / 6, abs=1e-4)  # the second "thanks" is one insertion
    assert clip["repeated_finals"] == 1 and out["repeated_finals"] == 1
    assert out["families"]["human"]["points_over_offline"] == pytest.approx(16.67, abs=0.01)
    assert out["families_as_measured"] == {"human": {"streaming_wer": 0.5}}
    assert out["final_latency_ms"] == {"p50": 450.0}  # latencies are kept as measured
    assert out["scoring"] == SCORING and out["rescored_from"] == str(path)


def test_rescore_refuses_what_it_cannot_score(tmp_path):
    with pytest.raises(ValueError, match="not a captions-set result"):
        rescore({"benchmark": "captions", "clips": []})
    broken = _saved_result()
    del broken["clips"][0]["offline_text"]
    with pytest.raises(ValueError, match="lacks offline_text"):
        rescore(broken)
    path = tmp_path / "set.json"
    path.write_text(json.dumps(_saved_result()))
    parser = __import__("argparse").ArgumentParser()
    captions_bench.add_arguments(parser)
    out = tmp_path / "rescored.json"
    result = captions_bench.main(parser.parse_args(["--rescore", str(path), "--out", str(out)]))
    assert json.loads(out.read_text()) == result
    with pytest.raises(SystemExit, match="--rescore"):
        captions_bench.main(parser.parse_args(["--rescore", str(tmp_path / "missing.json")]))
