"""The remote speech-translation engine (OpenAI-compatible chat completions with audio parts, as vLLM serves speech
LLMs) against an in-process stub server that records every request."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from rtc_agent.apps.interpret import AudioChunk, PolicyConfig, SimulPolicy
from rtc_agent.config import Settings, SettingsError
from rtc_agent.engines import st
from rtc_agent.engines.tts.base import decode_wav
from rtc_agent.worker import Worker
from tests.conftest import free_port

SR = 16000


class Stub:
    """``/v1/models`` and a streaming ``/v1/chat/completions`` answering from a script of
    ``(text, finish_reason, prompt_tokens)`` (or an int: an HTTP error status)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.script: list[Any] = []

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "hy-simulmt"}]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        answer = self.script.pop(0) if self.script else ("", "stop", 10)
        if isinstance(answer, int):
            return web.json_response({"error": {"message": "model crashed"}}, status=answer)
        text, finish, prompt_tokens = answer
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(data: dict[str, Any]) -> None:
            await response.write(f"data: {json.dumps(data)}\n\n".encode())

        for piece in [text[i:i + 4] for i in range(0, len(text), 4)]:
            await send({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
        await send({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        await send({"choices": [], "usage": {"prompt_tokens": prompt_tokens,
                                             "completion_tokens": max(1, len(text.split()))}})
        await response.write(b"data: [DONE]\n\n")
        return response


@pytest.fixture
async def stub() -> AsyncIterator[tuple[Stub, str]]:
    server = Stub()
    app = web.Application()
    app.router.add_get("/v1/models", server.models)
    app.router.add_post("/v1/chat/completions", server.chat)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield server, f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


def settings_for(url: str, **extra: Any) -> Settings:
    return dataclasses.replace(Settings(), st_engine="openai", st_url=url, st_model="hy-simulmt",
                               st_api_key="secret-key", **extra)


async def run_policy(url: str, chunks: list[AudioChunk], *, finish: bool = False, **extra: Any
                     ) -> tuple[list[Any], Any]:
    settings = settings_for(url, **extra)
    worker = Worker()
    for spec in st.engine_specs(settings):
        worker.add(spec)
    translator = st.create_translator(settings, worker)
    events: list[Any] = []
    policy = SimulPolicy(PolicyConfig(max_model_len=translator.max_model_len), translator, events.append,
                         source_language="es", target_language="en")
    try:
        for c in chunks:
            await policy.process(c)
        if finish:
            await policy.finish()
    finally:
        await worker.close()
    return events, policy


def chunk(index: int) -> AudioChunk:
    start = 0 if index == 0 else 1600 + (index - 1) * 800
    end = start + (1600 if index == 0 else 800)
    t = np.arange((end - start) * SR // 1000) / SR
    audio = (0.2 * np.sin(2 * np.pi * (200 + 50 * index) * t)).astype(np.float32)
    return AudioChunk(index, start, end, audio, True, speech_end_ms=end)


def audio_part_samples(part: dict[str, Any]) -> int:
    assert part["type"] == "input_audio" and part["input_audio"]["format"] == "wav"
    pcm, rate = decode_wav(base64.b64decode(part["input_audio"]["data"]))
    assert rate == SR
    return pcm.size


async def test_history_travels_as_user_audio_and_assistant_text_turns(stub):
    server, url = stub
    server.script = [("", "stop", 100), ("The government", "stop", 180), ("announced", "stop", 260)]
    events, _ = await run_policy(url, [chunk(0), chunk(1), chunk(2)])
    assert [e.action for e in events if e.type == "translation.chunk"] == ["WAIT", "EMIT", "EMIT"]
    assert len(server.requests) == 3
    last = server.requests[-1]
    assert last["model"] == "hy-simulmt" and last["stream"] is True
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "Spanish" in last["messages"][0]["content"] and "English" in last["messages"][0]["content"]
    users = [m for m in last["messages"] if m["role"] == "user"]
    assert [audio_part_samples(m["content"][0]) for m in users] == [1600 * 16, 800 * 16, 800 * 16]
    assistants = [m["content"] for m in last["messages"] if m["role"] == "assistant"]
    assert assistants == ["", "The government"]  # a WAIT turn is an empty answer
    assert [len(r["messages"]) for r in server.requests] == [2, 4, 6]  # the whole history every turn
    assert "continue_final_message" not in last  # no prefix in target-only mode by default
    assert server.headers[0]["Authorization"] == "Bearer secret-key"


async def test_usage_gives_the_token_counts_and_the_budget_cut(stub):
    server, url = stub
    server.script = [("Hello", "stop", 300), ("there", "stop", 800), ("again", "stop", 50)]
    events, policy = await run_policy(url, [chunk(0), chunk(1), chunk(2)], st_max_model_len=1024)
    chunks = [e for e in events if e.type == "translation.chunk"]
    assert [(c.prompt_tokens, c.completion_tokens) for c in chunks] == [(300, 1), (800, 1), (50, 1)]
    assert policy.prompt_tokens == 1150 and policy.completion_tokens == 3
    resets = [e.reason for e in events if e.type == "translation.reset"]
    assert resets == ["budget"]  # 800 + 1 + 256 >= 1024
    assert len(server.requests[2]["messages"]) == 2  # after the cut: system + the new chunk only


async def test_finish_reason_length_cuts_and_flush_sends_the_backlog(stub):
    server, url = stub
    server.script = [("", "stop", 10), ("", "stop", 10), ("first words", "length", 20), ("x", "stop", 10),
                     ("", "stop", 10), ("what was left", "stop", 30)]
    events, _ = await run_policy(url, [chunk(i) for i in range(5)], finish=True)
    assert [e.reason for e in events if e.type == "translation.reset"] == ["length"]
    assert [c.stop_reason for c in events if c.type == "translation.chunk"][2] == "length"
    flush_request = server.requests[-1]
    final_user = flush_request["messages"][-1]
    assert final_user["role"] == "user"
    kinds = [p["type"] for p in final_user["content"]]
    assert kinds == ["input_audio", "text"] and "not translated" in final_user["content"][1]["text"]
    assert audio_part_samples(final_user["content"][0]) == 800 * 16  # the WAIT backlog: chunk 4
    flushes = [e for e in events if e.type == "translation.flush"]
    assert [(f.trigger, f.text) for f in flushes] == [("end", "what was left")]


async def test_source_target_mode_uses_a_continuation_prefix(stub):
    server, url = stub
    server.script = [(" hola\nTGT:", "stop", 40), (" el gobierno\nTGT: the government", "stop", 60)]
    events, _ = await run_policy(url, [chunk(0), chunk(1)], st_mode="source+target")
    chunks = [e for e in events if e.type == "translation.chunk"]
    assert [(c.action, c.text, c.source_text) for c in chunks] == [
        ("WAIT", "", "hola"), ("EMIT", "the government", "el gobierno")]
    last = server.requests[-1]
    assert last["continue_final_message"] is True and last["add_generation_prompt"] is False
    assert last["messages"][-1] == {"role": "assistant", "content": "SRC:"}
    history_answer = last["messages"][2]
    assert history_answer == {"role": "assistant", "content": "SRC: hola\nTGT:"}
    assert "TGT:" in last["messages"][0]["content"]


async def test_server_errors_are_reported_and_the_session_goes_on(stub):
    server, url = stub
    server.script = [500, ("fine", "stop", 10)]
    events, _ = await run_policy(url, [chunk(0), chunk(1)])
    errors = [e for e in events if e.type == "error"]
    assert len(errors) == 1 and "model crashed" in errors[0].error.message
    assert [e.action for e in events if e.type == "translation.chunk"] == ["WAIT", "EMIT"]


def test_settings_are_checked():
    with pytest.raises(SettingsError):
        st.engine_specs(dataclasses.replace(Settings(), st_engine="openai"))  # no URL
    with pytest.raises(SettingsError):
        st.engine_specs(dataclasses.replace(Settings(), st_engine="warp"))
    with pytest.raises(SettingsError):
        st.engine_specs(settings_for("http://h:1/v1", st_mode="both"))
    assert st.engine_specs(Settings()) == []  # embedded: reuses the asr engine
    assert [s.name for s in st.engine_specs(settings_for("http://h:1/v1"))] == ["st"]
    translator = st.ChatTranslator(None, mode="target", prefix="<en>")
    request = st.TranslateRequest(history=(), audio=np.zeros(SR, dtype=np.float32), start_ms=0, end_ms=1000)
    body = translator.chat_request(request)
    assert body.extra == {"continue_final_message": True, "add_generation_prompt": False}
    assert body.messages[-1] == {"role": "assistant", "content": "<en>"}
    audio_url = st.ChatTranslator(None, audio_part="audio_url").audio_content(np.zeros(160, dtype=np.float32))
    assert audio_url["audio_url"]["url"].startswith("data:audio/wav;base64,")
