"""The call page as people use it, in headless Chromium against a real server whose engines are scripted
(tests.fakes: a detector that hears every loud window, a recognizer that hears ``SAID``, optionally slow):

- one mute state: each mute control (the call's Mute mic, the sidebar's Mute, Alt+M, push-to-talk) in each state
  agrees on every page of a 3-page room (both buttons' aria-pressed and label, the track, the server's
  participant, the other pages' tile "muted"); the camera the same;
- a killed participant (its page closed) is marked gone at once on the others, and its tile removed after the
  grace period (``room_tile_grace_s``);
- a reload rejoins by itself with the same name and keeps the transcript;
- the pre-join form: who is already in the room, keyboard order, Enter submits, one Join;
- a caption that comes late (a slow recognizer) shows its delay on the speaker's tile.

Every wait polls with a generous deadline (a loaded 2-core machine); the one timing bound (the gone mark within
3 s) is on an event-driven mark: the server's room.participant.left, not a timer.
"""

from __future__ import annotations

import contextlib
import logging
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtc_agent.config import Settings
from rtc_agent.server.keys import ROOMS
from rtc_agent.worker import Worker
from tests.background_server import BackgroundServer
from tests.browser import CHROMIUM, BrowserPage, Served, chromium_args, requires_chromium
from tests.fakes import ScriptedASR, ScriptedVAD, loud_above, register
from tests.speech import synthesize, write_wav

pytestmark = [*requires_chromium]
pytest.importorskip("playwright.sync_api")

SAID = "the morning report is ready"
GRACE_S = 4.0  # the server's room_tile_grace_s here: how long a gone tile stays
JOINED = ("window.rtcAgent && window.rtcAgent.app.participantId && window.rtcAgent.app.participantId() !== null"
          " && window.rtcAgent.client.state === 'connected' && window.rtcAgent.app.status.phase === 'connected'")
RECORD = """() => {
  window.__sent = [];
  window.__said = [];
  window.rtcAgent.client.addEventListener('sent', (e) => window.__sent.push(e.detail));
  const a = window.rtcAgent.app.announcer;
  const flush = a.flush.bind(a);
  a.flush = () => { const had = a._queue.length; flush(); if (had) window.__said.push(a.last); };
}"""
CONTROLS = """() => {
  const m = document.getElementById('mute-mic'), s = document.getElementById('mute');
  const c = document.getElementById('mute-camera'), t = document.getElementById('camera-toggle');
  const d = window.rtcAgent.devices;
  return {mic: m.getAttribute('aria-pressed'), side: s.getAttribute('aria-pressed'), micText: m.textContent,
          sideText: s.textContent, track: d.audioTrack && d.audioTrack.enabled, muted: window.rtcAgent.muted,
          cam: c.getAttribute('aria-pressed'), camSide: t.getAttribute('aria-pressed'), camText: c.textContent,
          camSideText: t.textContent, video: d.videoTrack && d.videoTrack.enabled};
}"""


@dataclass
class Room:
    """The module's server, its recognizer (a test may slow it) and two browsers (quiet and speaking)."""

    server: BackgroundServer
    served: Served
    asr: ScriptedASR
    quiet: Any
    speaking: Any
    shots: Path


def _worker(asr: ScriptedASR):
    def make(_settings: Settings) -> Worker:
        worker = Worker()
        register(worker, "vad", ScriptedVAD(loud_above(0.02)), max_queue=512)
        register(worker, "asr", asr, max_queue=64, concurrency=2)
        return worker

    return make


def _media(folder: Path) -> tuple[Path, Path, Path]:
    """A silent and a speaking fake microphone (SAID, then 2 s of silence, looped by Chromium), a small camera."""
    quiet = write_wav(folder / "quiet.wav", np.zeros(48000, dtype=np.int16), 48000)
    pause = np.zeros(96000, dtype=np.int16)
    speech = write_wav(folder / "speech.wav", np.concatenate([pause[:24000], synthesize(SAID, 48000), pause]), 48000)
    y4m = folder / "camera.y4m"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=5",
                    "-t", "2", "-pix_fmt", "yuv420p", str(y4m)], check=True)
    return quiet, speech, y4m


