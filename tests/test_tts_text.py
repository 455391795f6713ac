"""Clause splitting and speakable-text cleaning for TTS (rtc_agent.engines.tts.text)."""

from __future__ import annotations

import pytest

from rtc_agent.engines.tts.text import ClauseSplitter, speakable, split_clauses


def stream(text: str, step: int = 1, **options: int) -> list[str]:
    """Feed ``text`` in pieces of ``step`` characters, then flush; all clauses in order."""
    splitter = ClauseSplitter(**options)
    out: list[str] = []
    for i in range(0, len(text), step):
        out += splitter.feed(text[i:i + step])
    return out + splitter.flush()


@pytest.mark.parametrize(
    ("text", "clauses"),
    [
        ("Hello. How are you? I'm fine!", ["Hello.", "How are you?", "I'm fine!"]),
        ("It costs 3.5 dollars. Pi is 3.14159.", ["It costs 3.5 dollars.", "Pi is 3.14159."]),
        ("Dr. Smith and Mr. Jones met Mrs. Brown.", ["Dr. Smith and Mr. Jones met Mrs. Brown."]),
        ("Bring fruit, e.g. apples or pears, i.e. something sweet.",
         ["Bring fruit, e.g. apples or pears,", "i.e. something sweet."]),
        ("We met at 10 a.m. Then we left at 5 p.m. and went home.",
         ["We met at 10 a.m.", "Then we left at 5 p.m. and went home."]),
        ("Apples, pears, etc. were sold. Prices rose etc. Then they fell.",
         ["Apples, pears, etc. were sold.", "Prices rose etc.", "Then they fell."]),
        ("The U.S. economy grew.", ["The U.S. economy grew."]),
        ("I said no. See No. 5 on p. 12.", ["I said no.", "See No. 5 on p. 12."]),
        ("J. R. R. Tolkien wrote it. So did I. Yes.", ["J. R. R. Tolkien wrote it.", "So did I.", "Yes."]),
        ("Wait... what?! Really?", ["Wait...", "what?!", "Really?"]),
        ('He said "yes." Then he left.', ['He said "yes."', "Then he left."]),
        ("Open file.txt now. Version 2.0.1 is out.", ["Open file.txt now.", "Version 2.0.1 is out."]),
        ("It has 1,000 rows at 10:30 today.", ["It has 1,000 rows at 10:30 today."]),
        ("In 2024. Five people came.", ["In 2024.", "Five people came."]),
        ("No trailing punctuation", ["No trailing punctuation"]),
        ("\u4f60\u597d\u3002\u6211\u5f88\u597d\uff01\u8c22\u8c22",
         ["\u4f60\u597d\u3002", "\u6211\u5f88\u597d\uff01", "\u8c22\u8c22"]),
    ],
)
def test_sentences(text: str, clauses: list[str]) -> None:
    assert split_clauses(text) == clauses
    # the same clauses whatever the deltas look like (LLM tokens arrive in odd pieces)
    assert stream(text, 1) == clauses
    assert stream(text, 3) == clauses


def test_numbered_list_markers_do_not_split() -> None:
    assert split_clauses("1. First item\n2. Second item") == ["1. First item", "2. Second item"]


def test_soft_breaks_need_a_long_enough_clause() -> None:
    text = ("In the first place, I would like to thank everyone who came here today, "
            "and especially my family; they mattered a great deal to me.")
    clauses = split_clauses(text, min_soft_chars=40, first_min_soft_chars=24)
    # "In the first place," is too short to stand alone; the later comma and semicolon break
    assert clauses == [
        "In the first place, I would like to thank everyone who came here today,",
        "and especially my family; they mattered a great deal to me.",
    ]
    assert split_clauses("Yes, sure, fine.") == ["Yes, sure, fine."]


def test_first_clause_breaks_earlier_than_later_ones() -> None:
    text = "Well, let me think about it, because this is hard, you know, really hard, right."
    clauses = split_clauses(text, min_soft_chars=60, first_min_soft_chars=10)
    assert clauses[0] == "Well, let me think about it,"
    assert clauses[1:] == ["because this is hard, you know, really hard, right."]


def test_long_text_without_punctuation_is_cut_at_a_space() -> None:
    words = " ".join(f"word{i}" for i in range(200))
    splitter = ClauseSplitter(max_chars=80)
    out: list[str] = []
    for word in words.split(" "):
        out += splitter.feed(word + " ")
        assert len(splitter.pending) <= 80
    out += splitter.flush()
    assert all(len(c) <= 80 for c in out)
    assert " ".join(out).split() == words.split()  # nothing lost, no word cut


