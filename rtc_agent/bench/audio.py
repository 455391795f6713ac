"""The benchmarks' audio tools: resampling, Silero VAD speech segments, and offline Whisper.

Offline Whisper (faster-whisper's ``transcribe`` over a whole file: 30 s windows, beam 5, conditioned on the
previous text) is the baseline a streaming result is scored against.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.rtc.resampler import audio_resampler

__all__ = ["load_audio_48k", "load_audio_array", "offline_whisper", "resample", "speech_segments_ms"]


def resample(pcm: np.ndarray, rate: int, to_rate: int, *, fmt: str = "s16") -> np.ndarray:
    """Mono int16 ``pcm`` at ``rate`` -> ``to_rate``, as ``fmt`` samples (``s16``: int16, ``flt``: float32)."""
    import av

    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16",
                                       layout="mono")
    frame.sample_rate = rate
    resampler = audio_resampler(to_rate, fmt)
    return np.concatenate([f.to_ndarray().reshape(-1) for f in [*resampler.resample(frame),
                                                                 *resampler.resample(None)]])


def load_audio_48k(pcm16: np.ndarray) -> np.ndarray:
    """16 kHz int16 -> 48 kHz int16 (what a peer sends)."""
    return resample(pcm16, 16000, 48000).astype(np.int16)


def load_audio_array(pcm48: np.ndarray) -> np.ndarray:
    """48 kHz int16 -> 16 kHz float32 (the rate the server's apps see)."""
    return resample(pcm48, 48000, 16000, fmt="flt").astype(np.float32)


def speech_segments_ms(audio16: np.ndarray, min_silence_ms: int) -> list[tuple[int, int]]:
    """``(start_ms, end_ms)`` of each speech segment Silero VAD and the captions' segmenter find in 16 kHz
    ``audio16`` (float32, given to the VAD as it is)."""
    from rtc_agent.apps.captions.speech_segmenter import SpeechSegmenter
    from rtc_agent.engines.vad.silero import SileroVad, speech_probabilities

    vad = SileroVad()
    vad.load(lambda msg: None)
    probs = speech_probabilities(vad, audio16)
    segmenter = SpeechSegmenter(min_silence_ms=min_silence_ms)
    events = [e for i, p in enumerate(probs) for e in segmenter.feed(float(p), i * 32, (i + 1) * 32)]
    events += segmenter.flush(len(probs) * 32)
    spans: list[tuple[int, int]] = []
    start = 0
    for event in events:
        if event.kind == "start":
            start = event.ms
        elif event.kind == "end":
            spans.append((start, event.ms))
    return spans


_offline_models: dict[str, Any] = {}


def offline_whisper(audio16: np.ndarray, language: str | None, *, task: str = "transcribe",
                    model_name: str = "") -> tuple[str, float]:
    """Offline Whisper's text of the whole 16 kHz float32 ``audio16`` with the server's model ``model_name``
    (``--asr-model``; the packaged base by default) for ``task``, and its run time in seconds."""
    from faster_whisper import WhisperModel

    from rtc_agent.config import Settings
    from rtc_agent.engines.asr.whisper import resolve_model

    if model_name not in _offline_models:
        path = resolve_model(model_name, Path(Settings().cache_dir), lambda msg: None)
        _offline_models[model_name] = WhisperModel(path, device="cpu", compute_type="int8")
    model = _offline_models[model_name]
    start = time.monotonic()
    segments, _ = model.transcribe(audio16, language=language, task=task, beam_size=5, vad_filter=False)
    text = " ".join(s.text.strip() for s in segments)
    return text, time.monotonic() - start
