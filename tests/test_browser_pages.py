"""Pages that explain themselves, in headless Chromium with fake devices: readiness before Connect, downloads,
mute, audio-only fallback, only supported languages, reset on end, the connection-quality pill."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.browser import chromium_page, requires_chromium, serve, write_wav
from tests.speech import synthesize

pytestmark = requires_chromium
pytest.importorskip("playwright.sync_api")

CONNECTED = "document.querySelector('#connection-state').textContent.trim() === 'connected'"
IDLE_SERVER = ("--preload", "vad,asr")


def _read(info) -> str:
    """The text of a finished download."""
    return Path(info.value.path()).read_text(encoding="utf-8")


def _speech_wav(tmp_path, text="The quick brown fox jumps over the lazy dog. " * 2):
    pause = np.zeros(24000, dtype=np.float64)
    pcm = synthesize(text, 48000).astype(np.float64) / 32768.0
    return write_wav(tmp_path / "speech.wav", np.concatenate([pause, pcm, pause]), 48000)


def test_readiness_is_shown_before_connect_and_clears_when_ready(tmp_path):
    """A page rendered while the language model loads says so (with its percentage) and polls /health until the
    agent's engines are ready."""
    with serve(tmp_path, *IDLE_SERVER) as served, chromium_page(served, tmp_path) as b:
        html = urllib.request.urlopen(f"{served.base}/agent").read().decode()
        match = re.search(r'(<script type="application/json" id="client-config">)(.*?)(</script>)', html, re.S)
        config = json.loads(match.group(2))
        config["readiness"] = {
            "engines": {"llm": {"state": "loading", "progress": "assembling: part 3/5 done", "percent": 60,
                                "label": "language model"}},
            "apps": {"agent": {"ready": False, "waiting": ["llm"]}},
        }
        cold = html.replace(match.group(0), match.group(1) + json.dumps(config) + match.group(3))
        health_calls: list[str] = []

        def cold_page(route):
            route.fulfill(status=200, content_type="text/html", body=cold)

        def loading_health(route):
            health_calls.append(route.request.url)
            if len(health_calls) < 3:  # loading twice, then the real answer
                route.fulfill(status=200, content_type="application/json", body=json.dumps({
                    "status": "loading", "readiness": config["readiness"]}))
            else:
                route.continue_()

        b.page.route("**/agent", cold_page)
        b.page.route("**/health", loading_health)
        b.open("/agent")
        text = b.page.inner_text("#readiness")
        assert text == "Loading the language model (60 %): you can connect now, the first answer waits for it.", text
        assert b.page.evaluate("document.body.dataset.readiness") == "loading"
        b.wait_js("readiness clears", "document.body.dataset.readiness === 'ready'", 15_000)
        assert b.page.is_hidden("#readiness")
        assert len(health_calls) >= 3


def test_only_supported_languages_are_offered(tmp_path):
    with serve(tmp_path, *IDLE_SERVER) as served, chromium_page(served, tmp_path) as b:
        b.open("/interpret")
        targets = b.page.eval_on_selector_all("#target-language option:not(:disabled)", "os => os.map(o => o.value)")
        listen = b.page.evaluate("window.rtcAgent.config.capabilities.listen")
        assert set(targets) == {c for c, o in listen.items() if o["text"]}  # only what this server delivers
        assert b.page.evaluate("document.getElementById('target-text').lang") == "en"
        assert b.page.is_visible("#server-setup summary")
        b.page.click("#server-setup summary")
        assert "--st-engine" in b.page.inner_text("#server-setup")
        b.open("/agent")
        assert "Server setup" in b.page.inner_text("#server-setup summary")


