"""Speech recognition (and Whisper's X->English translation) engines."""

from __future__ import annotations

from typing import Any

from rtc_agent.engines.asr.base import SAMPLE_RATE, Segment, TranscribeRequest, Transcript
from rtc_agent.worker import EngineSpec

__all__ = ["SAMPLE_RATE", "Segment", "TranscribeRequest", "Transcript", "engine_spec", "english_only"]


def english_only(settings: Any) -> bool:
    """Whether the embedded recognizer is an English-only Whisper (a ``.en`` model such as ``tiny.en``): it hears
    every language as English, so sessions may ask only for ``en`` (or ``auto``)."""
    model = (getattr(settings, "asr_model", "") or "").strip().lower()
    embedded = (getattr(settings, "asr_engine", "embedded") or "embedded").strip().lower() == "embedded"
    return embedded and model.endswith((".en", "-en"))


def engine_spec(settings: Any, name: str = "asr") -> EngineSpec:
    """The ASR engine chosen by ``asr_engine``: ``embedded`` (faster-whisper) or ``openai`` (remote)."""
    kind = settings.asr_engine
    if kind == "embedded":
        from rtc_agent.engines.asr.whisper import PARALLEL_DECODES, WhisperEngine

        def factory() -> WhisperEngine:
            return WhisperEngine(settings.asr_model, cache_dir=settings.cache_dir, device=settings.asr_device,
                                 compute_type=settings.asr_compute_type, threads=settings.asr_threads,
                                 parallel=PARALLEL_DECODES)

        # Two batches at once (each on its share of the cores: whisper.decode_threads); up to 8 sessions a batch.
        return EngineSpec(name=name, factory=factory, max_queue=64, max_batch=8, batch_window_ms=5.0,
                          concurrency=PARALLEL_DECODES)
    if kind == "openai":
        from rtc_agent.engines.asr.openai import OpenAIASREngine

        def remote() -> OpenAIASREngine:
            return OpenAIASREngine(settings.asr_url, settings.asr_model, api_key=settings.asr_api_key)

        return EngineSpec(name=name, factory=remote, max_queue=64, max_batch=1, concurrency=8)
    raise ValueError(f"unknown asr_engine {kind!r}: use embedded or openai")
