"""Simultaneous interpretation: the SimulInfer (Hy-SimulMT) policy over VAD-gated audio chunks, with speech out."""

from rtc_agent.apps.interpret.app import InterpretApp, build_pipeline
from rtc_agent.apps.interpret.chunker import AudioChunk, ChunkCutter
from rtc_agent.apps.interpret.config import CONFIG_KEYS, resolve_config
from rtc_agent.apps.interpret.pipeline import InterpretPipeline
from rtc_agent.apps.interpret.policy import SimulPolicy
from rtc_agent.apps.interpret.policy_config import PolicyConfig
from rtc_agent.apps.interpret.speech import TranslationSpeaker, TranslationSpeechCatchup

__all__ = [
    "CONFIG_KEYS",
    "AudioChunk",
    "ChunkCutter",
    "InterpretApp",
    "InterpretPipeline",
    "PolicyConfig",
    "SimulPolicy",
    "TranslationSpeaker",
    "TranslationSpeechCatchup",
    "build_pipeline",
    "resolve_config",
]
