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


def test_a_cancelled_reply_that_said_nothing_is_neither_shown_nor_exported(tmp_path):
    """Speech over the agent cuts replies before their first word: no empty "cancelled" bubble stays on the page,
    and the text export has no blank "Agent:" line; a reply cut after some words keeps them and its note."""
    with serve(tmp_path, "--preload", "vad,asr") as served, chromium_page(served, tmp_path) as b:
        b.open("/agent")
        exported = b.page.evaluate("""async () => {
          const c = window.rtcAgent.client;
          c._dispatch({type: 'conversation.item.input_audio_transcription.completed', item_id: 'u1',
                       transcript: 'Tell me a story.'});
          c._dispatch({type: 'response.created', response: {id: 'r1'}});
          c._dispatch({type: 'response.done', response: {id: 'r1', status: 'cancelled', output: []}});
          c._dispatch({type: 'response.created', response: {id: 'r2'}});
          c._dispatch({type: 'response.output_audio_transcript.delta', response_id: 'r2', item_id: 'a2',
                       delta: 'Once upon a time '});
          c._dispatch({type: 'response.done', response: {id: 'r2', status: 'cancelled', output: []}});
          c._dispatch({type: 'input_audio_buffer.speech_started', audio_start_ms: 9000});
          const { conversationRecord, conversationText } = await import('/static/js/apps/agent.js');
          const record = conversationRecord(document.getElementById('conversation'),
                                            document.getElementById('tool-cards'));
          return {
            bubbles: [...document.querySelectorAll('#conversation .bubble')].map(x => x.textContent),
            text: conversationText(record), items: record.items.length,
          };
        }""")
        assert len(exported["bubbles"]) == 3, exported  # the question, the cut reply, the turn being heard
        assert "cancelled" in exported["bubbles"][1] and "Once upon a time" in exported["bubbles"][1]
        lines = exported["text"].strip().splitlines()
        assert lines == ["You: Tell me a story.", "Agent: Once upon a time"], exported
        assert exported["items"] == 2
        assert not b.page_errors(), b.diagnose("no page errors")
