"""The voice of one interpretation pair: the TTS engine that speaks its target language, onto its fan-out.

:func:`pair_voice` picks the voice with :func:`~rtc_agent.apps.interpret.deliverable.voice_of` (None when no voice
speaks the target: the pair is text only) and builds the pair's
:class:`~rtc_agent.apps.interpret.TranslationSpeaker`: one synthesis per text, played on every listener of the
language who hears speech (:class:`~rtc_agent.apps.call.speech_fanout.FanoutSink`), with the espeak-ng catch-up
voice behind a Kokoro voice (:func:`~rtc_agent.apps.interpret.speech.catchup_synthesizer`). A language past the
server's neural voices (:mod:`~rtc_agent.apps.interpret.neural_voices`) is spoken by that espeak-ng voice from the
start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.speech_fanout import FanoutSink
from rtc_agent.apps.interpret.deliverable import voice_of
from rtc_agent.apps.interpret.neural_voices import claim_voice
from rtc_agent.apps.interpret.speech import TranslationSpeaker, catchup_synthesizer
from rtc_agent.engines.tts.stream import SpeechSynthesizer
from rtc_agent.protocol import ServerEvent

__all__ = ["hear_speech", "pair_voice", "stop_pair"]


def pair_voice(speaker: Participant, target: str, sink: FanoutSink, emit: Callable[[ServerEvent], None], *,
               max_lag_ms: int) -> TranslationSpeaker | None:
    """The speaker of ``speaker``'s interpretation into ``target`` on ``sink`` (None: no voice speaks it)."""
    ctx = speaker.ctx
    if getattr(ctx.settings, "tts_engine", None) is None:
        return None
    voice = voice_of(ctx.settings, target)
    if voice is None:
        return None
    # every request names the target language: the engine picks its voice by it
    synthesizer, fallback, on_stop = claim_voice(
        ctx.worker, ctx.settings, target, SpeechSynthesizer(ctx.worker, voice["engine"], language=target),
        catchup_synthesizer(ctx.worker, voice["engine"], target))
    return TranslationSpeaker(sink, synthesizer, emit, ctx.now_ms, max_lag_ms=max_lag_ms, speaker=speaker.tag,
                              language=target, fallback=fallback, on_stop=on_stop)


def hear_speech(sink: FanoutSink, listeners: list[Participant]) -> None:
    """Make ``sink`` play on the tracks of those of ``listeners`` who hear speech, and no others (once on a track
    that several share: an SFU room's interpreter feed)."""
    wanted = dict(p.speech_route for p in listeners if p.hears_speech)
    for pid in [pid for pid in sink.sinks if pid not in wanted]:
        del sink.sinks[pid]
    sink.sinks.update(wanted)


def stop_pair(tasks: list[asyncio.Task], voice: TranslationSpeaker | None) -> None:
    """Cancel a pair's session tasks (the list is emptied) and silence its voice."""
    for task in tasks:
        task.cancel()
    tasks.clear()
    if voice is not None:
        voice.stop()
