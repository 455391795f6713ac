"""The /call and /interpret pages offer what the server can deliver, in headless Chromium against a real server.

- The "I want to hear" lists hold exactly the languages of the server's own ``capabilities.listen`` (read from the
  page it serves): those with text and speech plainly, text-only ones marked "(text only)", the rest disabled with
  their reason in the option's text; the quality label next to the choice; "Text only" forced for a language
  without a voice. Without ``capabilities.listen`` (an older server) the lists fall back to ``st.targets``.
- A session.update to an undeliverable language gets the server's ``unsupported_language`` error in the error
  area and the select goes back to the language in effect (real sessions: the call app and the interpret app).
- Ducking applies only between ``translation.speech.started`` and ``.done`` for that speaker (with a release and
  a safety timeout); a tile says how far behind its captions or interpretation are. These events are dispatched
  into the page's own event handler (``client._dispatch``, the path every data-channel event takes): producing
  them for real needs two speakers, Whisper translation and Piper, which the room tests cover.
- Neither page scrolls sideways at 390 px.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request

import numpy as np
import pytest

from tests.browser import BrowserPage, chromium_page, requires_chromium, serve, write_wav

pytestmark = requires_chromium
pytest.importorskip("playwright.sync_api")

SOFIA = {"participant_id": "sp_sofia", "name": "Sofia", "language": "es", "listen_language": "es",
         "mic_muted": False, "camera_muted": False, "interpret": True}
SPEAKER = {"participant_id": "sp_sofia", "name": "Sofia"}
OPTIONS = "(sel) => [...document.querySelectorAll(sel + ' option')].map(o => ({value: o.value, text: o.textContent," \
          " disabled: o.disabled}))"


def page_config(base: str, path: str) -> tuple[str, re.Match, dict]:
    html = urllib.request.urlopen(f"{base}{path}", timeout=10).read().decode()
    match = re.search(r'(<script type="application/json" id="client-config">)(.*?)(</script>)', html, re.S)
    assert match, "the page carries its client config"
    return html, match, json.loads(match.group(2))


def serve_with(b: BrowserPage, path: str, capabilities: dict) -> None:
    """Serve ``path`` to the browser with ``capabilities`` in place of the server's own."""
    html, match, config = page_config(b.served.base, path)
    config["capabilities"] = capabilities
    body = html.replace(match.group(0), match.group(1) + json.dumps(config) + match.group(3))
    b.page.unroute_all()
    b.page.route(lambda url: urllib.parse.urlsplit(url).path == path,
                 lambda route: route.fulfill(status=200, content_type="text/html", body=body))


def assert_offers(options: list[dict], listen: dict) -> None:
    values = [o["value"] for o in options]
    assert len(values) == len(set(values)) and set(values) == set(listen), f"exactly the server's languages: {values}"
    for o in options:
        offer = listen[o["value"]]
        assert o["disabled"] == (not offer["text"]), o
        if not offer["text"]:
            assert offer["reason"] in o["text"] and "unavailable" in o["text"], o
        elif offer["speech"] is False:
            assert o["text"].endswith("(text only)"), o
        else:
            assert "(text only)" not in o["text"] and "unavailable" not in o["text"], o


def no_sideways_scroll(b: BrowserPage, path: str) -> None:
    b.page.set_viewport_size({"width": 390, "height": 844})
    b.open(path)
    width = b.page.evaluate("[document.documentElement.scrollWidth, document.body.scrollWidth, innerWidth]")
    assert max(width[:2]) <= width[2], b.diagnose(f"{path} scrolls sideways at 390 px: {width}")


NO_MODELS = ("--preload", "")  # the lists and the layout need no engine
ENGLISH_ONLY = ("--mt-engine", "none")  # no text translation: only English (Whisper's translate task) is delivered