@pytest.fixture(scope="module")
def room(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Room]:
    import shutil

    from playwright.sync_api import sync_playwright

    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg missing")
    folder = tmp_path_factory.mktemp("call-room")
    quiet, speech, y4m = _media(folder)
    asr = ScriptedASR(lambda request: SAID)
    log_path = folder / "server.log"
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("rtc_agent").addHandler(handler)
    try:
        with BackgroundServer(make_worker=_worker(asr), room_tile_grace_s=GRACE_S) as server, \
                sync_playwright() as pw:
            browsers = [pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                           args=chromium_args(audio_file=wav, video_file=y4m))
                        for wav in (quiet, speech)]
            try:
                yield Room(server, Served(server.url, log_path, None), asr, *browsers, folder)
            finally:
                for browser in browsers:
                    with contextlib.suppress(Exception):
                        browser.close()
    finally:
        logging.getLogger("rtc_agent").removeHandler(handler)
        handler.close()


@contextlib.contextmanager
def pages(room: Room, *kinds: str) -> Iterator[list[BrowserPage]]:
    """One page per kind ("quiet" / "speaking"), each in its own browser context (its own storage)."""
    contexts, out = [], []
    try:
        for kind in kinds:
            context = (room.speaking if kind == "speaking" else room.quiet).new_context()
            contexts.append(context)
            page = context.new_page()
            wrapped = BrowserPage(page, room.served, room.shots)
            page.on("console", lambda m, w=wrapped: w.console.append(f"[{m.type}] {m.text}"))
            page.on("pageerror", lambda e, w=wrapped: w.console.append(f"[pageerror] {e}"))
            out.append(wrapped)
        yield out
    finally:
        for context in contexts:
            with contextlib.suppress(Exception):
                context.close()


def join(b: BrowserPage, room_name: str, name: str) -> str:
    """Open the room's page as `name`, press Join, wait until in the call; the participant id."""
    b.open(f"/call?room={room_name}&name={name}&speak=en&hear=en")
    b.page.click("#join")
    b.wait_js(f"{name} joined", JOINED, 60_000)
    b.page.evaluate(RECORD)
    return b.page.evaluate("window.rtcAgent.app.participantId()")


def see_everyone(people: list[BrowserPage], ids: list[str]) -> None:
    for b, me in zip(people, ids, strict=True):
        others = [i for i in ids if i != me]
        b.wait_value("every other participant's tile",
                     f"window.rtcAgent.app.stats().then(s => {others!r}.every(id => s.some(t => t.id === id"
                     " && t.presence === 'here')))", 30_000)


def participant(room: Room, room_name: str, pid: str) -> Any:
    return room.server.call(lambda: room.server.app[ROOMS].rooms[room_name].participants[pid])


def expect_mute(room: Room, room_name: str, people: list[BrowserPage], ids: list[str], actor: int, muted: bool,
                how: str) -> None:
    """Every view of `actor`'s microphone says `muted`."""
    b = people[actor]
    state = "true" if muted else "false"
    b.wait_js(f"{how}: both controls {state}", "document.getElementById('mute-mic').getAttribute('aria-pressed')"
              f" === '{state}' && document.getElementById('mute').getAttribute('aria-pressed') === '{state}'", 10_000)
    seen = b.page.evaluate(CONTROLS)
    label = "Unmute mic" if muted else "Mute mic"
    assert seen["micText"] == seen["sideText"] == label, b.diagnose(f"{how}: one label {seen}")
    assert seen["track"] is (not muted) and seen["muted"] is muted, b.diagnose(f"{how}: the track {seen}")
    deadline = time.monotonic() + 15
    while participant(room, room_name, ids[actor]).mic_muted is not muted:
        assert time.monotonic() < deadline, b.diagnose(f"{how}: the server's participant mic_muted={muted}")
        time.sleep(0.1)
    flag = "true" if muted else "false"
    for other in (p for i, p in enumerate(people) if i != actor):
        other.wait_value(f"{how}: the others' tile says muted={muted}",
                         f"window.rtcAgent.app.stats().then(s => s.some(t => t.id === '{ids[actor]}' && "
                         f"t.micMuted === {flag} && /\\bmuted\\b/.test(t.flags) === {flag}))", 15_000)


