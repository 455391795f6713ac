"""The agent page in a real browser: Chromium's fake microphone asks for something, an OpenAI-compatible server
(standing in for a capable LLM) answers with a call to the page's own browser tool, and the page changes."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest

from tests.browser import chromium_page, requires_chromium, serve
from tests.openai_stub import OpenAIStub, StubReply, text_reply, tool_call_reply
from tests.speech import synthesize, write_wav

pytestmark = requires_chromium
pytest.importorskip("playwright.sync_api")


class StubInThread:
    """The OpenAI stub on its own event loop in a thread (the browser tests are synchronous)."""

    def __init__(self, stub: OpenAIStub) -> None:
        self.stub = stub
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.stub.start(), self.loop).result(10)
        return self.stub

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.stub.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def respond(body: dict[str, Any]) -> StubReply:
    if any(m.get("role") == "tool" for m in body["messages"]):
        return text_reply("Done, the banner is up.")
    names = [t["function"]["name"] for t in body.get("tools", [])]
    assert "show_banner" in names, names  # the page announced its browser tool
    return tool_call_reply([("show_banner", {"text": "Hello from the agent", "tone": "success"})])


@pytest.mark.real_model
def test_browser_tool_changes_the_page(tmp_path):
    pause = np.zeros(48000, dtype=np.int16)
    wav = write_wav(tmp_path / "ask.wav",
                    np.concatenate([pause, synthesize("Please show me a banner.", 48000), pause, pause]), 48000)
    with StubInThread(OpenAIStub(responder=respond)) as stub, \
            serve(tmp_path, "--llm-engine", "openai", "--llm-url", stub.url, "--preload", "vad,asr,tts") as served, \
            chromium_page(served, tmp_path, audio_file=wav) as b:
        b.open("/agent")
        b.page.click("#connect")
        b.wait_js("connect", "document.querySelector('#connection-state').textContent.trim() === 'connected'",
                  20_000)
        b.wait_js("banner shown by the browser tool",
                  "(() => { const e = document.getElementById('agent-banner'); "
                  "return e && !e.hidden && e.textContent.includes('Hello from the agent'); })()", 60_000)
        assert b.page.get_attribute("#agent-banner", "data-tone") == "success"
        b.wait_js("tool card done", "[...document.querySelectorAll('.tool-card')]"
                  ".some(c => c.dataset.status === 'done' && c.textContent.includes('show_banner'))", 20_000)
        b.wait_js("spoken answer in the conversation", "[...document.querySelectorAll('.bubble.assistant')]"
                  ".some(x => x.textContent.includes('banner is up'))", 20_000)
        assert not b.page_errors(), b.diagnose("no page errors")
