"""What a final decode hears of the session's earlier finals: the span that fits the time budget, and the prompt."""

from __future__ import annotations

from rtc_agent.apps.captions.earlier_finals import EarlierFinals, FinalCaption


def finals(**kw) -> EarlierFinals:
    e = EarlierFinals(**{"context_s": 16.0, "budget_ms": 450, "preroll_ms": 200, "max_finals": 100, **kw})
    for i, (a, b, lang) in enumerate([(1000, 3000, "en"), (4000, 6000, "de"), (7000, 9000, "en"),
                                      (10000, 12000, "en")]):
        e.add(FinalCaption(f"s{i}", f"text {i}", a, b, lang))
    return e


def span(e: EarlierFinals, *args) -> tuple[int, str, int] | None:
    heard = e.context(*args)
    return None if heard is None else (heard.begin_ms, heard.text, heard.end_ms)


def test_the_span_reaches_back_as_far_as_the_budget_allows():
    e = finals()
    # no speed known yet: up to context_s; a final in another language ends the run of the same language
    assert e.limit_s() == 16.0
    assert span(e, 15000, 0, 13000, "en") == (6800, "text 2 text 3", 12000)
    assert span(e, 15000, 0, 13000, None) == (800, "text 0 text 1 text 2 text 3", 12000)
    assert span(e, 15000, 0, 13000, "de") is None  # the latest finals are English
    assert span(e, 15000, 8000, 13000, "en") == (9800, "text 3", 12000)  # audio before 8 s is no longer kept
    assert span(e, 15000, 0, 11000, "en") == (6800, "text 2", 9000)  # a final overlapping the utterance is not context
    e.decoded(wall_s=0.75, audio_s=10.0)  # 0.075 s a second of audio: 6 s fit 450 ms
    assert abs(e.limit_s() - 6.0) < 1e-9
    assert span(e, 15000, 0, 13000, "en") == (9800, "text 3", 12000)
    e.decoded(wall_s=10.0, audio_s=1.0)  # very slow (a busy engine): nothing fits
    assert span(e, 15000, 0, 13000, "en") is None


def test_one_slow_final_decode_does_not_take_the_context_away():
    """The speed is the median of the last three final decodes: one that ran 4x its usual time (the repetition
    guard decoded it again) leaves the next final its context; two in a row (a busy engine) shrink it."""
    e = finals()
    for _ in range(3):
        e.decoded(wall_s=0.3, audio_s=10.0)  # 0.03 s a second: 15 s fit 450 ms
    assert abs(e.limit_s() - 15.0) < 1e-9
    e.decoded(wall_s=1.2, audio_s=10.0)
    assert abs(e.limit_s() - 15.0) < 1e-9
    assert span(e, 15000, 0, 13000, "en") == (6800, "text 2 text 3", 12000)
    e.decoded(wall_s=1.2, audio_s=10.0)  # 0.12 s a second: 3.75 s fit
    assert abs(e.limit_s() - 3.75) < 1e-9
    assert span(e, 15000, 0, 13000, "en") is None


def test_the_prompt_is_the_latest_finals_in_the_language():
    e = finals()
    assert e.prompt("en", 0) == ""
    assert e.prompt("en", 100) == "text 2 text 3"
    assert e.prompt("en", 6) == "text 3"
    assert e.prompt("en", 8) == "2 text 3"  # the last characters
    assert e.last is not None and e.last.segment_id == "s3" and len(e) == 4


def test_a_final_the_span_cuts_into_is_heard_when_enough_of_it_is_left():
    e = finals()
    e.decoded(wall_s=0.45, audio_s=7.0)  # 7 s fit 450 ms: from 8000 ms for a final to 15000 ms
    assert [f.text for f in e.context_finals(15000, 0, 13000, "en")] == ["text 3"]
    # the final of 7-9 s began (its pre-roll) before 8 s; 1 s of it is left
    assert [f.text for f in e.context_finals(15000, 0, 13000, "en", partial_ms=900)] == ["text 2", "text 3"]
    assert [f.text for f in e.context_finals(15000, 0, 13000, "en", partial_ms=1500)] == ["text 3"]
    assert abs(e.context_from_ms(15000, 0) - 8000) <= 1 and e.context_from_ms(15000, 8500) == 8500
    heard = e.context(15000, 0, 13000, "en", partial_ms=900)
    assert abs(heard.begin_ms - 8000) <= 1 and heard.end_ms == 12000 and heard.text == "text 2 text 3"
    segments = heard.segments()  # the cut final from the audio's start, its text whole
    assert segments[0].start == 0 and abs(segments[0].end - 1.0) < 0.01 and segments[0].text == "text 2"
    assert abs(segments[1].start - 2.0) < 0.01 and abs(segments[1].end - 4.0) < 0.01


