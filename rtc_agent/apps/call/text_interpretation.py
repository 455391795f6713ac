"""Interpretation of one speaker into one language by text translation of the speaker's caption finals.

Where speech translation cannot produce a listener's language, the room makes this pair instead of a
:class:`~rtc_agent.apps.call.interpretation.PairInterpreter`: every caption final of the speaker (the room already
has them: ``Room.on_caption``) is translated by the worker's ``mt`` engine
(``TextTranslateRequest(text, source, target, context)``, the context being the speaker's previous finals and
their translations) and becomes, for the listeners of the target language, the same events the speech route
sends: a ``translation.chunk`` (``EMIT``, with ``source_text``) and a ``caption.translation`` (with ``segment_id``,
``source_text``, ``route: "text"`` and ``lag_ms``). The text is then spoken once, in the target language, on
every listener's track that hears speech (:func:`~rtc_agent.apps.call.pair_voice.pair_voice`; no voice: text only).

Finals wait in a bounded queue (``room_mt_backlog``); the room sheds the oldest across its text pairs when they
fall behind (a muted speaker's first) through :meth:`TextPairInterpreter.drop_oldest`, announced to the listeners
as ``translation.speech.catchup`` with ``action: "drop"``. The task runs on the speaker's session (it ends with it);
:meth:`close` cancels it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

import numpy as np

from rtc_agent.apps.call.interpretation import PairOutlet
from rtc_agent.apps.call.pair_voice import hear_speech, pair_voice, stop_pair
from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.speech_fanout import FanoutSink
from rtc_agent.apps.interpret.deliverable import ROUTE_TEXT, text_request
from rtc_agent.errors import AgentError
from rtc_agent.protocol import ServerEvent, error_event
from rtc_agent.protocol.events import CaptionFinal, CaptionPartial, CaptionTranslation, TranslationChunk
from rtc_agent.protocol.events.media import TranslationSpeechCatchup

__all__ = ["TextPairInterpreter"]

log = logging.getLogger(__name__)

CONTEXT_FINALS = 2  # previous finals of the speaker sent with each as translation context


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
        self.timeout_s = float(getattr(settings, "mt_timeout_s", 30.0) or 30.0)
        self.pending: deque[CaptionFinal] = deque()
        self.max_pending = int(getattr(settings, "room_mt_backlog", 8))
        self.context: deque[tuple[str, str]] = deque(maxlen=CONTEXT_FINALS)
        self.sink = FanoutSink()
        max_lag_ms = int(float(getattr(settings, "st_max_lag_s", 3.0) or 3.0) * 1000)
        self.voice = pair_voice(speaker, target, self.sink, self._emit, max_lag_ms=max_lag_ms)
        self._wake = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        self.index = 0
        self.texts = 0
        self.dropped = 0
        self.errors = 0
        self.last_lag_ms = 0
        self.last_latency_ms = 0.0

    @property
    def key(self) -> tuple[str, str]:
        return (self.speaker.id, self.target)

    def start(self) -> None:
        spawn = self.speaker.ctx.spawn
        self.tasks = [spawn(self.run(), f"room-mt-{self.target}")]
        if self.voice is not None:
            self.tasks.append(spawn(self.voice.run(), f"room-speech-{self.target}"))

    def push_audio(self, audio: np.ndarray, start_ms: int) -> None:
        """The text route reads captions, not audio."""

    def on_caption(self, event: CaptionPartial | CaptionFinal) -> None:
        """Queue a final for translation (partials are never translated: their words may still change)."""
        if not isinstance(event, CaptionFinal) or not event.text.strip() or not self.tasks:
            return
        self.pending.append(event)
        while len(self.pending) > self.max_pending:
            self.drop_oldest("behind")
        self._wake.set()

    def drop_oldest(self, reason: str) -> None:
        """Forget the oldest waiting final, telling the listeners (``translation.speech.catchup`` ``drop``)."""
        if not self.pending:
            return
        old = self.pending.popleft()
        self.dropped += 1
        lag = max(0, self.speaker.ctx.now_ms() - old.audio_end_ms)
        self._emit(TranslationSpeechCatchup(action="drop", lag_ms=lag, skipped_text=old.text.strip(),
                                            audio_end_ms=old.audio_end_ms, speaker=self.speaker.tag,
                                            segment_id=old.segment_id, reason=reason))

    def set_listeners(self, listeners: list[Participant]) -> None:
        """The listeners who hear this pair spoken (their sinks)."""
        hear_speech(self.sink, listeners)

    def _emit(self, event: ServerEvent) -> None:
        self.outlet.send_to_language(self.target, event, exclude=self.speaker.id)

    async def run(self) -> None:
        """Session task: translate the waiting finals in order, forever."""
        while True:
            while not self.pending:
                self._wake.clear()
                await self._wake.wait()
            final = self.pending.popleft()
            try:
                await self._translate(final)
            except AgentError as exc:
                self.errors += 1
                log.warning("text interpretation into %s failed: %s", self.target, exc)
                if self.errors == 1:
                    self._emit(error_event(exc))

    async def _translate(self, final: CaptionFinal) -> None:
        source = final.text.strip()
        language = final.language or (None if self.speaker.language == "auto" else self.speaker.language)
        started = time.perf_counter()
        result = await self.speaker.ctx.worker.call(
            "mt", text_request(source, language, self.target, list(self.context)), timeout=self.timeout_s)
        text = str(getattr(result, "text", result) or "").strip()
        if not text:
            return
        self.context.append((source, text))
        self.last_latency_ms = round((time.perf_counter() - started) * 1000, 1)
        self.last_lag_ms = max(0, self.speaker.ctx.now_ms() - final.audio_end_ms)
        self.texts += 1
        tag = self.speaker.tag
        self._emit(TranslationChunk(index=self.index, action="EMIT", text=text, source_text=source,
                                    audio_start_ms=final.audio_start_ms, audio_end_ms=final.audio_end_ms,
                                    speaker=tag, source_language=language, latency_ms=self.last_latency_ms))
        self.index += 1
        self.outlet.on_translation(self.speaker, CaptionTranslation(
            segment_id=final.segment_id, speaker=tag, language=self.target, text=text,
            audio_start_ms=final.audio_start_ms, audio_end_ms=final.audio_end_ms, source_text=source,
            source_language=language, route=ROUTE_TEXT, engine=self.engine, lag_ms=self.last_lag_ms))
        if self.voice is not None and self.sink.sinks:
            self.voice.say(text, final.audio_end_ms, segment_id=final.segment_id)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"target": self.target, "route": ROUTE_TEXT, "engine": self.engine,
                               "texts": self.texts, "listeners": sorted(self.sink.sinks),
                               "pending": len(self.pending), "dropped": self.dropped, "errors": self.errors,
                               "lag_ms": self.last_lag_ms, "latency_ms": self.last_latency_ms}
        if self.voice is not None:
            out["speech"] = self.voice.stats()
        return out

    def close(self) -> None:
        stop_pair(self.tasks, self.voice)
        self.pending.clear()