def test_one_mute_state_on_every_control_and_every_page(room: Room):
    room_name = "mute-matrix"
    with pages(room, "quiet", "quiet", "quiet") as people:
        ids = [join(b, room_name, name) for b, name in zip(people, ("Ann", "Ben", "Cy"), strict=True)]
        see_everyone(people, ids)
        assert not any(participant(room, room_name, pid).mic_muted for pid in ids)

        def alt_m(b: BrowserPage) -> None:
            b.page.locator("#tiles").click()  # focus in the page, outside any field
            b.page.keyboard.press("Alt+m")

        controls = [("Mute mic", lambda b: b.page.click("#mute-mic")),
                    ("sidebar Mute", lambda b: b.page.click("#mute")), ("Alt+M", alt_m)]
        for i, (how, act) in enumerate(controls):
            actor = i % 3
            for muted in (True, False):
                act(people[actor])
                expect_mute(room, room_name, people, ids, actor, muted, f"{how} -> {muted}")
        # one state: muted by one control, unmuted by another
        alt_m(people[1])
        expect_mute(room, room_name, people, ids, 1, True, "Alt+M mutes")
        people[1].page.click("#mute-mic")
        expect_mute(room, room_name, people, ids, 1, False, "Mute mic unmutes what Alt+M muted")

        # push-to-talk: muted while the box is checked, open while Space is held
        b = people[2]
        b.page.check("#push-to-talk")
        expect_mute(room, room_name, people, ids, 2, True, "push-to-talk on")
        b.page.evaluate("document.activeElement.blur()")
        b.page.keyboard.down("Space")
        expect_mute(room, room_name, people, ids, 2, False, "Space held")
        b.page.keyboard.up("Space")
        expect_mute(room, room_name, people, ids, 2, True, "Space released")
        b.page.uncheck("#push-to-talk")
        expect_mute(room, room_name, people, ids, 2, False, "push-to-talk off")

        # the camera: both controls, the track, the server, the others' tiles
        for how, selector, off in (("Camera off", "#mute-camera", True), ("sidebar camera", "#camera-toggle", False)):
            people[0].page.click(selector)
            flag = "true" if off else "false"
            people[0].wait_js(f"{how}: both camera controls", "document.getElementById('mute-camera')"
                              f".getAttribute('aria-pressed') === '{flag}' && document.getElementById('camera-toggle')"
                              f".getAttribute('aria-pressed') === '{flag}'", 10_000)
            assert people[0].page.evaluate(CONTROLS)["video"] is (not off)
            for other in people[1:]:
                other.wait_js(f"{how}: the others' tile", "[...document.querySelectorAll('.tile.remote')].some(t => "
                              f"t.dataset.participantId === '{ids[0]}' && t.dataset.cameraMuted === '{flag}')", 15_000)
            assert participant(room, room_name, ids[0]).camera_muted is off

        for b in people:  # both ways to the server, every time
            sent = b.page.evaluate("window.__sent")
            assert any(e["type"] == "input_audio.muted" for e in sent), b.diagnose(f"input_audio.muted sent: {sent}")
            assert any(e["type"] == "session.update" and "mic_muted" in e.get("session", {}) for e in sent), \
                b.diagnose("session.update {mic_muted} sent")
        said = people[0].page.evaluate("window.__said")
        assert any("Ben muted their microphone" in s for s in said), people[0].diagnose(f"announced once: {said}")
        assert sum(s.count("Ben muted their microphone") for s in said) == 2, people[0].diagnose(f"twice: {said}")
        # one live region: no tile caption or transcript announces by itself
        assert people[0].page.evaluate("document.querySelectorAll('.tile-caption[aria-live], "
                                       "#room-transcript[aria-live]').length") == 0
        assert not any(b.page_errors() for b in people), people[0].diagnose("no page errors")