def test_caption_downloads_copy_feedback_and_reset_on_end(tmp_path):
    """Finals become valid VTT, SRT and text files; the transcript survives the end of the session; nothing per
    session (partial on the video, speech badge) stays on after it."""
    with serve(tmp_path, *IDLE_SERVER) as served, chromium_page(served, tmp_path) as b:
        b.page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=served.base)
        b.open("/captions")
        b.page.click("#connect")
        b.wait_js("connect", CONNECTED, 30_000)
        b.page.evaluate("""() => {
          const c = window.rtcAgent.client;
          c._dispatch({type: 'caption.final', segment_id: 's1', text: 'Hello there.', audio_start_ms: 1200,
                       audio_end_ms: 2500});
          c._dispatch({type: 'caption.final', segment_id: 's2', text: 'Second line.', audio_start_ms: 3000,
                       audio_end_ms: 4100});
          c._dispatch({type: 'input_audio_buffer.speech_started', audio_start_ms: 4500});
          c._dispatch({type: 'caption.partial', segment_id: 's3', committed: 'still', tentative: 'talking',
                       audio_start_ms: 4500, audio_end_ms: 5000});
        }""")
        assert b.page.inner_text("#announcer") == "Second line."  # finals only reach the live region
        with b.page.expect_download() as info:
            b.page.click("#transcript-vtt")
        vtt = _read(info)
        assert vtt.startswith("WEBVTT\n\n")
        assert "00:00:01.200 --> 00:00:02.500\nHello there." in vtt
        with b.page.expect_download() as info:
            b.page.click("#transcript-srt")
        srt = _read(info)
        assert srt.startswith("1\n00:00:01,200 --> 00:00:02,500\nHello there.\n\n2\n00:00:03,000 --> 00:00:04,100")
        with b.page.expect_download() as info:
            b.page.click("#transcript-text")
        assert _read(info) == "Hello there.\nSecond line.\n"
        b.page.click("#transcript-copy")
        b.wait_js("copied feedback", "document.getElementById('transcript-copy').textContent === 'Copied'", 3000)

        assert b.page.inner_text("#speech-indicator") == "speech"
        b.page.click("#disconnect")
        b.wait_js("ended", "document.body.dataset.sessionEnded === 'true'", 15_000)
        assert b.page.inner_text("#speech-indicator") == "silence"
        assert b.page.inner_text("#caption-committed") == "" and b.page.inner_text("#caption-tentative") == ""
        assert b.page.evaluate("document.querySelectorAll('#transcript li.final').length") == 2
        assert b.page.evaluate("document.querySelector('#transcript li.partial').classList.contains('stale')")
        assert b.page.is_disabled("#mute")
        # a new session keeps the transcript until Clear
        b.page.click("#connect")
        b.wait_js("reconnect", CONNECTED, 30_000)
        assert b.page.evaluate("document.querySelectorAll('#transcript li.final').length") == 2
        b.page.click("#transcript-clear")
        assert b.page.evaluate("document.querySelectorAll('#transcript li').length") == 0


def test_agent_conversation_downloads_with_tool_calls(tmp_path):
    with serve(tmp_path, *IDLE_SERVER) as served, chromium_page(served, tmp_path) as b:
        b.open("/agent")
        b.page.evaluate("""() => {
          const c = window.rtcAgent.client;
          c._dispatch({type: 'conversation.item.input_audio_transcription.completed', item_id: 'u1',
                       transcript: 'What is 17 times 23?'});
          c._dispatch({type: 'response.created', response: {id: 'r1'}});
          c._dispatch({type: 'response.function_call_arguments.done', response_id: 'r1', call_id: 'c1',
                       name: 'calculate', arguments: '{"expression": "17 * 23"}'});
          c._dispatch({type: 'conversation.item.created', item: {type: 'function_call_output', call_id: 'c1',
                       output: '{"result": 391}'}});
          c._dispatch({type: 'response.output_audio_transcript.delta', response_id: 'r1', delta: 'It is 391.'});
          c._dispatch({type: 'response.done', response: {id: 'r1', status: 'completed'}});
        }""")
        with b.page.expect_download() as info:
            b.page.click("#agent-download-json")
        record = json.loads(_read(info))
        assert record["items"] == [{"role": "user", "text": "What is 17 times 23?"},
                                   {"role": "assistant", "text": "It is 391.", "status": "completed"}]
        assert record["tool_calls"][0]["name"] == "calculate"
        assert record["tool_calls"][0]["arguments"] == {"expression": "17 * 23"}
        assert record["tool_calls"][0]["output"] == {"result": 391}
        with b.page.expect_download() as info:
            b.page.click("#agent-download-text")
        text = _read(info)
        assert "You: What is 17 times 23?" in text and "[tool calculate]" in text and "391" in text
        assert b.page.inner_text("#announcer") == "It is 391."


