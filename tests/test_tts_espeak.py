"""The espeak-ng catch-up voice (engines/tts/espeak.py): real speech from the Debian program, its errors, its
registration beside Kokoro (``tts_catchup_voice``), and which interpretation voices get it as their fallback."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rtc_agent.apps.interpret.speech import catchup_synthesizer
from rtc_agent.config import Settings, SettingsError
from rtc_agent.engines import tts
from rtc_agent.engines.assets import MissingAsset
from rtc_agent.engines.tts import EspeakEngine, SynthesisRequest
from rtc_agent.errors import EngineError
from rtc_agent.worker import EngineSpec, Worker
from tests.espeak import have_espeak

needs_espeak = pytest.mark.skipif(not have_espeak(), reason="espeak-ng is not installed")
SENTENCES = {"es": "El gobierno anunció ayer que el nuevo puente abrirá la próxima primavera.",
             "de": "Die Regierung hat gestern angekündigt, dass die neue Brücke im Frühjahr eröffnet.",
             "it": "Il governo ha annunciato ieri che il nuovo ponte aprirà la prossima primavera."}


@needs_espeak
def test_each_language_is_spoken_and_faster_speech_is_shorter() -> None:
    engine = EspeakEngine()
    engine.load(lambda message: None)
    for language, text in SENTENCES.items():
        normal, fast = engine.run_batch([SynthesisRequest(text=text, language=language),
                                         SynthesisRequest(text=text, language=language, speed=1.6)])
        assert normal.sample_rate == engine.sample_rate == 22050 and normal.extra["language"] == language
        assert 2.0 < normal.duration_s < 10.0  # a sentence of about 12 words
        assert np.abs(normal.pcm.astype(np.int32)).max() > 3000  # audible
        assert fast.duration_s < 0.8 * normal.duration_s and fast.speed == 1.6
        assert normal.compute_s < normal.duration_s / 5  # far faster than real time, on any CPU


@needs_espeak
def test_what_cannot_be_spoken_fails_that_request_only() -> None:
    engine = EspeakEngine()
    engine.load(lambda message: None)
    empty, unknown, fine = engine.run_batch([SynthesisRequest(text="...", language="es"),
                                             SynthesisRequest(text="hola", language="xx"),
                                             SynthesisRequest(text="hola", language="es-MX")])
    assert isinstance(empty, EngineError) and empty.code == "empty_text"
    assert isinstance(unknown, EngineError) and unknown.code == "unsupported_language"
    assert fine.duration_s > 0.2 and fine.voice == "es"
    with pytest.raises(MissingAsset, match="apt install espeak-ng"):
        EspeakEngine(executable="no-such-espeak").load(lambda message: None)


def test_registered_beside_kokoro_unless_the_setting_is_off() -> None:
    settings = dataclasses.replace(Settings(), tts_multilingual="kokoro")
    names = [spec.name for spec in tts.engine_specs(settings)]
    assert names == ["tts", "tts-kokoro", "tts-espeak"]
    [espeak] = [spec for spec in tts.engine_specs(settings) if spec.name == "tts-espeak"]
    assert espeak.nice == settings.tts_nice and not espeak.yields_to  # a late voice must not wait longer
    off = dataclasses.replace(settings, tts_catchup_voice="off")
    assert "tts-espeak" not in [spec.name for spec in tts.engine_specs(off)]
    without_kokoro = dataclasses.replace(Settings(), tts_multilingual="off")
    assert [spec.name for spec in tts.engine_specs(without_kokoro)] == ["tts"]
    with pytest.raises(SettingsError, match="tts_catchup_voice"):
        tts.engine_specs(dataclasses.replace(settings, tts_catchup_voice="piper"))


def test_only_a_kokoro_voice_gets_the_catch_up_voice() -> None:
    worker = Worker()
    for name in ("tts", "tts-kokoro", "tts-espeak"):
        worker.add(EngineSpec(name=name, factory=EspeakEngine))
    fallback = catchup_synthesizer(worker, "tts-kokoro", "es")
    assert fallback is not None and fallback.engine == "tts-espeak" and fallback.language == "es"
    assert catchup_synthesizer(worker, "tts", "en") is None  # Piper keeps up by itself
    assert catchup_synthesizer(worker, "tts-kokoro", "sw") is None  # no espeak voice listed for it
    bare = Worker()
    bare.add(EngineSpec(name="tts-kokoro", factory=EspeakEngine))
    assert catchup_synthesizer(bare, "tts-kokoro", "es") is None  # tts_catchup_voice off: nothing registered
