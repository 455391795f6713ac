"""Audio past Whisper's 30 s window: walked in windows with seek and merge (unit tests with scripted windows), and
decoded whole by the real engine (no word past 30 s lost)."""

from __future__ import annotations

import numpy as np
import pytest

from rtc_agent.engines.asr.base import SAMPLE_RATE, Segment, TranscribeRequest, Transcript
from rtc_agent.engines.asr.long_audio import MIN_ADVANCE_S, WINDOW_S, DecodedWindow, LongAudio


def _window(segments: list[tuple[float, float, str]], settled_s: float, **extra) -> DecodedWindow:
    segs = [Segment(a, b, t) for a, b, t in segments]
    return DecodedWindow(Transcript(text="".join(s.text for s in segs).strip(), segments=segs, language="en",
                                    **extra), settled_s)


def _walk(seconds: float, windows) -> tuple[LongAudio, list[TranscribeRequest]]:
    walk = LongAudio(TranscribeRequest(np.zeros(int(seconds * SAMPLE_RATE), dtype=np.float32), prompt="earlier",
                                       prefix="", detect_language=True))
    asked = []
    for make in windows:
        if walk.done:
            break
        request = walk.next_request()
        asked.append(request)
        walk.add(make(request))
    assert walk.done
    return walk, asked


def test_short_audio_is_one_window_and_comes_back_unchanged():
    for seconds in (0.5, 12.0, WINDOW_S):
        original = _window([(0.0, 1.0, " hello")], 1.0, audio_s=seconds)
        walk, asked = _walk(seconds, [lambda r, o=original: o])
        assert len(asked) == 1 and len(asked[0].audio) == int(seconds * SAMPLE_RATE)
        assert walk.merged() is original.transcript


@pytest.mark.parametrize("seconds", [31.0, 45.5, 61.0, 95.0])
def test_long_audio_is_covered_to_its_end_and_no_window_exceeds_thirty_seconds(seconds):
    def settled_window(request):  # one closed segment per window: the decoder ended on a timestamp
        d = request.duration_s
        return _window([(0.0, d, f" part{round(d)}")], d, audio_s=d)

    walk, asked = _walk(seconds, [settled_window] * 10)
    assert all(r.duration_s <= WINDOW_S for r in asked)
    assert sum(r.duration_s for r in asked) == pytest.approx(seconds, abs=1e-3)  # every sample, once
    merged = walk.merged()
    assert merged.audio_s == pytest.approx(seconds) and merged.segments[-1].end == pytest.approx(seconds, abs=1e-3)
    assert [s.start for s in merged.segments] == sorted(s.start for s in merged.segments)
    # later windows: the first window's language, the text so far as the prompt, no detection
    assert asked[0].detect_language and all(not r.detect_language and r.language == "en" for r in asked[1:])
    assert asked[1].prompt.startswith("earlier") and "part30" in asked[1].prompt


def test_an_unsettled_tail_is_decoded_again_by_the_next_window():
    def first(request):  # the last segment was cut by the window's end: only up to 21.5 s is settled
        return _window([(0.0, 21.5, " one two three"), (21.5, 30.0, " fo")], 21.5, audio_s=30.0)

    def second(request):
        assert request.duration_s == pytest.approx(40.0 - 21.5) and request.full_window
        return _window([(0.0, 5.0, " four five"), (5.0, 18.5, " six")], 18.5, audio_s=18.5)

    walk, _ = _walk(40.0, [first, second])
    merged = walk.merged()
    assert merged.text == "one two three four five six"
    assert [(s.start, s.end) for s in merged.segments] == [(0.0, 21.5), (21.5, 26.5), (26.5, 40.0)]


def test_a_window_settled_too_early_moves_on_by_the_whole_window_and_keeps_its_text():
    def unsettled(request):
        return _window([(0.0, 30.0, " one long run")], MIN_ADVANCE_S / 2, audio_s=request.duration_s)

    walk, asked = _walk(50.0, [unsettled, unsettled])
    assert [round(r.duration_s) for r in asked] == [30, 20]
    assert walk.merged().text == "one long run one long run"


def test_silent_windows_add_no_text_and_the_merge_reports_the_windows():
    def silent(request):
        return _window([(0.0, 2.0, " Thank you.")], request.duration_s, audio_s=request.duration_s,
                       no_speech_prob=0.9, avg_logprob=-1.5, decode_s=0.5)

    def spoken(request):
        return _window([(1.0, 4.0, " real words")], request.duration_s, audio_s=request.duration_s,
                       no_speech_prob=0.1, avg_logprob=-0.3, decode_s=0.25, compression_ratio=1.5)

    walk, _ = _walk(45.0, [silent, spoken])
    merged = walk.merged()
    assert merged.text == "real words" and merged.segments[0].start == pytest.approx(31.0)
    assert merged.no_speech_prob == pytest.approx(0.1) and not merged.looks_like_silence
    assert -1.5 < merged.avg_logprob < -0.3 and merged.compression_ratio == pytest.approx(1.5)
    assert merged.decode_s == pytest.approx(0.75)


def test_the_engine_refuses_audio_past_one_window_in_its_features():
    from rtc_agent.engines.asr.whisper import WhisperEngine

    engine = WhisperEngine(cache_dir="/nonexistent")
    with pytest.raises(ValueError, match="at most 30 s"):
        engine._features(TranscribeRequest(np.zeros(31 * SAMPLE_RATE, dtype=np.float32)), 3000)


@pytest.mark.real_model
def test_the_real_engine_transcribes_speech_past_thirty_seconds():
    from rtc_agent.config import Settings
    from rtc_agent.engines.asr.whisper import WhisperEngine
    from tests.speech import content_share, speech_clip

    early = ["The library opens at nine every morning.", "Please bring your tickets to the front desk.",
             "We walked along the river after lunch.", "The weather was cold and windy all week.",
             "Our teacher gave us a difficult homework assignment.", "The bakery sells fresh bread and cakes.",
             "He parked the blue car near the station.", "They painted the kitchen walls bright yellow."]
    late = ["My sister plays the violin in an orchestra.", "The garden behind the house is full of roses."]
    clip, spans = speech_clip([*early, *late], gap_s=1.8, sample_rate=SAMPLE_RATE)
    audio = clip.astype(np.float32) / 32768.0
    assert spans[len(early)][0] > 30.5 and len(audio) / SAMPLE_RATE < 50.0  # the late sentences are past 30 s

    engine = WhisperEngine(cache_dir=Settings().cache_dir)
    engine.load(lambda message: None)
    try:
        (transcript,) = engine.run_batch([TranscribeRequest(audio, language="en")])
    finally:
        engine.close()
    late_words = ["sister", "violin", "orchestra", "garden", "house", "roses"]
    early_words = ["library", "morning", "tickets", "river", "lunch", "weather", "windy", "teacher", "homework",
                   "bakery", "bread", "cakes", "car", "station", "kitchen", "yellow"]
    assert content_share(transcript.text, late_words) >= 0.6, transcript.text  # before the fix: none of them
    assert content_share(transcript.text, early_words) >= 0.6, transcript.text
    assert transcript.audio_s == pytest.approx(len(audio) / SAMPLE_RATE)
    assert transcript.segments[-1].end > spans[-1][0]
    assert all(a.start <= b.start for a, b in zip(transcript.segments, transcript.segments[1:], strict=False))
    assert not transcript.looks_repetitive
    assert max(transcript.text.lower().count(w) for w in ("garden", "library", "kitchen")) == 1  # none twice