def test_mute_stops_captions_and_tells_the_server(tmp_path):
    wav = _speech_wav(tmp_path)
    with serve(tmp_path, *IDLE_SERVER) as served, chromium_page(served, tmp_path, audio_file=wav) as b:
        b.open("/captions")
        b.page.evaluate("window.__finals = 0; window.__partials = 0")
        b.page.click("#connect")
        b.wait_js("connect", CONNECTED, 30_000)
        b.page.evaluate("""() => {
          window.rtcAgent.client.on('caption.partial', () => { window.__partials += 1; });
          window.rtcAgent.client.on('caption.final', () => { window.__finals += 1; });
          window.__sent = [];
          window.__errors = [];
          window.rtcAgent.client.addEventListener('sent', (e) => window.__sent.push(e.detail.type));
          window.rtcAgent.client.on('error', (e) => window.__errors.push(e.error && e.error.code));
        }""")
        b.wait_js("captions flow", "window.__partials + window.__finals > 0", 60_000)
        b.page.keyboard.press("Alt+m")  # the shortcut
        assert b.page.evaluate("window.rtcAgent.muted") is True
        assert b.page.evaluate("window.rtcAgent.devices.audioTrack.enabled") is False
        assert b.page.get_attribute("#mute", "aria-pressed") == "true"
        assert "input_audio.muted" in b.page.evaluate("window.__sent")
        b.page.wait_for_timeout(3000)  # what was in flight settles (the utterance ends at once)
        before = b.page.evaluate("window.__partials + window.__finals")
        b.page.wait_for_timeout(4000)
        assert b.page.evaluate("window.__partials + window.__finals") == before  # nothing new while muted
        assert b.page.evaluate("window.__errors") == []  # the server took input_audio.muted
        b.page.click("#mute")
        assert b.page.evaluate("window.rtcAgent.devices.audioTrack.enabled") is True


def test_a_denied_camera_falls_back_to_audio_only(tmp_path):
    with serve(tmp_path, *IDLE_SERVER) as served, chromium_page(served, tmp_path) as b:
        b.page.add_init_script("""(() => {
          const md = navigator.mediaDevices;
          const original = md.getUserMedia.bind(md);
          md.getUserMedia = (constraints) => (constraints && constraints.video)
            ? Promise.reject(new DOMException('Permission denied', 'NotAllowedError'))
            : original(constraints);
        })()""")
        b.open("/captions")
        b.page.click("#connect")
        b.wait_js("connect with audio only", CONNECTED, 30_000)
        assert b.page.evaluate("document.body.dataset.audioOnly") == "true"
        assert "audio only" in b.page.inner_text("#error-message")
        assert b.page.evaluate("window.rtcAgent.devices.videoTrack") is None
        assert b.page.is_disabled("#camera-toggle")
        b.wait_js("quality pill", "document.getElementById('quality').dataset.quality !== 'none'", 15_000)


def test_interpretation_lines_language_and_downloads(tmp_path):
    with serve(tmp_path, *IDLE_SERVER) as served, chromium_page(served, tmp_path) as b:
        b.open("/interpret")
        b.page.evaluate("""() => {
          const c = window.rtcAgent.client;
          c._dispatch({type: 'translation.chunk', index: 0, action: 'EMIT', text: 'Good morning.',
                       source_text: 'Buenos días.', audio_start_ms: 0, audio_end_ms: 1600,
                       source_language: 'es'});
          c._dispatch({type: 'translation.chunk', index: 1, action: 'EMIT', text: 'How are you?',
                       source_text: '¿Cómo estás?', audio_start_ms: 1600, audio_end_ms: 2400});
          c._dispatch({type: 'translation.chunk', index: 2, action: 'EMIT', text: 'After a pause.',
                       source_text: 'Después.', audio_start_ms: 6000, audio_end_ms: 7600});
        }""")
        lines = b.page.eval_on_selector_all("#target-text .tline", "ls => ls.map(l => l.textContent.trim())")
        assert lines == ["0:00 Good morning. How are you?", "0:06 After a pause."]  # a new line after the pause
        assert b.page.inner_text("#announcer") == "After a pause."
        assert b.page.inner_text("#detected-language") == "detected: es"
        assert b.page.evaluate("document.getElementById('source-text').lang") == "es"
        with b.page.expect_download() as info:
            b.page.click("#interpret-download-target-vtt")
        vtt = _read(info)
        assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.600\nGood morning.")
        with b.page.expect_download() as info:
            b.page.click("#interpret-download-source-text")
        assert _read(info) == "Buenos días. ¿Cómo estás? Después.\n"
        # the embedded engine is asked for the source text too
        assert b.page.evaluate("window.rtcAgent.app.configure({}).source_text") is True
        # with auto the browser's language goes along as the prior (as on the captions page)
        assert b.page.evaluate("window.rtcAgent.app.configure({}).language_prior") == b.page.evaluate(
            "navigator.languages[0] || navigator.language")


