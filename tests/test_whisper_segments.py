"""How the Whisper engine turns timestamped tokens into segments (a fake tokenizer; no model)."""

from __future__ import annotations

from rtc_agent.engines.asr.whisper_tokens import LATE_SEGMENT_S, TIME_PRECISION, split_segments


class FakeTokenizer:
    eot = 50
    timestamp_begin = 100

    def decode(self, ids: list[int]) -> str:
        return "".join(f" w{i}" for i in ids)


def ts(seconds: float) -> int:
    return FakeTokenizer.timestamp_begin + round(seconds / TIME_PRECISION)


def test_segments_split_at_timestamps_and_the_last_one_ends_with_the_audio() -> None:
    tokens = [1, 2, ts(1.0), ts(1.0), 3, FakeTokenizer.eot]
    segments, _ = split_segments(FakeTokenizer(), tokens, 2.5)
    assert [(s.start, s.end, s.text) for s in segments] == [(0.0, 1.0, " w1 w2"), (1.0, 2.5, " w3")]


def test_a_segment_starting_at_the_end_of_the_audio_is_dropped() -> None:
    """Whisper repeats the sentence in the padding after short audio; that segment starts at the audio's end."""
    duration = 3.5
    late = duration - LATE_SEGMENT_S / 2
    tokens = [1, 2, 3, ts(late), ts(late), 1, 2, FakeTokenizer.eot]
    segments, _ = split_segments(FakeTokenizer(), tokens, duration)
    assert [s.text for s in segments] == [" w1 w2 w3"]
    # a segment that starts early enough to hold a word is kept
    early = duration - LATE_SEGMENT_S - 0.2
    tokens = [1, ts(early), ts(early), 4, FakeTokenizer.eot]
    assert [s.text for s in split_segments(FakeTokenizer(), tokens, duration)[0]] == [" w1", " w4"]


def test_decode_threads_share_the_cores_between_parallel_decodes(monkeypatch):
    import os

    from rtc_agent.config import Settings
    from rtc_agent.engines.asr import engine_spec
    from rtc_agent.engines.asr.whisper import PARALLEL_DECODES, decode_threads

    assert decode_threads(3) == 3  # configured
    for cores, each in ((1, 1), (2, 1), (4, 2), (16, 8)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=cores: set(range(n)), raising=False)
        assert decode_threads(0) == each
    spec = engine_spec(Settings())
    assert spec.concurrency == PARALLEL_DECODES == 2  # the worker runs as many batches as the engine decodes
    engine = spec.factory()
    assert engine.parallel == PARALLEL_DECODES
