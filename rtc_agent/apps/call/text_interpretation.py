"""Interpretation of one speaker into one language by text translation of the speaker's caption finals.

Where speech translation cannot produce a listener's language, the room makes this pair instead of a
:class:`~rtc_agent.apps.call.interpretation.PairInterpreter`: every caption final of the speaker (the room already
has them: ``Room.on_caption``) goes to the interpret app's text route
(:class:`~rtc_agent.apps.interpret.text_route.FinalsTranslator`: the worker's ``mt`` engine, with the speaker's
previous finals as context; the partials' committed words let it compute the prompt ahead), which sends the listeners
of the target language the same ``translation.chunk`` (``EMIT``, with ``source_text``) the speech route sends; this
pair adds the ``caption.translation`` (with ``segment_id``, ``source_text``, ``route: "text"`` and ``lag_ms``) and
speaks the text once, in the target language, on every listener's track that hears speech
(:func:`~rtc_agent.apps.call.pair_voice.pair_voice`; no voice: text only).

Finals wait in a bounded queue (``room_mt_backlog``); the room sheds the oldest across its text pairs when they fall
behind (a muted speaker's first) through :meth:`TextPairInterpreter.drop_oldest`, announced to the listeners as
``translation.speech.catchup`` with ``action: "drop"``. The tasks run on the speaker's session (they end with it);
:meth:`close` cancels them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from rtc_agent.apps.call.interpretation import PairOutlet
from rtc_agent.apps.call.pair_voice import hear_speech, pair_voice, stop_pair
from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.speech_fanout import FanoutSink
from rtc_agent.apps.interpret.deliverable import ROUTE_TEXT
from rtc_agent.apps.interpret.text_route import FinalsTranslator, FinalTranslation
from rtc_agent.apps.interpret.work_queue import WorkQueue
from rtc_agent.protocol import ServerEvent
from rtc_agent.protocol.events import CaptionFinal, CaptionPartial, CaptionTranslation

__all__ = ["TextPairInterpreter"]


class TextPairInterpreter:
    """Text-route interpretation of ``speaker`` into ``target`` (``engine``: the ``mt`` entry of
    ``translation_targets``: {engine, quality, chrf}); see the module docstring."""

    route = ROUTE_TEXT

    def __init__(self, outlet: PairOutlet, speaker: Participant, target: str, engine: dict[str, Any]) -> None:
        self.outlet = outlet
        self.speaker = speaker
        self.target = target
        self.engine = str(engine.get("engine") or "mt")
        settings = speaker.ctx.settings
        self.translator = FinalsTranslator.from_settings(
            settings, speaker.ctx.worker, target, self._emit, speaker.ctx.now_ms, on_text=self._on_translation,
            speaker=speaker.tag, source_language=speaker.language)
        self.sink = FanoutSink()
        max_lag_ms = int(float(getattr(settings, "st_max_lag_s", 3.0) or 3.0) * 1000)
        self.voice = pair_voice(speaker, target, self.sink, self._emit, max_lag_ms=max_lag_ms)
        self.tasks: list[asyncio.Task] = []

    @property
    def key(self) -> tuple[str, str]:
        return (self.speaker.id, self.target)

    @property
    def pending(self) -> WorkQueue[CaptionFinal]:
        """The finals waiting for translation (the room bounds them across its pairs)."""
        return self.translator.pending

    def start(self) -> None:
        spawn = self.speaker.ctx.spawn
        self.tasks = [spawn(self.translator.run(), f"room-mt-{self.target}")]
        if self.voice is not None:
            self.tasks.append(spawn(self.voice.run(), f"room-speech-{self.target}"))

    def push_audio(self, audio: np.ndarray, start_ms: int) -> None:
        """The text route reads captions, not audio."""

    def on_caption(self, event: CaptionPartial | CaptionFinal) -> None:
        """Hand a caption to the translator once the pair runs (:meth:`FinalsTranslator.on_caption`: a final is
        translated, a partial's committed words let it compute the prompt ahead)."""
        if self.tasks:
            self.translator.on_caption(event)

    def drop_oldest(self, reason: str) -> None:
        """Forget the oldest waiting final, telling the listeners (``translation.speech.catchup`` ``drop``)."""
        self.translator.drop_oldest(reason)

    def set_listeners(self, listeners: list[Participant]) -> None:
        """The listeners who hear this pair spoken (their sinks)."""
        hear_speech(self.sink, listeners)

    def _emit(self, event: ServerEvent) -> None:
        self.outlet.send_to_language(self.target, event, exclude=self.speaker.id)

    def _on_translation(self, done: FinalTranslation) -> None:
        final = done.final
        self.outlet.on_translation(self.speaker, CaptionTranslation(
            segment_id=final.segment_id, speaker=self.speaker.tag, language=self.target, text=done.text,
            audio_start_ms=final.audio_start_ms, audio_end_ms=final.audio_end_ms, source_text=done.source_text,
            source_language=done.source_language, route=ROUTE_TEXT, engine=self.engine, lag_ms=done.lag_ms))
        if self.voice is not None and self.sink.sinks:
            self.voice.say(done.text, final.audio_end_ms, segment_id=final.segment_id)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.translator.stats(), "route": ROUTE_TEXT, "engine": self.engine,
                               "listeners": sorted(self.sink.sinks)}
        if self.voice is not None:
            out["speech"] = self.voice.stats()
        return out

    def close(self) -> None:
        stop_pair(self.tasks, self.voice)
        self.translator.clear()
