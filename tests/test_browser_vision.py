"""Visual commentary in a real browser: Chromium's fake camera plays a generated .y4m into the /captions page,
and the scene describer's commentary shows up beside the captions."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.browser import chromium_page, gated_tone_wav, requires_chromium, serve

pytestmark = [*requires_chromium, pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg missing")]
pytest.importorskip("playwright.sync_api")


@pytest.mark.real_model
def test_commentary_appears_on_the_captions_page(tmp_path):
    y4m = tmp_path / "camera.y4m"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=10",
                    "-t", "3", "-pix_fmt", "yuv420p", str(y4m)], check=True)
    wav = gated_tone_wav(tmp_path / "mic.wav")
    with serve(tmp_path, "--video-fps", "2") as served, \
            chromium_page(served, tmp_path, audio_file=wav, video_file=y4m) as b:
        b.open("/captions")
        b.page.click("#connect")
        b.wait_js("connect", "document.querySelector('#connection-state').textContent.trim() === 'connected'",
                  20_000)
        b.wait_js("commentary shown",
                  "[...document.querySelectorAll('#commentary .round-text')].some(t => t.textContent.trim())",
                  30_000)
        text = b.page.inner_text("#commentary")
        assert len(text.strip()) > 5, b.diagnose("commentary text")
        b.page.fill("#vision-prompt", "What is in view?")
        b.page.press("#vision-prompt", "Enter")
        b.wait_js("prompt round", "[...document.querySelectorAll('#commentary .round-prompt')]"
                  ".some(p => p.textContent.includes('What is in view?'))", 15_000)
        assert not b.page_errors(), b.diagnose("no page errors")
