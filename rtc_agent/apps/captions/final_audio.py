"""``final_audio``: what a final decode hears, the utterance after the earlier speech that fits the budget (where no
earlier final fits, after the pause before it when enough of that is voiced: speech the VAD missed)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from rtc_agent.apps.audio_ring import AudioRing
from rtc_agent.apps.captions.earlier_finals import EarlierFinals
from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.apps.captions.utterance_audio import UtteranceAudio
from rtc_agent.apps.captions.voiced import VoicedAudio
from rtc_agent.engines.asr.base import SAMPLE_RATE, Segment

__all__ = ["DecodeAudio", "final_audio"]

log = logging.getLogger(__name__)

#: Where no earlier final fits the budget, a final decode still hears the pause before its utterance when at least
#: this much of the pause (seconds, within the budget) is voiced: speech the VAD missed, such as a turn that starts
#: quietly or muffled ("so this is the sick corpus" from a speaker with a cold, scored 0.01 by Silero). The context
#: cut keeps what Whisper hears there only where that audio is voiced.
MISSED_VOICED_S = 0.5
#: ...counting voiced runs of at least this long (seconds): syllables, not clicks or key presses.
MISSED_MIN_RUN_S = 0.1
#: ...and, before the session's first final decode (no decode speed measured yet, so no budget), at most this long (ms)
#: before the utterance: a long stretch of music or room noise before the first words is not decoded.
MISSED_MAX_MS = 6000
#: The pause starts this long (ms) after the last final's speech: the VAD may end speech before its last word, which
#: that final's decode heard (in noise, "...followed by the pound key" heard again as "palm gi").
MISSED_AFTER_FINAL_MS = 500


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
                target_ms: int, language: str | None, partial_context_ms: int, hard: bool = False) -> DecodeAudio:
    """The utterance in ``buffer`` to ``target_ms`` (session clock), after the earlier speech still in ``recent``
    that ``earlier`` says fits the final budget (none when the utterance alone is longer than
    ``context_max_utterance_s``; where no earlier final fits, the pause before the utterance when enough of it is
    voiced, as ``MISSED_VOICED_S`` says). ``partial_context_ms``: the least of an earlier final the budget cuts into
    that may still be heard (0: whole finals only). ``hard``: the partials found the utterance hard to hear, so the
    budget is larger (``EarlierFinals.limit_s``)."""
    start_ms = buffer.start_ms
    audio = buffer.audio()[: max(0, (target_ms - start_ms) * SAMPLE_RATE // 1000)]
    if config.context_s <= 0 or len(audio) > config.context_max_utterance_s * SAMPLE_RATE:
        return DecodeAudio(audio)
    heard = earlier.context(target_ms, recent.start_ms, start_ms, language, partial_context_ms, hard)
    if heard is None:
        return _after_missed_speech(audio, recent, earlier, target_ms, start_ms, hard)
    if heard.begin_ms >= start_ms:
        return DecodeAudio(audio)
    context = recent.slice(heard.begin_ms, start_ms)
    context_ms = len(context) * 1000 // SAMPLE_RATE
    return DecodeAudio(np.concatenate([context, audio]) if context_ms else audio, context_ms, heard.text,
                       min(context_ms, heard.end_ms + config.tail_ms - heard.begin_ms),
                       heard.segments() if config.force_context else ())


def _after_missed_speech(audio: np.ndarray, recent: AudioRing, earlier: EarlierFinals, target_ms: int,
                         start_ms: int, hard: bool) -> DecodeAudio:
    """The utterance's ``audio`` (from ``start_ms``) after the pause before it, as much as fits the budget, when at
    least ``MISSED_VOICED_S`` of that is voiced in runs of ``MISSED_MIN_RUN_S`` (the pause starts
    ``MISSED_AFTER_FINAL_MS`` after the last final's speech; before any final decode's speed is known, at most
    ``MISSED_MAX_MS`` before the utterance); the utterance alone otherwise. The context has no text: everything in
    it is the pause's."""
    pause_from = earlier.context_from_ms(target_ms, recent.start_ms, start_ms, hard)
    if earlier.rate is None:
        pause_from = max(pause_from, start_ms - MISSED_MAX_MS)
    if earlier.last is not None:
        pause_from = max(pause_from, earlier.last.end_ms + MISSED_AFTER_FINAL_MS)
    pause = recent.slice(pause_from, start_ms)  # empty when pause_from >= start_ms
    pause_s = len(pause) / SAMPLE_RATE
    if pause_s < MISSED_VOICED_S:
        return DecodeAudio(audio)
    voiced = VoicedAudio(np.concatenate([pause, audio]))
    if voiced.seconds(0.0, pause_s, MISSED_MIN_RUN_S) < MISSED_VOICED_S:
        return DecodeAudio(audio)
    log.debug("final decode at %d ms hears %.1f s of the voiced pause before its utterance", start_ms, pause_s)
    return DecodeAudio(np.concatenate([pause, audio]), len(pause) * 1000 // SAMPLE_RATE)