def test_interpret_source_pane_shows_source_captions(tmp_path):
    """The embedded engine's source comes as caption.partial / caption.final: final lines with time and language,
    the partial greyed, the language shown, source downloads from the finals, and no chunk source_text twice."""
    with serve(tmp_path, *IDLE_SERVER) as served, chromium_page(served, tmp_path) as b:
        b.open("/interpret")
        b.page.evaluate("""() => {
          const c = window.rtcAgent.client;
          c._dispatch({type: 'caption.partial', segment_id: 's1', committed: 'Buenos', tentative: 'días',
                       audio_start_ms: 0, audio_end_ms: 900});
        }""")
        partial = b.page.eval_on_selector("#source-text .sline.partial", "e => e.textContent")
        assert "Buenos" in partial and "días" in partial
        assert b.page.eval_on_selector("#source-text .sline.partial .tentative", "e => e.textContent") == " días"
        b.page.evaluate("""() => {
          const c = window.rtcAgent.client;
          c._dispatch({type: 'caption.final', segment_id: 's1', text: 'Buenos días.', language: 'es',
                       audio_start_ms: 0, audio_end_ms: 1600});
          c._dispatch({type: 'translation.chunk', index: 0, action: 'EMIT', text: 'Good morning.',
                       source_text: 'Buenos días.', audio_start_ms: 0, audio_end_ms: 1600, source_language: 'pt'});
          c._dispatch({type: 'caption.partial', segment_id: 's2', committed: '', tentative: 'Hasta',
                       audio_start_ms: 61000, audio_end_ms: 61500, language: 'es'});
          c._dispatch({type: 'caption.final', segment_id: 's2', text: 'Hasta luego.', language: 'es',
                       audio_start_ms: 61000, audio_end_ms: 62400});
        }""")
        lines = b.page.eval_on_selector_all("#source-text .sline", "ls => ls.map(l => [l.textContent, l.lang,"
                                            " l.classList.contains('final')])")
        assert lines == [["0:00 Buenos días.", "es", True], ["1:01 Hasta luego.", "es", True]]
        assert not b.page.query_selector("#source-text .src")  # the chunk's source_text is not shown twice
        assert b.page.inner_text("#detected-language") == "detected: es"  # the captions' language, not the chunk's
        with b.page.expect_download() as info:
            b.page.click("#interpret-download-source-vtt")
        vtt = _read(info)
        assert "00:00:00.000 --> 00:00:01.600\nBuenos días." in vtt and "Hasta luego." in vtt
        with b.page.expect_download() as info:
            b.page.click("#interpret-download-source-text")
        assert _read(info) == "Buenos días. Hasta luego.\n"


def test_connect_is_an_early_tab_stop_and_alt_c_connects(tmp_path):
    with serve(tmp_path, *IDLE_SERVER) as served, chromium_page(served, tmp_path) as b:
        b.page.set_viewport_size({"width": 1280, "height": 900})
        b.open("/interpret")
        stops = 0
        while stops < 30 and b.page.evaluate("document.activeElement && document.activeElement.id") != "connect":
            b.page.keyboard.press("Tab")
            stops += 1
        assert stops <= 9, stops  # skip link, brand, the app links, then Connect
        # on a wide screen the session card is still drawn on the right of the app
        side = b.page.eval_on_selector(".side", "e => e.getBoundingClientRect().left")
        app = b.page.eval_on_selector(".app-area", "e => e.getBoundingClientRect().left")
        assert side > app
        b.page.screenshot(path=str(tmp_path / "interpret.png"), full_page=True)
        b.page.keyboard.press("Alt+c")
        b.wait_js("connect by shortcut", CONNECTED, 30_000)
