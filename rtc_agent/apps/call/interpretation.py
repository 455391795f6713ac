"""One interpretation pipeline per (speaker, target language), shared by every listener of that language.

:class:`PairInterpreter` runs the interpret app's pipeline (:func:`rtc_agent.apps.interpret.build_pipeline`:
Silero VAD, chunk grid, SimulInfer policy) on one speaker's audio. Its ``translation.*`` events go, with
``speaker``, to the listeners whose ``listen_language`` is the target; every emitted text also becomes a
``caption.translation`` for the speaker's current caption segment, and is spoken once
(:class:`~rtc_agent.apps.interpret.TranslationSpeaker`) onto a
:class:`~rtc_agent.apps.call.speech_fanout.FanoutSink`, which plays the same audio on the speech track of each
listener who asked to hear the interpretation. Where its events and texts go is its :class:`PairOutlet` (the
room). The tasks run on the speaker's session (they end with it); :meth:`PairInterpreter.close` cancels them
when the pair is no longer needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.speech_fanout import FanoutSink
from rtc_agent.apps.interpret import TranslationSpeaker, build_pipeline, resolve_config
from rtc_agent.protocol import ServerEvent
from rtc_agent.protocol.events import CaptionTranslation, TranslationChunk, TranslationFlush


class PairOutlet(Protocol):
    """Where a pair's results go (the room of its speaker)."""

    def segment_at(self, speaker_id: str, audio_ms: int) -> str:
        """The speaker's caption segment that holds ``audio_ms``."""
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

    def __init__(self, outlet: PairOutlet, speaker: Participant, target: str) -> None:
        self.outlet = outlet
        self.speaker = speaker
        self.target = target
        ctx = speaker.ctx
        self.config = resolve_config({"source_language": speaker.language, "target_language": target, "speak": True},
                                     ctx.settings)
        self.pipeline = build_pipeline(ctx.settings, ctx.worker, self.config, self._emit, on_text=self._on_text)
        self.sink = FanoutSink()
        self.voice: TranslationSpeaker | None = None
        if getattr(ctx.settings, "tts_engine", None) is not None:
            from rtc_agent.engines.tts import SpeechSynthesizer

            self.voice = TranslationSpeaker(self.sink, SpeechSynthesizer(ctx.worker, "tts"), self._emit, ctx.now_ms,
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

    def set_listeners(self, listeners: list[Participant]) -> None:
        """The listeners who hear this pair spoken (their sinks)."""
        wanted = {p.id: p.ctx.speech for p in listeners if p.interpret and p.ctx.speech is not None}
        for pid in list(self.sink.sinks):
            if pid not in wanted:
                del self.sink.sinks[pid]
        self.sink.sinks.update(wanted)

    def _emit(self, event: ServerEvent) -> None:
        if isinstance(event, TranslationChunk | TranslationFlush):
            event = event.model_copy(update={"speaker": self.speaker.tag})
        self.outlet.send_to_language(self.target, event, exclude=self.speaker.id)

    def _on_text(self, text: str, start_ms: int, end_ms: int) -> None:
        self.texts += 1
        segment_id = self.outlet.segment_at(self.speaker.id, end_ms)
        self.outlet.on_translation(self.speaker, CaptionTranslation(
            segment_id=segment_id, speaker=self.speaker.tag, language=self.target, text=text,
            audio_start_ms=start_ms, audio_end_ms=end_ms))
        if self.voice is not None and self.sink.sinks:
            self.voice.say(text, end_ms)

    def stats(self) -> dict[str, Any]:
        out = {"target": self.target, "texts": self.texts, "listeners": sorted(self.sink.sinks),
               **self.pipeline.stats()}
        if self.voice is not None:
            out["speech"] = self.voice.stats()
        return out

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        self.tasks = []
        if self.voice is not None:
            self.voice.enabled = False