def test_a_closed_page_is_marked_gone_at_once_and_removed_after_the_grace(room: Room):
    room_name = "gone-room"
    with pages(room, "quiet", "quiet", "quiet") as people:
        ids = [join(b, room_name, name) for b, name in zip(people, ("Ann", "Ben", "Cy"), strict=True)]
        see_everyone(people, ids)
        for b in people[:2]:
            b.page.evaluate("() => { window.__left = null; window.rtcAgent.client.on('room.participant.left', "
                            "() => { window.__left = Date.now(); }); }")
        closed_at = time.time()
        people[2].page.close()
        marks = []
        for b in people[:2]:
            b.wait_value("Cy marked gone", f"window.rtcAgent.app.stats().then(s => s.some(t => t.id === '{ids[2]}'"
                         " && (t.presence === 'left' || t.presence === 'lost')))", 20_000)
            mark = b.page.evaluate(f"""() => {{
              const t = document.querySelector('.tile.remote[data-participant-id="{ids[2]}"]');
              return {{presence: t.dataset.presence, status: t.querySelector('.tile-status').textContent,
                       markedAt: performance.timeOrigin + Number(t.dataset.goneAt), leftEventAt: window.__left,
                       count: document.getElementById('room-count').textContent}};
            }}""")
            marks.append(mark)
            assert mark["status"] in ("left", "connection lost"), b.diagnose(f"the mark's words: {mark}")
            assert mark["count"] == "2 in the call", b.diagnose(f"the gone one is not counted: {mark}")
            # event-driven: the mark came with the server's room.participant.left
            assert mark["leftEventAt"] is not None and abs(mark["markedAt"] - mark["leftEventAt"]) < 100, mark
        delays = [(m["markedAt"] / 1000) - closed_at for m in marks]
        reason = room.server.call(lambda: room.server.registry.get(ids[2]).close_reason)
        # the page's pagehide DELETE (or its peer connection's close) ends the session: not the heartbeat's 10 s
        assert max(delays) < 3.0, f"marked gone {delays} s after the page closed, the session ended {reason!r}"
        time.sleep(1.0)
        for b in people[:2]:
            assert b.page.evaluate(f"document.querySelectorAll('.tile.remote[data-participant-id=\"{ids[2]}\"]')"
                                   ".length") == 1, b.diagnose("kept through the grace period")
        for b in people[:2]:
            b.wait_js("removed after the grace", f"!document.querySelector('.tile.remote[data-participant-id="
                      f"\"{ids[2]}\"]')", int((GRACE_S + 15) * 1000))
        said = people[0].page.evaluate("window.__said")
        assert any("Cy left" in s or "Cy lost the connection" in s for s in said), people[0].diagnose(f"{said}")
        print(f"gone marks {[round(d, 3) for d in delays]} s after the page closed (loaded machine)")


