"""The embedded Piper TTS engine with the real packaged joe voice (no mocks)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

from rtc_agent.config import Settings, SettingsError
from rtc_agent.engines.tts import PiperEngine, SpeechSynthesizer, Synthesis, SynthesisRequest, engine_spec
from rtc_agent.errors import EngineError
from rtc_agent.worker import Worker
from tests.speech import speech_extent

pytestmark = pytest.mark.real_model  # loads real models: .ci/run runs these under cpu-profile avx2 too

SENTENCE = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def engine() -> Iterator[PiperEngine]:
    engine = PiperEngine()
    messages: list[str] = []
    engine.load(messages.append)
    assert any("loading Piper voice en_US-joe-medium" in m for m in messages)
    assert any("warmed up" in m for m in messages)
    yield engine
    engine.close()


def one(engine: PiperEngine, request: SynthesisRequest) -> Synthesis:
    [result] = engine.run_batch([request])
    assert isinstance(result, Synthesis), result
    return result


def test_speaks_audible_speech_of_plausible_duration(engine: PiperEngine) -> None:
    result = one(engine, SynthesisRequest(SENTENCE))
    assert engine.sample_rate == result.sample_rate == 22050
    assert result.pcm.dtype == np.int16 and result.pcm.ndim == 1 and result.pcm.flags.c_contiguous
    assert result.text == SENTENCE and result.voice == "en_US-joe-medium" and result.speed == 1.0
    # 9 words, 11 syllables: a natural reading takes 2-4 s
    assert 1.8 < result.duration_s < 4.5, result.duration_s
    x = result.float32()
    assert np.sqrt(np.mean(x**2)) > 0.05  # clearly audible
    assert np.abs(x).max() <= 0.9 + 1e-3  # volume leaves headroom for resampling
    start, end = speech_extent(result.pcm, result.sample_rate)
    assert (end - start) / result.pcm.size > 0.6  # mostly speech, not silence
    # nothing trimmed: the voice's own lead-in and trailing pause are there
    assert start > 0 and end < result.pcm.size
    assert result.compute_s > 0 and result.rtf < 1.0


def test_speed_changes_duration(engine: PiperEngine) -> None:
    slow, normal, fast = (one(engine, SynthesisRequest(SENTENCE, speed=s)) for s in (0.7, 1.0, 1.5))
    assert slow.duration_s > normal.duration_s > fast.duration_s
    assert slow.duration_s / fast.duration_s > 1.6  # ideal 2.14; Piper's duration noise is small
    assert fast.speed == 1.5


def test_base_speed_multiplies_request_speed(engine: PiperEngine) -> None:
    engine.speed = 2.0
    try:
        result = one(engine, SynthesisRequest(SENTENCE, speed=1.5))
    finally:
        engine.speed = 1.0
    assert result.speed == 3.0
    assert result.duration_s < 1.6


def test_empty_text_is_a_clear_per_request_error(engine: PiperEngine) -> None:
    results = engine.run_batch([SynthesisRequest(""), SynthesisRequest("  \n"), SynthesisRequest("!?"),
                                SynthesisRequest("Fine.")])
    for bad in results[:3]:
        assert isinstance(bad, EngineError)
        assert bad.code == "empty_text" and bad.status == 400
        assert "nothing to synthesize" in bad.message
    assert isinstance(results[3], Synthesis) and results[3].duration_s > 0.2


def test_other_request_errors(engine: PiperEngine) -> None:
    engine.max_chars = 20
    try:
        [too_long] = engine.run_batch([SynthesisRequest("This sentence is longer than twenty characters.")])
    finally:
        engine.max_chars = PiperEngine().max_chars
    assert isinstance(too_long, EngineError) and too_long.code == "text_too_long"
    [unknown] = engine.run_batch([SynthesisRequest("Hello.", voice="alloy")])
    assert isinstance(unknown, EngineError) and unknown.code == "unknown_voice"
    assert "en_US-joe-medium" in unknown.message
    assert one(engine, SynthesisRequest("Hello.", voice="joe")).duration_s > 0.2
    [wrong_type] = engine.run_batch(["Hello."])  # type: ignore[list-item]
    assert isinstance(wrong_type, TypeError)
    with pytest.raises(ValueError, match="speed"):
        SynthesisRequest("Hello.", speed=0)
    with pytest.raises(RuntimeError, match="load"):
        PiperEngine().synthesize(SynthesisRequest("Hello."))


def test_several_sentences_in_one_request(engine: PiperEngine) -> None:
    one_sentence = one(engine, SynthesisRequest("I am here."))
    two = one(engine, SynthesisRequest("I am here. You are there."))
    assert two.extra["sentences"] == 2
    assert two.duration_s > one_sentence.duration_s * 1.5


class Shared:
    """The module's loaded engine for a worker that must not close it."""

    def __init__(self, engine: PiperEngine) -> None:
        self.engine = engine

    def load(self, progress: object) -> None:
        assert self.engine.loaded

    def run_batch(self, requests: list[SynthesisRequest]) -> list[object]:
        return self.engine.run_batch(requests)  # type: ignore[return-value]


async def test_through_the_worker(engine: PiperEngine) -> None:
    spec = engine_spec(Settings())  # what the server registers: same scheduling, shared loaded voice
    worker = Worker()
    worker.add(dataclasses.replace(spec, factory=lambda: Shared(engine)))
    try:
        tts = SpeechSynthesizer(worker)
        result = await tts.synthesize("Sure, one moment.")
        assert result.sample_rate == 22050 and result.duration_s > 0.5
        with pytest.raises(EngineError) as caught:
            await tts.synthesize("   ")
        assert caught.value.code == "empty_text"
        clauses = [s async for s in tts.stream("Hello there. The answer is 3.5 meters, roughly.")]
        assert [s.text for s in clauses] == ["Hello there.", "The answer is 3.5 meters, roughly."]
        assert all(s.duration_s > 0.3 for s in clauses)
        assert worker.stats()["tts"]["loaded"]
    finally:
        await worker.close()


def test_engine_spec_embedded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = engine_spec(Settings())
    assert spec.name == "tts" and spec.max_batch == 1 and spec.concurrency == 1
    assert isinstance(spec.factory(), PiperEngine)
    assert engine_spec(dataclasses.replace(Settings(), tts_engine="piper"), name="voice").name == "voice"
    with pytest.raises(SettingsError, match="no such Piper voice"):
        engine_spec(dataclasses.replace(Settings(), tts_model=str(tmp_path / "missing.onnx")))
    with pytest.raises(SettingsError, match="unknown tts_engine"):
        engine_spec(dataclasses.replace(Settings(), tts_engine="espeak"))
    with pytest.raises(SettingsError, match="tts_speed"):
        engine_spec(dataclasses.replace(Settings(), tts_speed=9.0))
