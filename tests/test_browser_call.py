"""A call in real browsers: two headless Chromium processes, each with its own fake microphone (a different Piper
sentence) and fake camera (a different .y4m), join one room from /call. Each page shows the other's video (frames
advancing in the remote <video>), plays its audio (energy arriving on the browser-to-browser connection) and shows
its captions under the right tile."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import time

import numpy as np
import pytest

from tests.browser import BrowserPage, launch_page, requires_chromium, serve
from tests.speech import synthesize, write_wav

pytestmark = [*requires_chromium, pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg missing")]
pytest.importorskip("playwright.sync_api")

# (name, sentence, video pattern, content words: any of them marks the caption as this person's; which ones
# Whisper gets differs between CPUs)
PEOPLE = [("Ann", "Please remember to bring your umbrella tomorrow morning.", "testsrc2", "umbrella|remember|tomorrow"),
          ("Ben", "The library opens at nine on Saturday.", "smptebars", "library|saturday|opens")]


def media(tmp_path, name: str, sentence: str, pattern: str):
    pause = np.zeros(48000, dtype=np.int16)
    wav = write_wav(tmp_path / f"{name}.wav", np.concatenate([pause, synthesize(sentence, 48000), pause]), 48000)
    y4m = tmp_path / f"{name}.y4m"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"{pattern}=size=320x240:rate=10",
                    "-t", "2", "-pix_fmt", "yuv420p", str(y4m)], check=True)
    return wav, y4m


def remote(b: BrowserPage) -> list[dict]:
    return b.page.evaluate("window.rtcAgent.app.stats()")


@pytest.mark.real_model
def test_two_pages_see_hear_and_read_each_other(tmp_path):
    from playwright.sync_api import sync_playwright

    files = [media(tmp_path, name, sentence, pattern) for name, sentence, pattern, _ in PEOPLE]
    with serve(tmp_path, "--preload", "vad,asr") as served, sync_playwright() as pw:
        browsers, pages = [], []
        try:
            for (name, *_), (wav, y4m) in zip(PEOPLE, files, strict=True):
                browser, b = launch_page(pw, served, tmp_path, audio_file=wav, video_file=y4m)
                browsers.append(browser)
                pages.append(b)
                b.open(f"/call?room=browser-room&name={name}&speak=en&hear=en")
                b.page.click("#join")
                b.wait_js("joined", "window.rtcAgent.app.participantId() !== null", 60_000)
            for b, (name, *_) in zip(pages, PEOPLE, strict=True):
                other = next(p for p in PEOPLE if p[0] != name)
                b.wait_js("the other's tile", f"[...document.querySelectorAll('.tile.remote .name')]"
                          f".some(n => n.textContent === '{other[0]}')", 15_000)
                b.wait_value("remote video playing",
                             "window.rtcAgent.app.stats().then(s => s.length === 1 && s[0].frames > 5"
                             " && s[0].framesDecoded > 5 && s[0].audioEnergy > 0)", 30_000)
            first = [remote(b)[0] for b in pages]
            time.sleep(1.5)
            for b, before in zip(pages, first, strict=True):
                after = next((t for t in remote(b) if t["id"] == before["id"]), None)
                assert after is not None, b.diagnose(f"the same participant still shown: {remote(b)}")
                assert after["frames"] > before["frames"], b.diagnose(f"frames advancing: {before} -> {after}")
                assert after.get("framesDecoded", 0) > before["framesDecoded"], b.diagnose(f"decoded: {after}")
                assert after.get("audioEnergy", 0) > before["audioEnergy"] and not after["paused"] \
                    and not after["muted"], b.diagnose(f"remote audio playing: {before} -> {after}")
                assert after["videoWidth"] == 320, b.diagnose("video size")
            for b, (name, *_) in zip(pages, PEOPLE, strict=True):
                other = next(p for p in PEOPLE if p[0] != name)
                b.wait_js(f"{other[0]}'s caption under its tile",
                          f"[...document.querySelectorAll('.tile.remote')].some(t => "
                          f"t.querySelector('.name').textContent === '{other[0]}' && "
                          f"/{other[3]}/i.test(t.querySelector('.tile-caption').textContent))", 60_000)
                own = b.page.inner_text("#tile-self .tile-caption").lower()
                assert not re.search(other[3], own), b.diagnose("captions under the right tiles")
                lines = b.page.inner_text("#room-transcript")
                assert other[0] in lines, b.diagnose("names in the room transcript")
                assert not b.page_errors(), b.diagnose("no page errors")
            pages[0].page.screenshot(path=str(tmp_path / "call.png"), full_page=True)  # kept for a look on failure
            pages[0].page.click("#leave")
            pages[1].wait_js("Ann marked as left", "[...document.querySelectorAll('.tile.remote')]"
                             ".every(t => t.dataset.presence === 'left')", 15_000)
            assert pages[0].page.evaluate("document.querySelectorAll('.tile.remote').length") == 0
            assert pages[0].page.inner_text("#tile-self .tile-caption").strip() == "", \
                pages[0].diagnose("my own tile shows nothing of the call once I left")
        finally:
            for browser in browsers:
                with contextlib.suppress(Exception):
                    browser.close()


def test_join_link_admits_a_page_without_sign_in(tmp_path):
    """With API keys, a page that was never signed in joins the room of a join link (POST /v1/rooms), and only
    that room: the link's token is exchanged for the page's own client token."""
    import json
    import urllib.request

    from tests.browser import chromium_page

    key = "call-test-key-0123456789"
    wav = write_wav(tmp_path / "quiet.wav", np.zeros(48000, dtype=np.int16), 48000)
    with serve(tmp_path, "--api-keys", key) as served:
        request = urllib.request.Request(f"{served.base}/v1/rooms", data=json.dumps({"room": "linked"}).encode(),
                                         headers={"Authorization": f"Bearer {key}",
                                                  "Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as res:
            link = json.load(res)
        with chromium_page(served, tmp_path, audio_file=wav) as b:
            b.open(link["url"])
            b.page.click("#join")
            b.wait_js("joined through the link", "window.rtcAgent.app.participantId() !== null", 60_000)
            assert b.page.inner_text("#room-name") == "linked", b.diagnose("room from the link")
            assert b.page.get_attribute("#room-input", "readonly") is not None, b.diagnose("a link fixes the room")
            b.page.click("#copy-link")
            b.wait_js("share link shown", "!document.getElementById('share-link').hidden", 15_000)
            assert b.page.input_value("#share-link").endswith(f"/call?room=linked#join={link['join_token']}")
            b.page.click("#leave")
            # the same link cannot open another room
            b.open(f"/call?room=elsewhere#join={link['join_token']}")
            b.page.click("#join")
            b.wait_js("refused", "document.body.dataset.connection === 'failed'", 60_000)
            banner = b.page.inner_text("#error-message")
            assert "another room" in banner, b.diagnose("scope refusal shown")