def test_a_reload_rejoins_with_the_same_name_and_keeps_the_transcript(room: Room):
    room_name = "reload-room"
    with pages(room, "speaking", "quiet") as (ann, ben):
        ids = [join(ann, room_name, "Ann"), join(ben, room_name, "Ben")]
        see_everyone([ann, ben], ids)
        for b in (ann, ben):
            b.wait_js("Ann's caption in the transcript", "[...document.querySelectorAll('#room-transcript li.final')]"
                      ".some(li => /morning report/i.test(li.textContent))", 60_000)
        before = ann.page.evaluate("document.querySelectorAll('#room-transcript li.final').length")
        ann.page.reload(wait_until="load")
        ann.wait_js("page ready", "document.body.dataset.ready === 'true'", 15_000)
        restored = ann.page.evaluate("[...document.querySelectorAll('#room-transcript li[data-restored]')]"
                                     ".map(li => li.textContent)")
        assert len(restored) >= before and any("morning report" in t for t in restored), \
            ann.diagnose(f"the transcript kept: {restored}")
        ann.wait_js("rejoined by itself", JOINED, 60_000)
        assert ann.page.input_value("#call-name") == "Ann"
        assert ann.page.evaluate("window.rtcAgent.app.participants().find(p => p.participant_id === "
                                 "window.rtcAgent.app.participantId()).name") == "Ann", ann.diagnose("same name")
        new_id = ann.page.evaluate("window.rtcAgent.app.participantId()")
        ben.wait_value("Ben sees Ann back, once", "window.rtcAgent.app.stats().then(s => s.filter(t => "
                       f"t.name === 'Ann').length === 1 && s.some(t => t.id === '{new_id}' && t.presence === 'here'))",
                       30_000)
        assert ann.page.evaluate("document.body.dataset.callPhase") == "connected"
        assert not ann.page.is_visible("#join"), ann.diagnose("no pre-join after the reload")
        # Leave: the next reload shows the form again
        ann.page.click("#leave")
        ann.wait_js("left", "window.rtcAgent.app.status.phase === 'prejoin'", 15_000)
        ann.page.reload(wait_until="load")
        ann.wait_js("page ready", "document.body.dataset.ready === 'true'", 15_000)
        time.sleep(1.0)
        assert ann.page.evaluate("window.rtcAgent.app.status.phase") == "prejoin"
        assert ann.page.is_visible("#join")
        assert not any(b.page_errors() for b in (ann, ben)), ann.diagnose("no page errors")


def test_the_prejoin_form_shows_who_is_here_and_enter_joins(room: Room):
    room_name = "enter-room"
    with pages(room, "quiet", "quiet") as (ann, bea):
        ann_id = join(ann, room_name, "Ann")
        bea.open(f"/call?room={room_name}")
        bea.wait_js("who is here", "/Already here: Ann/.test(document.getElementById('room-presence').textContent)",
                    15_000)
        assert not bea.page.is_visible("#connect") and not bea.page.is_visible("#disconnect"), \
            bea.diagnose("one Join: the session card's Connect is not on the call page")
        assert bea.page.get_attribute("#room-input", "readonly") is None  # no link: the room can be typed
        # keyboard order: room, name, the languages (and their options), then Join
        bea.page.focus("#room-input")
        seen = []
        for _ in range(8):
            seen.append(bea.page.evaluate("document.activeElement.id"))
            if seen[-1] == "join":
                break
            bea.page.keyboard.press("Tab")
        core = [i for i in seen if i in ("room-input", "call-name", "speak-language", "listen-language", "join")]
        assert core == ["room-input", "call-name", "speak-language", "listen-language", "join"], seen
        assert set(seen) - set(core) <= {"hear-interpretation", "listen-text-only"}, seen
        bea.page.fill("#call-name", "Bea")
        bea.page.focus("#call-name")
        bea.page.keyboard.press("Enter")
        bea.wait_js("Enter joined", JOINED, 60_000)
        ann.wait_value("Ann sees Bea", "window.rtcAgent.app.stats().then(s => s.some(t => t.name === 'Bea'))", 30_000)
        bea_id = bea.page.evaluate("window.rtcAgent.app.participantId()")
        assert bea_id != ann_id
        assert not bea.page.is_visible("#room-presence"), bea.diagnose("the form's extras go away in the call")
        assert bea.page.is_visible("#listen-language"), bea.diagnose("languages stay changeable in the call")


def test_a_late_caption_shows_its_delay_on_the_tile(room: Room):
    room_name = "lag-room"
    room.asr.delay_s = 3.0  # every decode takes 3 s: captions come well over 2 s after the speech
    try:
        with pages(room, "speaking", "quiet") as (ann, ben):
            ids = [join(ann, room_name, "Ann"), join(ben, room_name, "Ben")]
            see_everyone([ann, ben], ids)
            ben.wait_value("Ann's tile shows the delay", "window.rtcAgent.app.stats().then(s => { const t = s.find("
                           f"t => t.id === '{ids[0]}'); if (t && /s behind/.test(t.lag)) window.__lag = t.lag;"
                           " return Boolean(window.__lag); })", 90_000)
            lag = ben.page.evaluate("window.__lag")  # as shown (a later caption that caught up clears it)
            seconds = float(re.match(r"([\d.]+) s behind", lag).group(1))
            assert seconds > 2.0, ben.diagnose(f"a delay over 2 s: {lag}")
            ann.wait_js("and on Ann's own tile", "!document.querySelector('#tile-self .tile-lag').hidden", 60_000)
    finally:
        room.asr.delay_s = 0.0


