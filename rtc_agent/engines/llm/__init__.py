"""LLM engines, chosen from settings by :func:`engine_spec`: the embedded SmolLM2/Qwen engine (:mod:`.smollm`)
and the OpenAI-compatible remote engine (:mod:`.openai`), both :class:`~.engine.ChatEngine` subclasses.

The chat protocol: :mod:`.messages` (requests, deltas, results), :mod:`.job` (the worker job and its cancel
token), :mod:`.engine` (the engine contract), :mod:`.stream` (the engine thread -> event loop bridge) and
:mod:`.client` (what an app holds). How a streamed chat flows::

    app (event loop)                       worker                      engine thread
    LLMClient.stream(request) ─ ChatJob ──> Worker.call("llm", job) ──> ChatEngine.run_batch([job])
         ^                                  (bounded queue,                 for delta in generate(request, cancel):
         │                                   concurrency, metrics)              job.sink(delta) ──┐
    ChatStream (async iterator) <── DeltaBridge (bounded, call_soon_threadsafe) <─────────────────┘

Typical use from an app::

    worker.add(engine_spec(settings))          # at server start, once
    llm = LLMClient(worker, "llm")
    async with llm.stream(ChatRequest(messages=[...], tools=[...], max_tokens=200)) as stream:
        async for delta in stream:              # ChatDelta: text, tool_calls, finish_reason, usage
            ...

Importing this package does not import torch or transformers: the embedded engine imports them when it loads.
"""

from __future__ import annotations

from typing import Any

from rtc_agent.config import Settings, SettingsError
from rtc_agent.engines.llm.client import LLMClient
from rtc_agent.engines.llm.engine import ChatEngine
from rtc_agent.engines.llm.job import CancelToken, ChatJob
from rtc_agent.engines.llm.messages import (
    FINISH_REASONS,
    ChatAccumulator,
    ChatDelta,
    ChatRequest,
    ChatResult,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from rtc_agent.engines.llm.stream import ChatStream, DeltaBridge
from rtc_agent.worker import EngineSpec

__all__ = [
    "EMBEDDED_NAMES",
    "FINISH_REASONS",
    "CancelToken",
    "ChatAccumulator",
    "ChatDelta",
    "ChatEngine",
    "ChatJob",
    "ChatRequest",
    "ChatResult",
    "ChatStream",
    "DeltaBridge",
    "LLMClient",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
    "engine_spec",
]

#: ``--llm-engine`` values that select the embedded engine.
EMBEDDED_NAMES = ("embedded", "smollm", "transformers")


def engine_spec(settings: Settings, *, name: str = "llm", concurrency: int | None = None, max_queue: int = 16,
                api_key: str | None = None, **engine_options: Any) -> EngineSpec:
    """The worker registration of the LLM chosen by ``settings`` (``llm_engine``, ``llm_url``, ``llm_model``).

    - ``embedded`` (default): :class:`~rtc_agent.engines.llm.smollm.SmolLMEngine` with ``llm_model`` (empty: the
      packaged default, ``packaged.DEFAULT_MODEL``; ``smollm2-135m`` or ``qwen2.5-coder-0.5b`` name a packaged model),
      ``settings.cache_dir`` and ``llm_precision``; ``concurrency`` 1 by default (one
      generation at a time on the CPU); it yields the CPU to the ``tts`` and ``asr`` engines between tokens.
    - ``openai``: :class:`~rtc_agent.engines.llm.openai.OpenAIChatEngine` on ``llm_url`` (required) with
      ``llm_model`` (empty: the server's first model); ``concurrency`` 8 by default (generations in flight at
      once, each holding one worker thread). The API key comes from ``api_key``, else ``llm_api_key``.

    ``engine_options`` go to the engine's constructor (e.g. ``read_timeout=120`` or ``repetition_penalty=1.0``).
    Chat engines run the jobs of a batch one by one, so ``max_batch`` is 1. Raises ``SettingsError`` for an
    unknown engine or a missing URL. Nothing is loaded here: the factory runs in the worker's thread.
    """
    kind = (settings.llm_engine or "embedded").strip().lower()
    model = settings.llm_model.strip()
    if kind in EMBEDDED_NAMES:
        cache_dir = settings.cache_dir
        engine_options.setdefault("precision", settings.llm_precision)
        engine_options.setdefault("batch_int8", str(getattr(settings, "llm_batch_int8", "auto")))
        engine_options.setdefault("adaptive_threads", bool(getattr(settings, "llm_adaptive_threads", True)))
        engine_options.setdefault("row_cache_bytes", int(getattr(settings, "llm_row_cache_mb", 128)) * 2**20)

        def embedded() -> Any:
            from rtc_agent.engines.llm.packaged import DEFAULT_MODEL
            from rtc_agent.engines.llm.smollm import SmolLMEngine

            return SmolLMEngine(model or DEFAULT_MODEL, cache_dir=cache_dir, **engine_options)

        # the LLM runs far ahead of speech: its next token waits while a clause is synthesized or a turn recognized
        return EngineSpec(name=name, factory=embedded, max_queue=max_queue, max_batch=1,
                          concurrency=concurrency or 1, yields_to=("tts", "asr"))
    if kind == "openai":
        url = settings.llm_url.strip()
        if not url:
            raise SettingsError("--llm-engine openai needs --llm-url (the server's base URL, e.g. http://host:8000/v1)")
        key = api_key or settings.llm_api_key or None
        from rtc_agent.engines.llm.openai import OpenAIChatEngine, chat_completions_url

        try:
            chat_completions_url(url)
        except ValueError as exc:
            raise SettingsError(f"--llm-url: {exc}") from None

        def remote() -> Any:
            return OpenAIChatEngine(url, model, api_key=key, **engine_options)

        return EngineSpec(name=name, factory=remote, max_queue=max_queue, max_batch=1,
                          concurrency=concurrency or 8)
    raise SettingsError(f"unknown LLM engine {settings.llm_engine!r}: use embedded or openai")