def test_lists_offer_only_deliverable_languages(tmp_path):
    with serve(tmp_path, *NO_MODELS) as served, chromium_page(served, tmp_path) as b:
        listen = page_config(served.base, "/call")[2]["capabilities"]["listen"]
        assert any(o["text"] for o in listen.values())
        for path, select in (("/call", "#listen-language"), ("/interpret", "#target-language")):
            b.open(path)
            options = b.page.evaluate(OPTIONS, select)
            assert_offers(options, listen)
            chosen = b.page.input_value(select)
            assert listen[chosen]["text"], b.diagnose(f"{path}: the choice is deliverable: {chosen}")
            assert not b.page_errors(), b.diagnose("no page errors")

        # a server with text-only languages and quality labels (as one with a text translator would publish)
        rich = dict(listen)
        rich["es"] = {"text": True, "speech": False, "engine": "cascade", "voice": None, "quality": "fallback LLM",
                      "reason": None}
        rich["fr"] = {"text": True, "speech": True, "engine": "cascade", "voice": "kokoro", "quality": "good",
                      "reason": None}
        caps = {**page_config(served.base, "/call")[2]["capabilities"], "listen": rich}
        serve_with(b, "/call", caps)
        b.open("/call?hear=es")
        assert_offers(b.page.evaluate(OPTIONS, "#listen-language"), rich)
        assert b.page.input_value("#listen-language") == "es"
        assert b.page.is_visible("#listen-text-only")
        assert b.page.is_checked("#listen-text-only") and b.page.is_disabled("#listen-text-only"), \
            b.diagnose("a language without a voice is text only")
        assert "fallback LLM" in b.page.inner_text("#listen-quality")
        config = b.page.evaluate("window.rtcAgent.app.configure({})")
        assert config["listen_language"] == "es" and config["listen_speech"] is False
        b.page.select_option("#listen-language", "fr")
        assert not b.page.is_checked("#listen-text-only") and b.page.is_enabled("#listen-text-only")
        assert b.page.inner_text("#listen-quality").strip() == "quality: good"
        b.page.check("#listen-text-only")
        assert b.page.evaluate("window.rtcAgent.app.configure({})")["listen_speech"] is False
        b.page.uncheck("#listen-text-only")
        assert b.page.evaluate("window.rtcAgent.app.configure({})")["listen_speech"] is True

        serve_with(b, "/interpret", caps)
        b.open("/interpret")
        b.page.select_option("#target-language", "es")
        assert not b.page.is_checked("#speak-translation") and b.page.is_disabled("#speak-translation")
        assert b.page.evaluate("window.rtcAgent.app.configure({}).speak") is False
        b.page.select_option("#target-language", "fr")
        assert b.page.is_checked("#speak-translation")
        assert "speak" not in b.page.evaluate("window.rtcAgent.app.configure({})")

        # an older server without capabilities.listen: st.targets are offered, the rest disabled with a reason
        old = {k: v for k, v in caps.items() if k != "listen"}
        serve_with(b, "/call", old)
        b.open("/call")
        options = b.page.evaluate(OPTIONS, "#listen-language")
        assert {o["value"] for o in options if not o["disabled"]} == set(old["st"]["targets"])
        assert all("unavailable" in o["text"] for o in options if o["disabled"])
        assert not b.page.is_visible("#listen-text-only")
        assert "listen_speech" not in b.page.evaluate("window.rtcAgent.app.configure({})")


def test_no_sideways_scroll_at_390_px(tmp_path):
    with serve(tmp_path, *NO_MODELS) as served, chromium_page(served, tmp_path) as b:
        for path in ("/call?room=narrow", "/interpret"):
            no_sideways_scroll(b, path)


def _dispatch(b: BrowserPage, *events: dict) -> None:
    b.page.evaluate("(evs) => evs.forEach(ev => window.rtcAgent.client._dispatch(ev))", list(events))


def _sofia(b: BrowserPage) -> dict:
    tiles = b.page.evaluate("window.rtcAgent.app.stats()")
    assert len(tiles) == 1, b.diagnose(f"one remote tile: {tiles}")
    return tiles[0]


def _wait_revert(b: BrowserPage, select: str, value: str) -> None:
    b.wait_js("the server's refusal shown",
              "document.getElementById('error').dataset.code === 'unsupported_language'", 15_000)
    assert b.page.input_value(select) == value, b.diagnose(f"{select} back to {value}")
    assert b.page.inner_text("#error-message").strip(), b.diagnose("the refusal's message")