def test_newlines_break_and_markdown_is_not_spoken() -> None:
    text = (
        "## Weather today\n"
        "Here is the **forecast** for `Paris`:\n"
        "- Morning: *sunny*, 20\u00b0C\n"
        "* Evening: __rain__ \U0001F327\ufe0f\n"
        "> Take an umbrella.\n"
        "---\n"
        "See [the map](https://example.org/map) for snake_case details.\n"
    )
    assert stream(text, 2) == [
        "Weather today",
        "Here is the forecast for Paris:",
        "Morning: sunny, 20\u00b0C",
        "Evening: rain",
        "Take an umbrella.",
        "See the map for snake_case details.",
    ]


def test_code_blocks_are_dropped() -> None:
    text = "Use this:\n```python\nx = 1. Then print(x).\n```\nThat is all. Bye."
    assert stream(text, 4) == ["Use this:", "That is all.", "Bye."]
    assert speakable(text) == "Use this: That is all. Bye."


def test_sentence_end_inside_emphasis() -> None:
    assert split_clauses("**Note.** This matters.") == ["Note.", "This matters."]


def test_waits_for_the_character_after_a_dot() -> None:
    splitter = ClauseSplitter()
    assert splitter.feed("It costs 3.") == []  # could be 3.5
    assert splitter.feed("5 dollars. And") == ["It costs 3.5 dollars."]
    assert splitter.pending == "And"
    assert splitter.feed(" Dr.") == []
    assert splitter.feed(" Who") == []
    assert splitter.flush() == ["And Dr. Who"]
    assert splitter.clauses_emitted == 0  # reset by flush


def test_maybe_abbreviation_waits_for_the_next_word() -> None:
    splitter = ClauseSplitter()
    assert splitter.feed("We left at 5 p.m. ") == []  # depends on the next word
    assert splitter.feed("Then") == ["We left at 5 p.m."]
    assert splitter.flush() == ["Then"]
    assert ClauseSplitter().flush() == []


def test_whitespace_is_normalized_and_empty_clauses_dropped() -> None:
    assert split_clauses("  Hello \t  world.\n\n\n   ***  \n\tBye .  ") == ["Hello world.", "Bye."]
    assert split_clauses("") == []
    assert split_clauses("*** --- ```") == []


def test_speakable() -> None:
    assert speakable("  **Bold**  and _italic_ and `code`  ") == "Bold and italic and code"
    assert speakable("# Title") == "Title"
    assert speakable("![diagram](x.png) shows it") == "diagram shows it"
    assert speakable("a | b | c") == "a b c"
    assert speakable("!?") == ""
    assert speakable("\U0001F600") == ""


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ClauseSplitter(max_chars=5)
    with pytest.raises(ValueError):
        ClauseSplitter(min_soft_chars=500, max_chars=100)
    with pytest.raises(TypeError):
        ClauseSplitter().feed(None)  # type: ignore[arg-type]


def test_first_clause_word_limit():
    splitter = ClauseSplitter(first_max_words=4)
    assert splitter.feed("Cats sleep for most of") == ["Cats sleep for most"]
    assert splitter.feed(" the day, and hunt at night. They") == ["of the day, and hunt at night."]
    assert splitter.flush() == ["They"]
    short = ClauseSplitter(first_max_words=6)
    assert short.feed("Sure, I can help. ") == ["Sure, I can help."]  # a sentence end comes first


def feed_tokens(splitter: ClauseSplitter, tokens: list[str]) -> list[tuple[str, list[str]]]:
    """(token, clauses it completed) for every token that completed one, then ("", flush())."""
    out = [(token, done) for token in tokens if (done := splitter.feed(token))]
    return [*out, ("", splitter.flush())]


def test_first_eager_end_cuts_at_the_mark_without_waiting_for_the_next_token():
    eager = ClauseSplitter(first_min_soft_chars=12, first_eager_end=True)
    assert feed_tokens(eager, ["I", "'m", " doing", " great", "!", " I", " hope", " so", ".", " Yes"]) == [
        ("!", ["I'm doing great!"]), (" Yes", ["I hope so."]), ("", ["Yes"])]  # later clauses wait as usual
    assert feed_tokens(eager, ["Cats", " are", " cute", " and", " c", "udd", "ly", ",", " but", " shy", "."]) == [
        (",", ["Cats are cute and cuddly,"]), ("", ["but shy."])]
    assert feed_tokens(eager, ["Well", ".", "..", " so", "."]) == [(".", ["Well."]), ("", ["so."])]
    assert feed_tokens(eager, ["He", " said", ' "', "hi", "!", '"', " and", " left", "."]) == [
        ("!", ['He said "hi!']), ("", ["and left."])]


def test_first_eager_end_keeps_numbers_and_abbreviations_whole():
    eager = ClauseSplitter(first_eager_end=True)
    assert feed_tokens(eager, ["It", " costs", " 3", ".", "5", " dollars", "."]) == [
        (".", ["It costs 3.5 dollars."]), ("", [])]
    assert feed_tokens(eager, ["Ask", " Dr", ".", " Smith", " now"]) == [("", ["Ask Dr. Smith now"])]
    assert feed_tokens(eager, ["About", " 1", ",", "000", " cats"]) == [("", ["About 1,000 cats"])]
