"""The OpenAI-compatible LLM engine against a real in-process streaming server (tests/openai_stub.py), through the
worker and the streaming bridge, as the agent uses it."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import socket
from collections.abc import AsyncIterator

import pytest

from rtc_agent.apps.agent.reply_items import ParsedToolCall, SpokenText
from rtc_agent.apps.agent.reply_parser import ReplyParser
from rtc_agent.config import Settings, SettingsError
from rtc_agent.engines.llm import CancelToken, ChatRequest, LLMClient, engine_spec
from rtc_agent.engines.llm.openai import OpenAIChatEngine, chat_completions_url
from rtc_agent.errors import EngineError
from rtc_agent.worker import EngineSpec, Worker
from tests.openai_stub import (
    OpenAIStub,
    StubReply,
    error_reply,
    raw_tool_call_reply,
    text_reply,
    tool_call_reply,
)

TIME_TOOL = {"type": "function", "function": {
    "name": "get_current_time", "description": "time",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}}}}


def request(text: str = "Hello", **kwargs: object) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def stub() -> AsyncIterator[OpenAIStub]:
    async with OpenAIStub(models=("stub-model", "other")) as server:
        yield server


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    w = Worker()
    yield w
    await w.close()


def settings_for(url: str, model: str = "stub-model") -> Settings:
    return dataclasses.replace(Settings(), llm_engine="openai", llm_url=url, llm_model=model)


async def client(worker: Worker, url: str, *, model: str = "stub-model", concurrency: int = 2,
                 **options: object) -> LLMClient:
    worker.add(engine_spec(settings_for(url, model), concurrency=concurrency, **options))
    await worker.load("llm")
    return LLMClient(worker, "llm")


async def test_text_stream_and_request_body(stub: OpenAIStub, worker: Worker) -> None:
    stub.push(text_reply("Paris is the capital of France.", piece_size=5))
    llm = await client(worker, stub.url)
    req = request("Capital of France?", tools=[TIME_TOOL], max_tokens=40, temperature=0.2, stop=["\n\n"])
    deltas = []
    async with llm.stream(req) as stream:
        async for delta in stream:
            deltas.append(delta)
    assert "".join(d.text for d in deltas) == "Paris is the capital of France."
    assert len([d for d in deltas if d.text]) > 3  # streamed, not one block
    assert deltas[-1].finish_reason == "stop"
    assert stream.result is not None
    assert stream.result.text == "Paris is the capital of France."
    assert stream.result.usage is not None and stream.result.usage.prompt_tokens == 12
    assert stream.first_delta_s is not None
    body = stub.requests[-1].body
    assert body["model"] == "stub-model" and body["stream"] is True and body["max_tokens"] == 40
    assert body["temperature"] == 0.2 and body["stop"] == ["\n\n"]
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"][0]["function"]["name"] == "get_current_time"
    assert body["messages"] == [{"role": "user", "content": "Capital of France?"}]
    assert stub.completed == 1


async def test_structured_tool_call_deltas(stub: OpenAIStub, worker: Worker) -> None:
    calls = [("get_current_time", {"timezone": "Europe/Paris"}), ("calculate", {"expression": "1+1"})]
    stub.push(tool_call_reply(calls, text="Let me check.", fragments=4, call_ids=["call_a", "call_b"]))
    llm = await client(worker, stub.url)
    parser = ReplyParser()
    items = []
    async with llm.stream(request("time?", tools=[TIME_TOOL])) as stream:
        async for delta in stream:
            items += parser.feed(delta)
    result = stream.result
    assert result is not None and result.finish_reason == "tool_calls"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("call_a", "get_current_time", {"timezone": "Europe/Paris"}), ("call_b", "calculate", {"expression": "1+1"})]
    parsed = [i for i in items if isinstance(i, ParsedToolCall)]
    assert [(c.call_id, c.name, c.arguments) for c in parsed] == [
        ("call_a", "get_current_time", {"timezone": "Europe/Paris"}), ("call_b", "calculate", {"expression": "1+1"})]
    assert "".join(i.text for i in items if isinstance(i, SpokenText)) == "Let me check."


async def test_raw_tool_call_text_in_content(stub: OpenAIStub, worker: Worker) -> None:
    stub.push(raw_tool_call_reply([("get_current_time", {"timezone": "UTC"})], text_before="One moment. ",
                                  piece_size=3))
    llm = await client(worker, stub.url)
    parser = ReplyParser()
    spoken = []
    calls = []
    async with llm.stream(request("time?")) as stream:
        async for delta in stream:
            for item in parser.feed(delta):
                if isinstance(item, SpokenText):
                    spoken.append(item.text)
                else:
                    calls.append(item)
    assert "<tool_call>" in stream.result.text  # the engine passes raw markup through untouched
    assert "".join(spoken) == "One moment. "
    assert all("<" not in s for s in spoken)
    assert len(calls) == 1 and isinstance(calls[0], ParsedToolCall)
    assert calls[0].name == "get_current_time" and calls[0].arguments == {"timezone": "UTC"}


async def test_cancel_closes_the_stream_and_frees_the_engine(stub: OpenAIStub, worker: Worker) -> None:
    hold = asyncio.Event()
    # deltas: the role-only delta (not forwarded: no content), "one ", "two ", then the server holds
    stub.push(text_reply("one two three four five six", piece_size=4, hold=hold, hold_after=3),
              text_reply("after"))
    llm = await client(worker, stub.url, concurrency=1)
    stream = llm.stream(request())
    got = [await stream.__anext__(), await stream.__anext__()]
    assert [d.text for d in got] == ["one ", "two "]
    await stream.aclose()
    await stub.wait_disconnect()
    assert stream.done and stream.cancelled
    assert stream.result is not None and stream.result.finish_reason == "cancelled"
    assert stub.completed == 0
    # the single engine thread is free again: the next request completes
    result = await llm.complete(request("again"))
    assert result.text == "after"
    hold.set()


async def test_cancelling_the_consumer_task_cancels_generation(stub: OpenAIStub, worker: Worker) -> None:
    hold = asyncio.Event()
    stub.push(text_reply("never finished", hold=hold, hold_after=2))  # role delta, "neve", hold
    llm = await client(worker, stub.url)
    stream = llm.stream(request())
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in stream:
            first.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(10):
        await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await stub.wait_disconnect()
    await stream.aclose()
    assert stream.done and stream.result is not None and stream.result.finish_reason == "cancelled"


async def test_a_dropped_stream_cancels_its_generation(stub: OpenAIStub, worker: Worker) -> None:
    hold = asyncio.Event()
    stub.push(text_reply("forgotten stream", hold=hold, hold_after=2))
    llm = await client(worker, stub.url)
    stream = llm.stream(request())
    assert (await stream.__anext__()).text
    del stream  # never closed: garbage collection cancels it
    gc.collect()
    await stub.wait_disconnect()


async def test_worker_timeout_stops_the_generation(stub: OpenAIStub, worker: Worker) -> None:
    hold = asyncio.Event()
    stub.push(text_reply("too slow", hold=hold, hold_after=2))
    llm = await client(worker, stub.url)
    stream = llm.stream(request(), timeout=0.3)
    with pytest.raises(EngineError) as err:
        async for _ in stream:
            pass
    assert err.value.code == "engine_timeout" and stream.error is err.value
    await stub.wait_disconnect()


async def test_slow_consumer_gets_every_delta_in_order(stub: OpenAIStub, worker: Worker) -> None:
    text = "".join(f"w{i} " for i in range(60))
    stub.push(text_reply(text, piece_size=3))
    worker.add(engine_spec(settings_for(stub.url)))
    llm = LLMClient(worker, "llm", buffer=1)  # the bridge holds one delta: the engine waits for the reader
    out = []
    async with llm.stream(request()) as stream:
        async for delta in stream:
            out.append(delta.text)
            await asyncio.sleep(0)
    assert "".join(out) == text


async def test_http_errors_are_clear(stub: OpenAIStub, worker: Worker) -> None:
    stub.push(error_reply(500, "model crashed"), error_reply(429, "slow down", retry_after=3),
              error_reply(400, "max_tokens is too large"))
    llm = await client(worker, stub.url)
    with pytest.raises(EngineError) as err:
        await llm.complete(request())
    assert err.value.code == "llm_http_error" and "500" in err.value.message and "model crashed" in err.value.message
    with pytest.raises(EngineError) as err:
        async with llm.stream(request()) as stream:
            async for _ in stream:
                pass
    assert err.value.code == "llm_busy" and err.value.retry_after == 3.0
    with pytest.raises(EngineError) as err:
        await llm.complete(request())
    assert "max_tokens is too large" in err.value.message


async def test_api_key_is_sent_and_checked(worker: Worker) -> None:
    async with OpenAIStub(api_key="sekret") as server:
        server.push(text_reply("ok"))
        worker.add(engine_spec(settings_for(server.url), api_key="sekret"))
        llm = LLMClient(worker, "llm")
        assert (await llm.complete(request())).text == "ok"
        assert server.requests[-1].headers["Authorization"] == "Bearer sekret"

        bad = OpenAIChatEngine(server.url, "stub-model", api_key="wrong")
        with pytest.raises(EngineError) as err:
            await asyncio.to_thread(lambda: list(bad.generate(request(), CancelToken())))
        assert err.value.code == "llm_unauthorized"


async def test_load_picks_the_first_model_when_none_is_configured(stub: OpenAIStub) -> None:
    engine = OpenAIChatEngine(stub.url, "")
    messages: list[str] = []
    await asyncio.to_thread(engine.load, messages.append)
    assert engine.model_name == "stub-model"
    assert any("stub-model" in m for m in messages)


async def test_unreachable_server(worker: Worker) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    # without a model name the load fails clearly; with one it is only reported
    with pytest.raises(EngineError) as err:
        await asyncio.to_thread(OpenAIChatEngine(url, "").load, lambda m: None)
    assert err.value.code == "llm_no_model"
    worker.add(engine_spec(settings_for(url)))
    with pytest.raises(EngineError) as err:
        await LLMClient(worker).complete(request())
    assert err.value.code == "llm_unreachable"


async def test_read_timeout(stub: OpenAIStub, worker: Worker) -> None:
    hold = asyncio.Event()
    stub.push(text_reply("slow", hold=hold, hold_after=1))
    llm = await client(worker, stub.url, read_timeout=0.3)
    with pytest.raises(EngineError) as err:
        await llm.complete(request())
    assert err.value.code == "llm_timeout"
    hold.set()


async def test_truncated_and_malformed_streams(stub: OpenAIStub, worker: Worker) -> None:
    stub.push(text_reply("cut", close_early=True),
              StubReply(deltas=[{"content": "a"}, "data: {not json\n\n"]),
              StubReply(deltas=[{"content": "b"}, 'data: {"error": {"message": "boom"}}\n\n']))
    llm = await client(worker, stub.url)
    codes = []
    for _ in range(3):
        with pytest.raises(EngineError) as err:
            await llm.complete(request())
        codes.append(err.value.code)
    assert codes == ["llm_stream_truncated", "llm_bad_response", "llm_http_error"]


async def test_server_that_ignores_stream_true(stub: OpenAIStub, worker: Worker) -> None:
    stub.push(tool_call_reply([("calculate", {"expression": "2+2"})], text="Sure.", force_json=True))
    llm = await client(worker, stub.url)
    deltas = [d async for d in llm.stream(request())]
    assert deltas[0].text == "Sure." and deltas[0].tool_calls[0].name == "calculate"
    assert deltas[-1].finish_reason == "tool_calls"


async def test_queue_overload_is_reported_by_the_stream(stub: OpenAIStub) -> None:
    hold = asyncio.Event()
    stub.default = text_reply("x", hold=hold, hold_after=0)
    worker = Worker()
    try:
        worker.add(EngineSpec("llm", lambda: OpenAIChatEngine(stub.url, "stub-model"), max_queue=1, concurrency=1))
        await worker.load("llm")
        llm = LLMClient(worker)
        running = llm.stream(request())
        while not stub.requests:  # the first one occupies the only engine thread
            await asyncio.sleep(0.01)
        queued = llm.stream(request())
        rejected = llm.stream(request())
        with pytest.raises(Exception) as err:
            await rejected.__anext__()
        assert getattr(err.value, "code", "") == "engine_overloaded"
        await queued.aclose()  # withdrawn from the queue before it ran
        hold.set()
        assert (await running.collect()).text == "x"
    finally:
        hold.set()
        await worker.close()


def test_engine_spec_selection(tmp_path: object) -> None:
    base = Settings()
    spec = engine_spec(base)
    assert spec.name == "llm" and spec.concurrency == 1 and spec.max_batch == 1
    remote = engine_spec(settings_for("http://127.0.0.1:9/v1"))
    assert remote.concurrency == 8
    engine = remote.factory()
    assert isinstance(engine, OpenAIChatEngine) and engine.url == "http://127.0.0.1:9/v1/chat/completions"
    with pytest.raises(SettingsError, match="--llm-url"):
        engine_spec(dataclasses.replace(base, llm_engine="openai"))
    with pytest.raises(SettingsError, match="unknown LLM engine"):
        engine_spec(dataclasses.replace(base, llm_engine="gpt5"))
    with pytest.raises(SettingsError):
        engine_spec(settings_for("ftp://x"))


def test_chat_completions_url() -> None:
    assert chat_completions_url("http://h:8000") == "http://h:8000/v1/chat/completions"
    assert chat_completions_url("http://h:8000/v1/") == "http://h:8000/v1/chat/completions"
    assert chat_completions_url("https://h/api/v1/chat/completions") == "https://h/api/v1/chat/completions"


def test_request_validation() -> None:
    with pytest.raises(ValueError):
        ChatRequest(messages=[])
    with pytest.raises(ValueError, match="role"):
        ChatRequest(messages=[{"role": "robot", "content": "x"}])
    with pytest.raises(ValueError, match="max_tokens"):
        request(max_tokens=0)
    with pytest.raises(ValueError, match="unique"):
        request(tools=[TIME_TOOL, TIME_TOOL])
    flat = request(tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}])
    assert flat.tools[0] == {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