@pytest.mark.real_model
def test_call_reverts_refused_language_and_ducks_only_while_interpretation_plays(tmp_path):
    wav = write_wav(tmp_path / "quiet.wav", np.zeros(48000, dtype=np.int16), 48000)
    connected = "window.rtcAgent.app.participantId() !== null && window.rtcAgent.client.state === 'connected'"
    with serve(tmp_path, *ENGLISH_ONLY) as served, chromium_page(served, tmp_path, audio_file=wav) as b:
        listen = page_config(served.base, "/call")[2]["capabilities"]["listen"]
        refused = next(c for c, o in listen.items() if not o["text"])
        b.open("/call?room=listen-room&name=Ann&speak=en&hear=en")
        b.page.click("#join")
        b.wait_js("joined", connected, 30_000)

        # a language the server cannot deliver (disabled in the list, forced here): refused, the select reverts
        b.page.evaluate("(code) => { const s = document.getElementById('listen-language'); s.value = code;"
                        " s.dispatchEvent(new Event('change')); }", refused)
        _wait_revert(b, "#listen-language", "en")

        _dispatch(b, {"type": "room.participant.joined", "room": "listen-room", "participant": SOFIA})
        tile = _sofia(b)
        assert tile["volume"] == 1 and not tile["ducked"], b.diagnose(f"full volume: {tile}")
        # interpretation text alone does not duck: only its speech does
        _dispatch(b, {"type": "translation.chunk", "index": 1, "action": "EMIT", "text": "Good morning",
                      "audio_start_ms": 0, "audio_end_ms": 900, "speaker": SPEAKER})
        assert _sofia(b)["volume"] == 1, b.diagnose("not ducked by text")
        started = {"type": "translation.speech.started", "utterance_id": "u1", "segment_id": "s1",
                   "starts_in_ms": 0, "speaker": SPEAKER}
        _dispatch(b, started)
        tile = _sofia(b)
        assert tile["ducked"] and abs(tile["volume"] - 0.15) < 1e-6, b.diagnose(f"ducked: {tile}")
        # done: a short release, then full volume
        still = b.page.evaluate("""() => { window.rtcAgent.client._dispatch({type: 'translation.speech.done',
            utterance_id: 'u1', segment_id: 's1', speaker: {participant_id: 'sp_sofia', name: 'Sofia'}});
            return document.querySelector('.tile.remote').dataset.ducked; }""")
        assert still == "true", b.diagnose("the release holds the duck a moment")
        b.wait_js("released", "document.querySelector('.tile.remote video').volume === 1", 3_000)
        # speech queued behind other speech: ducked when it starts playing, not before
        _dispatch(b, {**started, "utterance_id": "u2", "starts_in_ms": 700})
        assert not _sofia(b)["ducked"], b.diagnose("not yet playing")
        b.wait_js("ducked when it plays", "document.querySelector('.tile.remote').dataset.ducked === 'true'", 3_000)
        # interpretation off: the original voice comes back at once
        b.page.click("#hear-interpretation")
        assert _sofia(b)["volume"] == 1, b.diagnose("interpretation off")
        b.page.click("#hear-interpretation")
        assert _sofia(b)["volume"] == 1, b.diagnose("interpretation on again: nothing plays yet")
        # done never comes: the safety timeout restores the voice
        b.page.evaluate("window.rtcAgent.app.ducking.safetyMs = 600")
        _dispatch(b, {**started, "utterance_id": "u3"})
        assert _sofia(b)["ducked"]
        b.wait_js("safety timeout", "document.querySelector('.tile.remote video').volume === 1", 3_000)

        # lag on Sofia's tile: late captions, interpretation behind; cleared when they catch up
        caption = {"type": "caption.final", "segment_id": "s2", "text": "Hola", "audio_start_ms": 0,
                   "audio_end_ms": 900, "speaker": SPEAKER}
        _dispatch(b, {**caption, "behind_ms": 3400})
        assert _sofia(b)["lag"] == "3.4 s behind", b.diagnose("late caption")
        _dispatch(b, {**caption, "segment_id": "s3", "behind_ms": 400})
        assert _sofia(b)["lag"] == "", b.diagnose("caught up")
        catchup = {"type": "translation.speech.catchup", "action": "speed", "lag_ms": 4200, "speed": 1.3,
                   "speaker": SPEAKER}
        _dispatch(b, catchup)
        assert _sofia(b)["lag"] == "4.2 s behind", b.diagnose("interpretation behind")
        _dispatch(b, {**catchup, "action": "normal", "lag_ms": 600, "speed": 1.0})
        assert _sofia(b)["lag"] == "", b.diagnose("interpretation caught up")
        assert b.page.inner_text("#tile-self .tile-lag") == "", b.diagnose("my tile untouched")
        assert not b.page_errors(), b.diagnose("no page errors")


@pytest.mark.real_model
def test_interpret_reverts_a_refused_target(tmp_path):
    wav = write_wav(tmp_path / "quiet.wav", np.zeros(48000, dtype=np.int16), 48000)
    with serve(tmp_path, "--preload", "vad,asr", *ENGLISH_ONLY) as served, \
            chromium_page(served, tmp_path, audio_file=wav) as b:
        listen = page_config(served.base, "/interpret")[2]["capabilities"]["listen"]
        refused = next(c for c, o in listen.items() if not o["text"])
        b.open("/interpret")
        b.page.click("#connect")
        b.wait_js("connected", "window.rtcAgent.client.state === 'connected'", 60_000)
        before = b.page.input_value("#target-language")
        b.page.evaluate("(code) => { const s = document.getElementById('target-language'); s.value = code;"
                        " s.dispatchEvent(new Event('change')); }", refused)
        _wait_revert(b, "#target-language", before)
        assert b.page.evaluate("document.getElementById('target-text').lang") == before
        # interpretation speech behind by more than 3 s shows, and clears when it catches up
        _dispatch(b, {"type": "translation.speech.catchup", "action": "skip", "lag_ms": 6100, "speed": 1.6})
        assert b.page.inner_text("#speech-behind") == "speech 6.1 s behind"
        _dispatch(b, {"type": "translation.speech.catchup", "action": "normal", "lag_ms": 900, "speed": 1.0})
        assert b.page.is_hidden("#speech-behind")
