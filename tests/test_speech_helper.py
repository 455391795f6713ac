"""The test speech helper (tests/speech.py): real Piper speech, cached on disk, clips with measured spans."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests import speech


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache folder and an empty in-memory cache for this test."""
    folder = tmp_path / "speech-cache"
    monkeypatch.setenv("RTC_AGENT_TEST_CACHE", str(folder))
    monkeypatch.setattr(speech, "_memory", type(speech._memory)())
    return folder


@pytest.mark.real_model
def test_synthesize_is_cached_on_disk(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "Caching makes the second run fast."
    first = speech.synthesize(text, 16000)
    files = list(private_cache.glob("*.wav"))
    assert len(files) == 1 and files[0].name.startswith("caching-makes-the-second-run-fast-")
    assert first.dtype == np.int16 and 1.2 < first.size / 16000 < 4.0

    # a fresh process (empty memory) reads the file back instead of synthesizing: the same samples
    real_engine = speech._get_engine
    monkeypatch.setattr(speech, "_memory", type(speech._memory)())
    monkeypatch.setattr(speech, "_get_engine", lambda: pytest.fail("synthesized instead of reading the cache"))
    assert np.array_equal(speech.synthesize(text, 16000), first)
    # other rates come from the same cached file
    at48 = speech.synthesize(text, 48000)
    assert abs(at48.size - 3 * first.size) <= 3 * 16
    assert len(list(private_cache.glob("*.wav"))) == 1

    # a corrupt cache file is synthesized again and replaced
    files[0].write_bytes(b"garbage")
    monkeypatch.setattr(speech, "_memory", type(speech._memory)())
    monkeypatch.setattr(speech, "_get_engine", real_engine)
    assert speech.synthesize(text, 16000).size > 16000
    assert files[0].read_bytes()[:4] == b"RIFF"


def test_cache_dir_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RTC_AGENT_TEST_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/x/cache")
    assert speech.cache_dir() == Path("/x/cache/rtc-agent-tests/speech")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert speech.cache_dir() == Path(os.path.expanduser("~/.cache/rtc-agent-tests/speech"))


def test_wav_round_trip(tmp_path: Path) -> None:
    pcm = (np.sin(np.arange(8000) / 5) * 10000).astype(np.int16)
    path = speech.write_wav(tmp_path / "sub" / "a.wav", pcm, 8000)
    back, rate = speech.read_wav(path)
    assert rate == 8000 and np.array_equal(back, pcm)


@pytest.mark.real_model
def test_speech_clip_spans_match_the_audio() -> None:
    sentences = ["Hello, can you hear me?", "What time is it in Tokyo?"]
    rate = 16000
    clip, spans = speech.speech_clip(sentences, gap_s=0.8, lead_s=0.5, tail_s=1.0, sample_rate=rate)
    assert clip.dtype == np.int16 and len(spans) == 2
    (s1, e1), (s2, e2) = spans
    assert s1 == pytest.approx(0.5, abs=1e-3)
    assert s2 - e1 == pytest.approx(0.8, abs=1e-3)
    assert clip.size / rate - e2 == pytest.approx(1.0, abs=1e-3)
    assert 0.8 < e1 - s1 < 2.5 and 0.8 < e2 - s2 < 2.5

    def level(a: float, b: float) -> float:
        part = clip[int(a * rate):int(b * rate)].astype(np.float64) / 32768
        return float(np.sqrt(np.mean(part**2))) if part.size else 0.0

    # speech inside the spans, silence outside (beyond the 20 ms fade kept around each sentence)
    assert level(s1, e1) > 0.05 and level(s2, e2) > 0.05
    assert level(0, s1 - 0.03) == 0.0
    assert level(e1 + 0.03, s2 - 0.03) == 0.0
    assert level(e2 + 0.03, clip.size / rate) == 0.0
    # the measured extent is the speech: the edges of each span are loud within 50 ms
    assert level(s1, s1 + 0.05) > 0.005 and level(e2 - 0.05, e2) > 0.005


@pytest.mark.real_model
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_speech_clip_agrees_with_silero_vad() -> None:
    """The spans are where a real VAD hears speech (what the captions and agent tests rely on)."""
    silero_vad = pytest.importorskip("silero_vad")
    import torch

    rate = 16000
    clip, spans = speech.speech_clip(["Hello, can you hear me?", "What time is it in Tokyo?"], gap_s=1.0,
                                     sample_rate=rate)
    model = silero_vad.load_silero_vad(onnx=True)
    # a VAD that ends speech after 400 ms of silence (an end-of-turn setting) hears one segment per sentence
    found = silero_vad.get_speech_timestamps(torch.from_numpy(clip.astype(np.float32) / 32768), model,
                                             sampling_rate=rate, min_silence_duration_ms=400,
                                             return_seconds=True)
    assert len(found) == 2
    for (start, end), segment in zip(spans, found, strict=True):
        assert segment["start"] == pytest.approx(start, abs=0.25)
        assert segment["end"] == pytest.approx(end, abs=0.25)


def test_speech_clip_errors() -> None:
    with pytest.raises(ValueError):
        speech.speech_clip([])
    with pytest.raises(ValueError):
        speech.speech_clip(["Hi."], gap_s=-1)
    with pytest.raises(ValueError):
        speech.synthesize("   ")
