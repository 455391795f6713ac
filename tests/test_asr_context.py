"""A final's earlier speech forced as the decoder's timestamped prefix (``TranscribeRequest.context``): the engine's
tokens (a fake tokenizer) and the real Whisper base (only the words after the context come back)."""

from __future__ import annotations

import numpy as np
import pytest

from rtc_agent.engines.asr.base import SAMPLE_RATE, Segment, TranscribeRequest
from rtc_agent.engines.asr.whisper import WhisperEngine
from rtc_agent.engines.asr.whisper_tokens import TIME_PRECISION, context_tokens, split_segments


class FakeTokenizer:
    eot = 50
    timestamp_begin = 100

    def encode(self, text: str) -> list[int]:
        return [len(word) for word in text.split()]

    def decode(self, ids: list[int]) -> str:
        return "".join(f" w{i}" for i in ids)


def ts(seconds: float) -> int:
    return FakeTokenizer.timestamp_begin + round(seconds / TIME_PRECISION)


def test_the_context_is_written_as_whisper_writes_its_segments():
    context = (Segment(0.2, 2.5, "one three"), Segment(3.1, 5.0, "sixsix"))
    tokens, end = context_tokens(FakeTokenizer(), context, 8.0)
    assert tokens == [ts(0.2), 3, 5, ts(2.5), ts(3.1), 6, ts(5.0)]
    assert end == pytest.approx(5.0)


def test_context_timestamps_never_go_back_nor_past_the_window_and_empty_finals_are_skipped():
    context = (Segment(1.0, 3.0, "aa"), Segment(2.0, 2.5, "bbb"), Segment(3.5, 4.0, "  "), Segment(5.0, 9.0, "c"))
    tokens, end = context_tokens(FakeTokenizer(), context, 6.0)
    stamps = [t for t in tokens if t >= FakeTokenizer.timestamp_begin]
    assert stamps == sorted(stamps)  # the second final overlaps the first: it starts where the first ended
    assert stamps == [ts(1.0), ts(3.0), ts(3.0), ts(3.0), ts(5.0), ts(6.0)]
    assert end == pytest.approx(6.0)


def test_text_before_the_first_generated_timestamp_starts_where_the_context_ended():
    segments, _ = split_segments(FakeTokenizer(), [7, 8, ts(4.0), FakeTokenizer.eot], 5.0, start=2.6)
    assert [(s.start, s.end, s.text) for s in segments] == [(2.6, 4.0, " w7 w8")]


def test_a_request_forces_a_context_or_a_prefix_not_both():
    engine = WhisperEngine(cache_dir="/nonexistent")
    engine.model = type("M", (), {"model": type("C", (), {"is_multilingual": False})(),
                                  "hf_tokenizer": None, "feature_extractor": None})()
    engine._tokenizer = lambda task, language: FakeTokenizer()  # type: ignore[method-assign]
    request = TranscribeRequest(np.zeros(SAMPLE_RATE, np.float32), prefix="so far",
                                context=(Segment(0.0, 0.5, "hi"),))
    with pytest.raises(ValueError, match="context or a prefix"):
        engine._prepare(request, 300)


@pytest.fixture(scope="module")
def whisper():
    from rtc_agent.config import Settings

    engine = WhisperEngine(cache_dir=Settings().cache_dir, parallel=1)
    engine.load(lambda message: None)
    yield engine
    engine.close()


@pytest.mark.real_model
def test_the_real_engine_writes_only_the_speech_after_a_forced_context(whisper):
    from tests.speech import content_share, speech_clip

    cases = [
        (["The library opens at nine every morning.", "Please bring your tickets to the front desk."],
         "We walked along the river after lunch.", ["walked", "river", "lunch"]),
        (["Our teacher gave us a difficult homework assignment."],
         "The bakery sells fresh bread and cakes.", ["bakery", "bread", "cakes"]),
        (["He parked the blue car near the station.", "They painted the kitchen walls bright yellow."],
         "My sister plays the violin in an orchestra.", ["sister", "violin", "orchestra"]),
    ]
    for earlier, last, words in cases:
        clip, spans = speech_clip([*earlier, last], gap_s=0.9, sample_rate=SAMPLE_RATE)
        audio = clip.astype(np.float32) / 32768.0
        context = tuple(Segment(start, end, text) for (start, end), text in zip(spans, earlier, strict=False))
        request = TranscribeRequest(audio, language="en", beam_size=5, context=context)
        (forced,) = whisper.run_batch([request])
        assert forced.context_forced
        assert content_share(forced.text, words) >= 2 / 3, forced.text
        earlier_words = {w.strip(".,").lower() for text in earlier for w in text.split() if len(w) > 4}
        assert not earlier_words & {w.strip(".,").lower() for w in forced.text.split()}, forced.text
        assert all(s.start >= context[-1].end - 0.1 for s in forced.segments), forced.segments
        # without the context forced, the same audio's text covers the earlier sentences too
        (whole,) = whisper.run_batch([TranscribeRequest(audio, language="en", beam_size=5)])
        assert not whole.context_forced and len(whole.text.split()) > len(forced.text.split())
