"""``final_audio``: what a final decode hears, the utterance after the earlier speech that fits the budget."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rtc_agent.apps.audio_ring import AudioRing
from rtc_agent.apps.captions.earlier_finals import EarlierFinals
from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.apps.captions.utterance_audio import UtteranceAudio
from rtc_agent.engines.asr.base import SAMPLE_RATE, Segment

__all__ = ["DecodeAudio", "final_audio"]


@dataclass(frozen=True)
class DecodeAudio:
    """The audio of one decode: ``context_ms`` of earlier speech (its text ``context_text``, its speech ending
    ``context_speech_ms`` into the audio: the last earlier final's end and the tail), then the utterance; with
    ``force_context``, the earlier finals as ``forced`` segments."""

    audio: np.ndarray
    context_ms: int = 0
    context_text: str = ""
    context_speech_ms: int = 0
    forced: tuple[Segment, ...] = ()


def final_audio(buffer: UtteranceAudio, recent: AudioRing, earlier: EarlierFinals, config: TranscriberConfig,
                target_ms: int, language: str | None, partial_context_ms: int) -> DecodeAudio:
    """The utterance in ``buffer`` to ``target_ms`` (session clock), after the earlier speech still in ``recent``
    that ``earlier`` says fits the final budget (none when the utterance alone is longer than
    ``context_max_utterance_s``). ``partial_context_ms``: the least of an earlier final the budget cuts into that
    may still be heard (0: whole finals only)."""
    start_ms = buffer.start_ms
    audio = buffer.audio()[: max(0, (target_ms - start_ms) * SAMPLE_RATE // 1000)]
    if config.context_s <= 0 or len(audio) > config.context_max_utterance_s * SAMPLE_RATE:
        return DecodeAudio(audio)
    heard = earlier.context(target_ms, recent.start_ms, start_ms, language, partial_context_ms)
    if heard is None or heard.begin_ms >= start_ms:
        return DecodeAudio(audio)
    context = recent.slice(heard.begin_ms, start_ms)
    context_ms = len(context) * 1000 // SAMPLE_RATE
    return DecodeAudio(np.concatenate([context, audio]) if context_ms else audio, context_ms, heard.text,
                       min(context_ms, heard.end_ms + config.tail_ms - heard.begin_ms),
                       heard.segments() if config.force_context else ())