STATUS_LOG = """() => {
  window.__status = [];
  window.rtcAgent.app.status.addEventListener('change', ({detail}) => window.__status.push({
    phase: detail.phase, text: detail.text, badge: document.getElementById('call-status').textContent,
    side: document.getElementById('connection-state').textContent,
    banner: !document.getElementById('error').hidden}));
}"""


def test_one_status_through_a_lost_session_and_its_rejoin(room: Room):
    """The server drops Ann's session (heartbeat_lost): her page says "reconnecting in N s" in both badges, shows
    no "Session ended" banner beside it, and rejoins by itself; Ben sees "connection lost", then Ann back in one
    tile. An engine fault's banner clears with the next good result."""
    room_name = "status-room"
    with pages(room, "quiet", "quiet") as (ann, ben):
        ids = [join(ann, room_name, "Ann"), join(ben, room_name, "Ben")]
        see_everyone([ann, ben], ids)
        ann.page.evaluate(STATUS_LOG)
        room.server.call(lambda: room.server.registry.get(ids[0]).close_soon("heartbeat_lost"))
        ben.wait_value("Ben marks Ann's lost connection", "window.rtcAgent.app.stats().then(s => s.some(t => "
                       f"t.id === '{ids[0]}' && t.presence === 'lost'))", 20_000)
        ann.wait_value("Ann back in the call", "window.__status.some(s => s.phase === 'reconnecting') && "
                       f"window.rtcAgent.app.status.phase === 'connected' && window.rtcAgent.app.participantId() "
                       f"!== '{ids[0]}'", 60_000)
        history = ann.page.evaluate("window.__status")
        assert all(s["badge"] == s["text"] == s["side"] for s in history), ann.diagnose(f"one status: {history}")
        waiting = [s for s in history if s["phase"] == "reconnecting"]
        assert any(re.fullmatch(r"reconnecting in \d+ s", s["text"]) for s in waiting), history
        assert not any(s["banner"] for s in waiting), ann.diagnose(f"no 'ended' banner while rejoining: {history}")
        assert [s["phase"] for s in history][-1] == "connected", history
        new_id = ann.page.evaluate("window.rtcAgent.app.participantId()")
        ben.wait_value("Ann's new tile replaces the lost one", "window.rtcAgent.app.stats().then(s => s.filter(t => "
                       f"t.name === 'Ann').length === 1 && s.some(t => t.id === '{new_id}' && t.presence === 'here'))",
                       30_000)
        said = ben.wait_value("announced (batched: a moment later)", "window.__said.some(s => /Ann is back/.test(s))"
                              " && window.__said", 10_000)
        assert any("Ann lost the connection" in s for s in said), said

        # an engine's passing fault: its banner goes with the next good result
        ben.page.evaluate("""() => window.rtcAgent.client._onMessage(JSON.stringify({type: 'error', error: {
            type: 'server_error', code: 'engine_timeout', message: 'the speech recognizer timed out'}}))""")
        assert ben.page.is_visible("#error"), ben.diagnose("the fault's banner")
        ben.page.evaluate(f"""() => window.rtcAgent.client._dispatch({{type: 'caption.partial', segment_id: 'x1',
            committed: 'good', tentative: 'again', audio_start_ms: 0, audio_end_ms: 500,
            speaker: {{participant_id: '{new_id}', name: 'Ann'}}}})""")
        assert not ben.page.is_visible("#error"), ben.diagnose("cleared by the next caption")
        assert not any(b.page_errors() for b in (ann, ben)), ann.diagnose("no page errors")
