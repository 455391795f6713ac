"""Calls from the listeners' side: pipelines, translations, transcripts and the /call page.

Without models: a speaker who leaves frees the interpretation pipelines it spoke into while its listeners stay;
one interpreted text becomes one ``caption.translation`` per listener of that language (computed once per pair),
not sent to a listener who asked for no captions; the transcript's participant list follows a rename or a new
spoken language.

In headless Chromium (no speech needed): the /call page ducks an interpreted speaker's voice to 15 % and restores
it when that speaker's language changes or the listener turns interpretation off; captions and translations of a
speaker land under that speaker's tile; the room transcript downloads as WebVTT and JSON; and the page rejoins the
room by itself when the server goes away for a moment (stopped, then started again on the same port).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtc_agent.apps.call.room_registry import RoomRegistry
from rtc_agent.config import Settings
from rtc_agent.protocol.events import CaptionFinal
from tests import browser as browser_support
from tests.browser import CHROMIUM, BrowserPage, browser_test, chromium_args, serve, write_wav
from tests.test_rooms import person


@pytest.fixture
def settings() -> Settings:
    return dataclasses.replace(Settings(), max_room_participants=4)


async def test_a_speaker_who_leaves_frees_its_pipelines(settings):
    registry = RoomRegistry(settings)
    es, fr = person("es", settings, language="es", listen="en"), person("fr", settings, language="fr", listen="en")
    en1, en2 = person("en1", settings), person("en2", settings)
    room = registry.join("r", es)
    for p in (fr, en1, en2):
        registry.join("r", p)
    assert set(room.pairs) == {("es", "en"), ("fr", "en")}
    es_pair = room.pairs[("es", "en")]
    assert set(es_pair.sink.sinks) == {"fr", "en1", "en2"}  # fr listens in English too
    room.on_caption(es, CaptionFinal(segment_id="s1", text="hola", audio_start_ms=0, audio_end_ms=900))
    assert "es" in room._segments
    room.leave("es")
    assert set(room.pairs) == {("fr", "en")}  # the listeners stay; the leaver's pipeline is gone
    assert "es" not in room._segments and "es" not in room.participants
    await asyncio.sleep(0)
    assert es_pair.tasks == [] and all(t.done() for t in es.ctx.tasks)
    assert [e["participant_id"] for e in en1.ctx.events if e["type"] == "room.participant.left"] == ["es"]
    for pid in ("fr", "en1", "en2"):
        room.leave(pid)
    assert room.pairs == {} and "r" not in registry.rooms
    await asyncio.sleep(0)
    assert all(t.done() for p in (fr, en1, en2) for t in p.ctx.tasks)


async def test_one_translation_per_text_for_every_listener_of_the_language(settings):
    registry = RoomRegistry(settings)
    es = person("es", settings, language="es", listen="en")
    listeners = [person(f"en{i}", settings) for i in range(3)]
    room = registry.join("r", es)
    for p in listeners:
        registry.join("r", p)
    assert list(room.pairs) == [("es", "en")]
    room.pairs[("es", "en")]._on_text("Good morning", 0, 900)
    for p in listeners:
        got = [e for e in p.ctx.events if e["type"] == "caption.translation"]
        assert len(got) == 1 and got[0]["text"] == "Good morning" and got[0]["speaker"]["participant_id"] == "es"
    # a listener who asked for no captions gets no caption text, translated or not
    listeners[0].captions = False
    room.pairs[("es", "en")]._on_text("Good evening", 1000, 1900)
    assert [e["text"] for e in listeners[0].ctx.events if e["type"] == "caption.translation"] == ["Good morning"]
    assert [e["text"] for e in listeners[1].ctx.events if e["type"] == "caption.translation"] == [
        "Good morning", "Good evening"]
    for pid in ["es", *(p.id for p in listeners)]:
        room.leave(pid)


async def test_transcript_follows_a_renamed_participant_and_its_new_language(settings):
    registry = RoomRegistry(settings)
    a, b = person("a", settings), person("b", settings)
    room = registry.join("r", a)
    registry.join("r", b)
    a.name, a.language = "Ann", "fr"
    room.update(a)
    assert room.transcript.to_json()["participants"][0] == {**room.transcript.participants["a"], "name": "Ann",
                                                            "language": "fr"}
    room.leave("a")
    room.leave("b")


# --- the /call page -----------------------------------------------------------------------------------------

SOFIA = {"participant_id": "sp_sofia", "name": "Sofia", "language": "es", "listen_language": "es",
         "mic_muted": False, "camera_muted": False, "interpret": True}


def _dispatch(b: BrowserPage, event: dict) -> None:
    b.page.evaluate("(ev) => window.rtcAgent.client._dispatch(ev)", event)


def _sofia(b: BrowserPage) -> dict:
    tiles = b.page.evaluate("window.rtcAgent.app.stats()")
    assert len(tiles) == 1, b.diagnose(f"one remote tile: {tiles}")
    return tiles[0]



#: the page is in its room over a connected session
CONNECTED = "window.rtcAgent.app.participantId() !== null && window.rtcAgent.client.state === 'connected'"


def _quiet_chromium(pw: Any, tmp_path: Path) -> Any:
    """Headless Chromium whose fake microphone plays a second of silence."""
    wav = write_wav(tmp_path / "quiet.wav", np.zeros(48000, dtype=np.int16), 48000)
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=chromium_args(audio_file=wav))


@browser_test
def test_call_page_ducks_downloads_and_reconnects(tmp_path, monkeypatch):
    sync_api = pytest.importorskip("playwright.sync_api")

    port = browser_support.free_port()
    monkeypatch.setattr(browser_support, "free_port", lambda: port)  # the restarted server answers where it was
    with sync_api.sync_playwright() as pw:
        chromium = _quiet_chromium(pw, tmp_path)
        try:
            page = chromium.new_context(accept_downloads=True).new_page()
            with serve(tmp_path) as served:
                b = BrowserPage(page, served, tmp_path)
                page.on("console", lambda m: b.console.append(f"[{m.type}] {m.text}"))
                page.on("pageerror", lambda e: b.console.append(f"[pageerror] {e}"))
                b.open("/call?room=gaps-room&name=Ann&speak=en&hear=en")
                b.page.click("#join")
                b.wait_js("joined", CONNECTED, 30_000)
                first_id = b.page.evaluate("window.rtcAgent.app.participantId()")

                # a Spanish speaker (its media would come over the mesh): interpreted for me, so ducked to 15 %
                _dispatch(b, {"type": "room.participant.joined", "room": "gaps-room", "participant": SOFIA})
                tile = _sofia(b)
                assert tile["name"] == "Sofia" and tile["volume"] == 1 and not tile["ducked"], b.diagnose("tile")
                # (only while her interpretation plays: speech.started .. done, see tests/test_browser_listen.py)
                started = {"type": "translation.speech.started", "utterance_id": "u1", "starts_in_ms": 0,
                           "speaker": {"participant_id": "sp_sofia", "name": "Sofia"}}
                _dispatch(b, started)
                tile = _sofia(b)
                assert tile["ducked"] and abs(tile["volume"] - 0.15) < 1e-6, b.diagnose(f"ducked: {tile}")
                # interpretation off on my side: the original voice comes back; on again: ducked when it speaks again
                b.page.click("#hear-interpretation")
                assert _sofia(b)["volume"] == 1, b.diagnose("interpretation off")
                b.page.click("#hear-interpretation")
                _dispatch(b, {**started, "utterance_id": "u2"})
                assert abs(_sofia(b)["volume"] - 0.15) < 1e-6, b.diagnose("interpretation on")
                # Sofia switches to English: nothing to interpret, her own voice at full volume
                _dispatch(b, {"type": "room.participant.updated", "room": "gaps-room",
                              "participant": {**SOFIA, "language": "en"}})
                tile = _sofia(b)
                assert tile["volume"] == 1 and not tile["ducked"], b.diagnose(f"un-ducked: {tile}")

                # her caption and its translation under her tile, not mine; the transcript names her
                speaker = {"participant_id": "sp_sofia", "name": "Sofia"}
                _dispatch(b, {"type": "caption.final", "segment_id": "s1", "text": "Buenos días",
                              "audio_start_ms": 0, "audio_end_ms": 900, "speaker": speaker})
                _dispatch(b, {"type": "caption.translation", "segment_id": "s1", "language": "en",
                              "text": "Good morning", "speaker": speaker})
                sofia_caption = b.page.evaluate(
                    "document.querySelector('.tile.remote[data-participant-id=\"sp_sofia\"] .tile-caption')"
                    ".textContent")
                assert "Buenos días" in sofia_caption and "Good morning" in sofia_caption, b.diagnose("caption")
                assert "Buenos" not in b.page.inner_text("#tile-self .tile-caption"), b.diagnose("own tile")
                assert "Sofia" in b.page.inner_text("#room-transcript"), b.diagnose("transcript names")

                # the room's transcript downloads (the live room: no speech yet, so no cues)
                with b.page.expect_download() as info:
                    b.page.click("#download-vtt")
                vtt = Path(info.value.path()).read_text(encoding="utf-8")
                assert vtt.startswith("WEBVTT"), b.diagnose(f"vtt: {vtt[:80]!r}")
                with b.page.expect_download() as info:
                    b.page.click("#download-json")
                data = json.loads(Path(info.value.path()).read_text(encoding="utf-8"))
                # everyone who was in the room (a page that reconnected under load is there once per session)
                assert data["room"] == "gaps-room" and {p["name"] for p in data["participants"]} == {"Ann"}
            # the server went away (session.ended server_shutdown): the page says it will reconnect ...
            b.wait_js("reconnect announced",
                      "document.getElementById('call-status').dataset.phase === 'reconnecting'", 20_000)
            assert b.page.evaluate("document.querySelectorAll('.tile.remote').length") == 0, b.diagnose("cleared")
            with serve(tmp_path) as served_again:
                assert served_again.base == served.base
                # ... and rejoins the same room once the server is back, as a new participant
                b.wait_js("rejoined", CONNECTED, 90_000)
                assert b.page.inner_text("#room-name") == "gaps-room"
                assert b.page.evaluate("window.rtcAgent.app.participantId()") != first_id
                b.wait_js("reconnect badge gone", "document.getElementById('call-status').dataset.phase"
                          " === 'connected'", 5_000)
                assert not b.page_errors(), b.diagnose("no page errors")
        finally:
            chromium.close()


@browser_test
def test_a_rejoin_before_the_ended_sessions_connection_closes_still_rejoins(tmp_path):
    """A draining server sends session.ended a moment before it closes the connection: the page's rejoin (1 s
    later) may find its client still connected. It closes that connection and joins again (before, the client
    refused to connect while connected, and nothing tried again: the page stayed "reconnecting" for good)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        chromium = _quiet_chromium(pw, tmp_path)
        try:
            page = chromium.new_context().new_page()
            with serve(tmp_path) as served:
                b = BrowserPage(page, served, tmp_path)
                b.open("/call?room=early-room&name=Ann&speak=en&hear=en")
                b.page.click("#join")
                b.wait_js("joined", CONNECTED, 30_000)
                first_id = b.page.evaluate("window.rtcAgent.app.participantId()")
                # the server's session.ended arrives; its connection stays up for now
                b.page.evaluate("window.rtcAgent.client._onMessage(JSON.stringify({type: 'session.ended', "
                                "reason: 'server_shutdown', message: 'The server is shutting down.'}))")
                b.wait_js("rejoined", f"{CONNECTED} && window.rtcAgent.app.participantId() !== '{first_id}'",
                          30_000)
                b.wait_js("reconnect badge gone", "document.getElementById('call-status').dataset.phase"
                          " === 'connected'", 5_000)
                assert not b.page_errors(), b.diagnose("no page errors")
        finally:
            chromium.close()
