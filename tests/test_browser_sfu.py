"""SFU rooms in real browsers: the call page's Janus client (static/js/call/sfu.js, janus.js) and webinar roles
(static/js/call/webinar.js) against a real Janus (tests/janus.py) and a real rtc-agent server with scripted engines.

1. A webinar: a speaker page and a listener page (the pre-join "Join as: Listener", hearing Spanish) plus 21 aiortc
   listeners. Both pages show the count ("22 listening") and no tile per listener, the listener not even its own;
   the listener decodes the speaker's video through Janus, raises a hand that reaches the speaker's page, plays
   rtc-agent's ``interpreter-es`` feed (inbound audio bytes and energy growing on its subscriber connection) with
   the speaker's voice ducked under it, and, its Janus connection dropped, joins again by itself.
2. A 10-person video room: 3 Chromium pages (fake camera .y4m, fake microphone .wav) and 7 aiortc speakers that
   publish audio and video to Janus with the token rtc-agent gave them. Every page decodes every video tile (width
   > 0, frames and decoded frames advancing) and shows every speaker's captions under the right tile: each speaker
   sends its own tone, and the scripted recognizer names the speaker whose tone it hears, so a caption under the
   wrong tile (or none) fails.

Janus runs without an ``api_secret`` here: browsers talk to it directly, and an API secret would have to reach
them (the rooms are private and every join needs its participant's token instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtc_agent.apps.interpret import deliverable
from rtc_agent.engines.asr import TranscribeRequest
from rtc_agent.rtc.client import ClientPeer
from tests.background_server import BackgroundServer
from tests.browser import BrowserPage, Served, launch_page, requires_chromium, write_wav
from tests.fakes import ScriptedASR, ScriptedMT, ScriptedTTS, ScriptedVAD, loud_above, register
from tests.janus import Janus, requires_janus, run_janus
from tests.sfu_speakers import JanusSpeaker, bursts

pytestmark = [*requires_chromium, requires_janus,
              pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg missing")]
pytest.importorskip("playwright.sync_api")

LISTENERS = 22  # the listener page and 21 aiortc listeners: past the 20 the server lists one by one
DEADLINE_MS = 90_000  # generous: 2 cores shared with other work; tests wait for properties, never for moments
RATE = 48_000
# the speakers of the 10-person room and the tone each one speaks in (Hz): the scripted recognizer names them
PAGE_SPEAKERS = [("Ann", 300), ("Ben", 380), ("Cho", 460)]
PEER_SPEAKERS = [("Dee", 540), ("Eli", 620), ("Fay", 700), ("Gus", 780), ("Hal", 860), ("Ida", 940), ("Jon", 1020)]
FREQUENCIES = dict(PAGE_SPEAKERS + PEER_SPEAKERS)


def heard(request: TranscribeRequest) -> str:
    """The scripted recognizer: "voice of NAME" for the speaker whose tone dominates the audio."""
    audio = np.asarray(request.audio, dtype=np.float64)
    if audio.size < 1600:
        return ""
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(audio.size)))
    peak = float(np.fft.rfftfreq(audio.size, 1 / 16000)[int(np.argmax(spectrum))])
    name, freq = min(FREQUENCIES.items(), key=lambda item: abs(item[1] - peak))
    return f"voice of {name}" if abs(freq - peak) < 30 else "unknown voice"


class ToneTTS(ScriptedTTS):
    """The scripted synthesizer, saying each text as a 600 Hz tone (audible energy through Opus)."""

    def run_batch(self, requests: list[Any]) -> list[Any]:
        out = super().run_batch(requests)
        for i, result in enumerate(out):
            if hasattr(result, "pcm"):
                t = np.arange(result.pcm.size) / result.sample_rate
                out[i] = dataclasses.replace(result, pcm=(8000 * np.sin(2 * np.pi * 600 * t)).astype(np.int16))
        return out


def scripted_worker(_settings: Any) -> Any:
    from rtc_agent.worker import Worker

    worker = Worker()
    register(worker, "vad", ScriptedVAD(loud_above(0.05)), max_queue=1024)
    register(worker, "asr", ScriptedASR(heard), max_queue=1024)
    register(worker, "mt", ScriptedMT())
    register(worker, "tts", ToneTTS(seconds=lambda text: 1.5))
    return worker


@pytest.fixture(scope="module")
def janus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Janus]:
    with run_janus(Path(tmp_path_factory.mktemp("janus")), with_api_secret=False) as server:
        yield server


@pytest.fixture
def server(janus: Janus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BackgroundServer]:
    # a voice for every language on the scripted synthesizer, so a listener may hear Spanish
    monkeypatch.setattr(deliverable, "_voice_for", lambda settings, language: {"engine": "tts", "voice": "v"})
    with BackgroundServer(make_worker=scripted_worker, sfu_url=janus.ws_url, mt_engine="auto",
                          max_sessions=32) as srv:
        yield srv


def media_files(tmp_path: Path, name: str, freq: float, pattern: str = "testsrc2") -> tuple[Path, Path]:
    """A fake microphone (``freq`` Hz bursts between silences) and a fake camera (320x240, 10 fps) for Chromium."""
    wav = write_wav(tmp_path / f"{name}.wav", bursts(freq, count=4) / 32767.0, RATE)
    y4m = tmp_path / f"{name}.y4m"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"{pattern}=size=320x240:rate=10",
                    "-t", "2", "-pix_fmt", "yuv420p", str(y4m)], check=True)
    return wav, y4m


def served(srv: BackgroundServer, tmp_path: Path) -> Served:
    log = tmp_path / "server.log"
    log.write_text("(in-process server: its log is pytest's captured log)\n")
    return Served(srv.url, log, None)  # type: ignore[arg-type]


def join(b: BrowserPage, path: str, role: str | None = None) -> None:
    """Open ``path`` and join from the pre-join form (choosing "Join as" ``role`` when given)."""
    b.open(path)
    if role is not None:
        b.step("choose the role", lambda: b.page.select_option("#call-role", role))
    b.step("join", lambda: b.page.click("#join"))
    b.wait_js("joined the SFU room", "window.rtcAgent.app.participantId() !== null"
              " && document.body.dataset.roomMode === 'sfu'", DEADLINE_MS)


def tiles(b: BrowserPage) -> list[dict[str, Any]]:
    return b.page.evaluate("window.rtcAgent.app.stats()")


def webinar(b: BrowserPage) -> dict[str, Any]:
    return b.page.evaluate("window.rtcAgent.app.webinar.snapshot()")


def test_webinar_listener_count_hand_and_interpretation(server: BackgroundServer, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    room = "webinar-page"
    wav, y4m = media_files(tmp_path, "speaker", 440)
    site = served(server, tmp_path)
    aiortc_listeners = [ClientPeer(server.url, "call", receive_audio=False, config={
        "room": room, "mode": "sfu", "role": "listener", "name": f"L{i}", "language": "en",
        "listen_language": "en"}) for i in range(LISTENERS - 1)]
    with sync_playwright() as pw:
        browsers = []
        try:
            browser, speaker = launch_page(pw, site, tmp_path, audio_file=wav, video_file=y4m)
            browsers.append(browser)
            join(speaker, f"/call?room={room}&mode=sfu&name=Sam&speak=en&hear=en")
            browser, listener = launch_page(pw, site, tmp_path, audio_file=wav, video_file=y4m)
            browsers.append(browser)
            join(listener, f"/call?room={room}&name=Lou&speak=en&hear=es", role="listener")  # the pre-join choice
            async def all_listen() -> None:  # past 20 listeners only their count travels
                pending = asyncio.Semaphore(3)  # a client may hold 4 sessions not connected yet

                async def listen(peer: ClientPeer) -> None:
                    async with pending:
                        await peer.connect()
                        await peer.wait_for("room.joined", timeout=DEADLINE_MS / 1000)

                await asyncio.gather(*(listen(peer) for peer in aiortc_listeners))

            server.run(all_listen(), timeout=DEADLINE_MS / 1000)

            # the count on both pages; the listener has no tile of its own, the speaker no tile per listener
            for b in (speaker, listener):
                b.wait_js(f"{LISTENERS} listening", "document.getElementById('listener-count').textContent"
                          f" === '{LISTENERS} listening'", DEADLINE_MS)
            state = webinar(listener)
            assert state["role"] == "listener" and state["selfTileHidden"], listener.diagnose(f"listener: {state}")
            assert listener.page.is_hidden("#tile-self") and listener.page.is_visible("#raise-hand")
            listener.wait_js("no camera or microphone open",
                             "!window.rtcAgent.devices.audioTrack && !window.rtcAgent.devices.videoTrack", 20_000)
            assert webinar(speaker)["role"] == "speaker" and speaker.page.is_visible("#tile-self")
            assert tiles(speaker) == [], speaker.diagnose("no listener is a tile")
            assert speaker.page.locator("#tiles .tile").count() == 1

            # the listener watches the speaker through Janus
            listener.wait_value("the speaker's video decoded",
                                "window.rtcAgent.app.stats().then(s => s.length === 1 && s[0].name === 'Sam'"
                                " && s[0].videoWidth > 0 && s[0].framesDecoded > 5)", DEADLINE_MS)

            # a raised hand reaches the speaker's page; lowered, it goes
            listener.step("raise hand", lambda: listener.page.click("#raise-hand"))
            speaker.wait_js("Lou's hand on the speaker's page",
                            "[...document.querySelectorAll('#raised-hands li')].some(li => li.textContent === 'Lou')",
                            DEADLINE_MS)
            listener.wait_js("my hand shown raised",
                             "document.getElementById('raise-hand').getAttribute('aria-pressed') === 'true'", 20_000)
            listener.step("lower hand", lambda: listener.page.click("#raise-hand"))
            speaker.wait_js("the hand lowered", "document.querySelectorAll('#raised-hands li').length === 0",
                            DEADLINE_MS)

            # the listener plays rtc-agent's Spanish interpreter feed (the speaker's captions, interpreted)
            listener.wait_value("the interpreter-es feed playing", "window.rtcAgent.app.webinar.snapshot().then(s =>"
                                " s.interpretation && s.interpretation.language === 'es' && s.interpretationPlaying"
                                " && s.interpretation.audioEnergy > 0)", DEADLINE_MS)
            before = webinar(listener)["interpretation"]
            listener.wait_value("interpretation audio keeps arriving",
                                "window.rtcAgent.app.webinar.snapshot().then(s =>"
                                f" s.interpretation.audioBytes > {before['audioBytes']})", 30_000)
            assert "interpreter-es" in webinar(listener)["feeds"], listener.diagnose("the interpreter feed")
            listener.wait_value("the speaker's voice ducked under its interpretation", "window.rtcAgent.app.stats()"
                                ".then(s => s[0].ducked && s[0].volume < 1)", DEADLINE_MS)

            # the connection to Janus drops: the page joins the Janus room again by itself, video and all
            listener.page.evaluate("window.rtcAgent.app.webinar.media.session.ws.close()")
            listener.wait_value("joined Janus again", "window.rtcAgent.app.webinar.snapshot().then(s =>"
                                " s.sfuJoins === 2 && s.interpretation.language === 'es')", DEADLINE_MS)
            decoded = tiles(listener)[0]["framesDecoded"]
            listener.wait_value("the speaker's video back", "window.rtcAgent.app.stats().then(s => s.length === 1"
                                f" && s[0].framesDecoded > {decoded} + 5)", DEADLINE_MS)
            assert not speaker.page_errors() and not listener.page_errors(), speaker.console + listener.console
        finally:
            for peer in aiortc_listeners:
                with contextlib.suppress(Exception):
                    server.run(peer.close())
            for browser in browsers:
                browser.close()


def test_ten_person_video_room_through_janus(server: BackgroundServer, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    room = "ten-people"
    site = served(server, tmp_path)
    patterns = ["testsrc2", "smptebars", "rgbtestsrc"]
    files = [media_files(tmp_path, name, freq, pattern)
             for (name, freq), pattern in zip(PAGE_SPEAKERS, patterns, strict=True)]
    peers = [JanusSpeaker(server.url, room, name, freq) for name, freq in PEER_SPEAKERS]
    with sync_playwright() as pw:
        browsers, pages = [], []
        try:
            for (name, _), (wav, y4m) in zip(PAGE_SPEAKERS, files, strict=True):
                browser, b = launch_page(pw, site, tmp_path, audio_file=wav, video_file=y4m)
                browsers.append(browser)
                pages.append(b)
                join(b, f"/call?room={room}&mode=sfu&name={name}&speak=en&hear=en")
            for peer in peers:
                server.run(peer.start(), timeout=DEADLINE_MS / 1000)
            names = {name for name, _ in PAGE_SPEAKERS + PEER_SPEAKERS}
            for b, (name, _) in zip(pages, PAGE_SPEAKERS, strict=True):
                # a JS string literal of the JSON list, spelled as JSON.stringify spells it (no spaces)
                others = json.dumps(json.dumps(sorted(names - {name}), separators=(",", ":")))
                try:
                    b.wait_value("every other speaker's video decoding", "window.rtcAgent.app.stats().then(s =>"
                                 f" s.length === 9 && JSON.stringify(s.map(t => t.name).sort()) === {others}"
                                 " && s.every(t => t.videoWidth > 0 && t.framesDecoded > 5"
                                 " && t.frames > 5))", DEADLINE_MS)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}\ntiles: {tiles(b)}") from None
            first = [{t["id"]: t for t in tiles(b)} for b in pages]
            time.sleep(2.0)
            for b, before in zip(pages, first, strict=True):
                for after in tiles(b):
                    was = before[after["id"]]
                    assert after["frames"] > was["frames"] and after["framesDecoded"] > was["framesDecoded"], \
                        b.diagnose(f"{after['name']}'s video advancing: {was} -> {after}")
                    assert not after["paused"], b.diagnose(f"{after['name']}'s tile playing")
            for b in pages:
                b.wait_js("every speaker's captions under its own tile",
                          "[...document.querySelectorAll('.tile.remote')].length === 9 && "
                          "[...document.querySelectorAll('.tile.remote')].every(t => t.querySelector('.tile-caption')"
                          ".textContent.includes('voice of ' + t.querySelector('.name').textContent))", DEADLINE_MS)
                wrong = b.page.evaluate(
                    "[...document.querySelectorAll('.tile.remote')].filter(t => /voice of (\\w+)/.test("
                    "t.querySelector('.tile-caption').textContent) && !t.querySelector('.tile-caption').textContent"
                    ".includes('voice of ' + t.querySelector('.name').textContent)).length")
                assert wrong == 0, b.diagnose("a caption under another speaker's tile")
                assert not b.page_errors(), b.console
        finally:
            for peer in peers:
                with contextlib.suppress(Exception):
                    server.run(peer.close())
            for browser in browsers:
                browser.close()
