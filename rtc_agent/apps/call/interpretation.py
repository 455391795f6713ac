"""One interpretation pipeline per (speaker, target language), shared by every listener of that language.

:class:`PairInterpreter` runs the interpret app's pipeline (:func:`rtc_agent.apps.interpret.build_pipeline`:
Silero VAD, chunk grid, SimulInfer policy) on one speaker's audio. Its ``translation.*`` events go, with
``speaker``, to the listeners whose ``listen_language`` is the target; every emitted text also becomes a
``caption.translation`` for the speaker's current caption segment, and is spoken once
(:class:`~rtc_agent.apps.interpret.TranslationSpeaker`) onto a
:class:`~rtc_agent.apps.call.speech_fanout.FanoutSink`, which plays the same audio on the speech track of each
listener who asked to hear the interpretation (in the target language's voice:
:func:`~rtc_agent.apps.call.pair_voice.pair_voice`). Each ``caption.translation`` carries the segment's source
text as far as the room knows it. Where its events and texts go is its :class:`PairOutlet` (the room).
The tasks run on the speaker's session (they end with it); :meth:`PairInterpreter.close` cancels them
when the pair is no longer needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from rtc_agent.apps.call.pair_voice import hear_speech, pair_voice, stop_pair
from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.speech_fanout import FanoutSink
from rtc_agent.apps.interpret import build_pipeline, resolve_config
from rtc_agent.apps.interpret.deliverable import ROUTE_SPEECH
from rtc_agent.engines import st
from rtc_agent.protocol import ServerEvent
from rtc_agent.protocol.events import (
    CaptionFinal,
    CaptionPartial,
    CaptionTranslation,
    TranslationChunk,
    TranslationFlush,
)


class PairOutlet(Protocol):
    """Where a pair's results go (the room of its speaker)."""

    def segment_at(self, speaker_id: str, audio_ms: int) -> str:
        """The speaker's caption segment that holds ``audio_ms``."""
        ...

    def segment_text(self, speaker_id: str, segment_id: str) -> str | None:
        """The caption text of that segment as far as it is known (None: not known)."""
        ...

    def on_translation(self, speaker: Participant, event: CaptionTranslation) -> None:
        """A translated text of ``speaker``'s caption segment (for the transcript and the caption readers)."""
        ...

    def send_to_language(self, language: str, event: ServerEvent, *, exclude: str | None = None) -> None:
        """``event`` to the listeners of ``language``, but ``exclude``."""
        ...


class PairInterpreter:
    """Interpretation of ``speaker`` into ``target`` for the listeners of that language, reached through
    ``outlet``. Raises :class:`~rtc_agent.errors.AgentError` when the pipeline cannot be built."""

    route = ROUTE_SPEECH

    def __init__(self, outlet: PairOutlet, speaker: Participant, target: str) -> None:
        self.outlet = outlet
        self.speaker = speaker
        self.target = target
        ctx = speaker.ctx
        self.config = resolve_config({"source_language": speaker.language, "target_language": target, "speak": True},
                                     ctx.settings)
        self.pipeline = build_pipeline(ctx.settings, ctx.worker, self.config, self._emit, on_text=self._on_text)
        self.sink = FanoutSink()
        self.voice = pair_voice(speaker, target, self.sink, self._emit,
                                max_lag_ms=int(self.config["max_lag_s"] * 1000))
        self.tasks: list[asyncio.Task] = []
        self.texts = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.speaker.id, self.target)

    def start(self) -> None:
        spawn: Callable[..., asyncio.Task] = self.speaker.ctx.spawn
        self.tasks = [spawn(self.pipeline.run_vad(), f"room-vad-{self.target}"),
                      spawn(self.pipeline.run_policy(), f"room-interpret-{self.target}")]
        if self.voice is not None:
            self.tasks.append(spawn(self.voice.run(), f"room-speech-{self.target}"))

    def push_audio(self, audio: np.ndarray, start_ms: int) -> None:
        self.pipeline.push_audio(audio, start_ms)

    def on_caption(self, event: CaptionPartial | CaptionFinal) -> None:
        """The speech route translates the audio; the room keeps the captions for the source texts."""

    def set_listeners(self, listeners: list[Participant]) -> None:
        """The listeners who hear this pair spoken (their sinks)."""
        hear_speech(self.sink, listeners)

    def _emit(self, event: ServerEvent) -> None:
        if isinstance(event, TranslationChunk | TranslationFlush):
            event = event.model_copy(update={"speaker": self.speaker.tag})
        self.outlet.send_to_language(self.target, event, exclude=self.speaker.id)

    def _on_text(self, text: str, start_ms: int, end_ms: int) -> None:
        self.texts += 1
        segment_id = self.outlet.segment_at(self.speaker.id, end_ms)
        source = None if self.speaker.language == "auto" else self.speaker.language
        self.outlet.on_translation(self.speaker, CaptionTranslation(
            segment_id=segment_id, speaker=self.speaker.tag, language=self.target, text=text,
            audio_start_ms=start_ms, audio_end_ms=end_ms,
            source_text=self.outlet.segment_text(self.speaker.id, segment_id), source_language=source,
            route=ROUTE_SPEECH, engine=st.describe(self.speaker.ctx.settings),
            lag_ms=max(0, self.speaker.ctx.now_ms() - end_ms)))
        if self.voice is not None and self.sink.sinks:
            self.voice.say(text, end_ms, segment_id=segment_id)

    def stats(self) -> dict[str, Any]:
        out = {"target": self.target, "route": ROUTE_SPEECH, "texts": self.texts, "listeners": sorted(self.sink.sinks),
               **self.pipeline.stats()}
        if self.voice is not None:
            out["speech"] = self.voice.stats()
        return out

    def close(self) -> None:
        stop_pair(self.tasks, self.voice)