def test_the_forced_context_setting_turns_on_both_rules():
    import dataclasses

    from rtc_agent.apps.captions.transcriber_config import FORCED_PARTIAL_CONTEXT_MS, transcriber_config
    from rtc_agent.config import Settings

    default = transcriber_config(Settings(), "en")
    assert (default.force_context, default.partial_context_ms) == (False, 0)
    forced = transcriber_config(dataclasses.replace(Settings(), captions_force_context=True), "en")
    assert (forced.force_context, forced.partial_context_ms) == (True, FORCED_PARTIAL_CONTEXT_MS)


def test_a_short_utterance_may_take_more_of_the_budget_to_hear_earlier_speech():
    """Heard alone, a short phrase is where Whisper makes words up; its own decode is short, so it may spend
    ``SHORT_BUDGET_FACTOR`` times the budget on the earlier speech."""
    from rtc_agent.apps.captions.earlier_finals import SHORT_BUDGET_FACTOR, SHORT_UTTERANCE_S

    e = finals()
    e.decoded(wall_s=0.75, audio_s=10.0)  # 0.075 s a second of audio: 6 s fit 450 ms
    assert abs(e.limit_s(SHORT_UTTERANCE_S) - 6.0) < 1e-9
    assert abs(e.limit_s(1.5) - 6.0 * SHORT_BUDGET_FACTOR) < 1e-9
    assert span(e, 15000, 0, 13000, "en") == (9800, "text 3", 12000)  # a 2 s utterance: the budget
    assert span(e, 15000, 0, 13500, "en") == (6800, "text 2 text 3", 12000)  # 1.5 s: 9 s of audio in all
    assert abs(e.context_from_ms(15000, 0, 13500) - 6000) <= 1 and abs(e.context_from_ms(15000, 0) - 9000) <= 1


def test_an_utterance_hard_to_hear_may_take_more_of_the_budget():
    """An utterance whose partials were unsure of their words may spend ``HARD_BUDGET_FACTOR`` times the budget on
    earlier speech; a short one that is also hard gets the larger of the two factors, not their product."""
    from rtc_agent.apps.captions.earlier_finals import HARD_BUDGET_FACTOR, SHORT_BUDGET_FACTOR

    assert HARD_BUDGET_FACTOR > SHORT_BUDGET_FACTOR
    e = finals()
    assert e.limit_s(hard=True) == 16.0  # no speed known yet: context_s either way
    e.decoded(wall_s=0.75, audio_s=10.0)  # 6 s fit 450 ms
    assert abs(e.limit_s(3.0, hard=True) - 6.0 * HARD_BUDGET_FACTOR) < 1e-9
    assert abs(e.limit_s(1.0, hard=True) - 6.0 * HARD_BUDGET_FACTOR) < 1e-9
    assert e.limit_s(3.0) == 6.0
    assert span(e, 15000, 0, 13000, "en") == (9800, "text 3", 12000)
    assert span(e, 15000, 0, 13000, "en", 0, True) == (6800, "text 2 text 3", 12000)  # 12 s of audio in all
    assert abs(e.context_from_ms(15000, 0, 13000, hard=True) - (15000 - 6000 * HARD_BUDGET_FACTOR)) <= 1
    e.decoded(wall_s=4.0, audio_s=10.0)
    e.decoded(wall_s=4.0, audio_s=10.0)  # 0.4 s a second: 2.25 s hard, nothing earlier fits
    assert span(e, 15000, 0, 13000, "en", 0, True) is None
