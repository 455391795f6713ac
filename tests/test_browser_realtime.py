"""OpenAI's WebRTC browser flow in headless Chromium against a real ``rtc-agent serve``: the demo page mints an
ephemeral key, posts its SDP offer (no trickle, as OpenAI's guide does) to ``/v1/realtime/calls``, gets
``session.created`` on the ``oai-events`` channel, and a spoken question is answered with audible speech."""

from __future__ import annotations

import numpy as np
import pytest

from tests.browser import chromium_page, requires_chromium, serve
from tests.openai_stub import OpenAIStub, text_reply
from tests.speech import synthesize, write_wav
from tests.test_browser_agent import StubInThread

pytestmark = requires_chromium
pytest.importorskip("playwright.sync_api")

REPLY = "Hello, I can hear you loud and clear."


@pytest.mark.real_model
def test_openai_browser_flow_gets_session_created_and_audible_reply(tmp_path):
    pause = np.zeros(48000, dtype=np.int16)
    wav = write_wav(tmp_path / "ask.wav", np.concatenate(
        [pause, synthesize("Can you hear me?", 48000), pause, pause, pause]), 48000)
    with StubInThread(OpenAIStub(default=text_reply(REPLY))) as stub, \
            serve(tmp_path, "--llm-engine", "openai", "--llm-url", stub.url, "--preload", "vad,asr,tts") as served, \
            chromium_page(served, tmp_path, audio_file=wav) as b:
        b.step("load /realtime-demo", lambda: b.page.goto(f"{served.base}/realtime-demo", wait_until="load"))
        b.wait_js("page ready", "document.body.dataset.ready === 'true'", 10_000)
        b.page.click("#connect")
        b.wait_js("session.created", "window.realtimeDemo.events.some(e => e.type === 'session.created')", 20_000)
        b.wait_js("connected", "document.querySelector('#state').textContent.trim() === 'connected'", 20_000)
        b.wait_js("the spoken question is transcribed",
                  "window.realtimeDemo.events.some(e => e.type === "
                  "'conversation.item.input_audio_transcription.completed' && /hear/i.test(e.transcript))", 60_000)
        b.wait_js("response.done", "window.realtimeDemo.events.some(e => e.type === 'response.done' && "
                  "e.response.status === 'completed')", 60_000)
        b.wait_js("reply audible", "window.realtimeDemo.maxLevel > 0.01", 20_000)
        state = b.page.evaluate("({events: window.realtimeDemo.events.map(e => e.type), "
                                "reply: window.realtimeDemo.reply, location: window.realtimeDemo.callLocation})")
        assert state["reply"].strip() == REPLY, state
        assert state["location"].startswith("/v1/realtime/calls/")
        for kind in ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped", "response.created",
                     "output_audio_buffer.started", "response.output_audio_transcript.done"):
            assert kind in state["events"], (kind, state["events"])
        assert not b.page_errors(), b.diagnose("no page errors")
