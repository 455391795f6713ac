"""End to end through a real browser: headless Chromium with a fake microphone (a WAV file) connects to the
echo app of a real `rtc-agent serve` process and must hear its own audio come back."""

from __future__ import annotations

import pytest

from tests.browser import chromium_page, gated_tone_wav, requires_chromium, serve

pytestmark = requires_chromium
pytest.importorskip("playwright.sync_api")


def test_echo_plays_microphone_back(tmp_path):
    wav = gated_tone_wav(tmp_path / "tone.wav")
    with serve(tmp_path) as served, chromium_page(served, tmp_path, audio_file=wav) as b:
        b.open("/echo")
        assert b.state() == "idle", b.diagnose("initial state")
        b.page.click("#connect")
        b.wait_js("connect", "document.querySelector('#connection-state').textContent.trim() === 'connected'",
                  20_000)
        assert b.page.inner_text("#session-id").strip() not in ("", "—"), b.diagnose("session id shown")
        b.wait_js("hear the echo (output peak > 0.02)",
                  "parseFloat(document.querySelector('#output-level').dataset.peak || '0') > 0.02", 15_000)
        peak = float(b.page.get_attribute("#output-level", "data-peak") or 0)
        assert 0.02 < peak <= 1.0, b.diagnose(f"peak {peak}")
        b.wait_js("rtt shown (heartbeat answered)", "document.querySelector('#rtt').dataset.last !== undefined",
                  5_000)
        b.page.click("#disconnect")
        b.wait_js("disconnect",
                  "document.querySelector('#connection-state').textContent.trim() === 'disconnected'", 10_000)
        assert not b.page_errors(), b.diagnose("no page errors")


def test_every_page_loads_its_modules(tmp_path):
    with serve(tmp_path) as served, chromium_page(served, tmp_path) as b:
        for path in ("/", "/captions", "/interpret", "/agent", "/echo"):
            b.step(f"load {path}", lambda p=path: b.page.goto(f"{served.base}{p}", wait_until="load"))
            if path != "/":
                b.wait_js(f"{path} ready", "document.body.dataset.ready === 'true'", 10_000)
                assert b.state() == "idle", b.diagnose(f"{path} initial state")
                module = b.page.evaluate("document.body.dataset.appModule")
                assert module == "mounted", b.diagnose(f"{path} app module")
        assert not b.page_errors(), b.diagnose("no page errors")
