"""Headless Chromium against a server with an API key: the page asks for the key, signs in with a same-origin
cookie, mints a client token per connection and connects; when the server ends the session the page says why
and offers Reconnect."""

from __future__ import annotations

import pytest

from tests.browser import chromium_page, gated_tone_wav, requires_chromium, serve

pytestmark = requires_chromium
pytest.importorskip("playwright.sync_api")

KEY = "browser-test-key-0123456789"


def test_sign_in_connect_and_see_why_the_session_ended(tmp_path):
    wav = gated_tone_wav(tmp_path / "tone.wav")
    with serve(tmp_path, "--api-keys", KEY, "--max-session-seconds", "4") as served, \
            chromium_page(served, tmp_path, audio_file=wav) as b:
        b.open("/echo")
        assert b.page.is_visible("#signin"), b.diagnose("sign-in card shown")
        assert b.page.is_disabled("#connect"), b.diagnose("connect waits for sign-in")
        b.page.fill("#signin-key", "not-the-key")
        b.page.click("#signin button[type=submit]")
        b.wait_js("refused", "document.body.dataset.ready === 'true' && !!document.querySelector('.signin-error')",
                  10_000)
        b.page.fill("#signin-key", KEY)
        b.page.click("#signin button[type=submit]")
        b.wait_js("signed in", "document.body.dataset.ready === 'true' && !document.querySelector('#signin')",
                  10_000)
        cookies = b.page.context.cookies()
        page_cookie = next(c for c in cookies if c["name"] == "rtc_agent_page")
        assert page_cookie["httpOnly"] and page_cookie["sameSite"] == "Strict", page_cookie
        assert KEY not in b.page.content()
        b.page.click("#connect")
        b.wait_js("connect", "document.querySelector('#connection-state').textContent.trim() === 'connected'",
                  20_000)
        b.wait_js("ended by max_duration", "document.body.dataset.endReason === 'max_duration'", 15_000)
        banner = b.page.inner_text("#error-message")
        assert "Session ended" in banner, b.diagnose(f"banner {banner!r}")
        b.wait_js("reconnect offered",
                  "!document.querySelector('#connect').disabled && "
                  "document.querySelector('#connect').textContent.trim() === 'Reconnect'", 10_000)
        assert not b.page_errors(), b.diagnose("no page errors")
