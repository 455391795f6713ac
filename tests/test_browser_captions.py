"""Live captions in a real browser: Chromium's fake microphone plays a Piper sentence (looped) into the
/captions page of a real server, and the caption text shows up on the page."""

from __future__ import annotations

import numpy as np
import pytest

from tests.browser import chromium_page, requires_chromium, serve
from tests.speech import content_share, synthesize, write_wav

pytestmark = [pytest.mark.real_model, *requires_chromium]
pytest.importorskip("playwright.sync_api")

SENTENCE = "Please remember to bring your umbrella tomorrow morning."
WORDS = ["remember", "bring", "umbrella", "tomorrow", "morning"]  # most of them, whichever Whisper gets on this CPU


def test_captions_appear_on_the_page(tmp_path):
    speech = synthesize(SENTENCE, 48000)
    pause = np.zeros(48000, dtype=np.int16)
    wav = write_wav(tmp_path / "speech.wav", np.concatenate([pause, speech, pause]), 48000)
    with serve(tmp_path, "--preload", "vad,asr") as served, chromium_page(served, tmp_path, audio_file=wav) as b:
        b.open("/captions")
        b.page.click("#connect")
        b.wait_js("connect", "document.querySelector('#connection-state').textContent.trim() === 'connected'",
                  20_000)
        b.wait_js("a final caption in the transcript",
                  "[...document.querySelectorAll('#transcript li.final')]"
                  ".some(li => /umbrella|remember|tomorrow/i.test(li.textContent))", 45_000)
        text = b.page.inner_text("#transcript").lower()
        assert content_share(text, WORDS) >= 0.6, b.diagnose("caption words")
        assert b.page.inner_text("#caption-language").strip() == "en", b.diagnose("language shown")
        latency = b.page.get_attribute("#caption-latency", "data-ms")
        assert latency is not None and 0 <= int(latency) < 30000, b.diagnose("latency shown")
        overlay = b.page.inner_text("#caption-overlay").lower()
        assert overlay.strip() == "" or content_share(overlay, WORDS) > 0, b.diagnose("overlay")
        assert not b.page_errors(), b.diagnose("no page errors")
