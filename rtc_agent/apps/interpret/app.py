"""The ``interpret`` app: simultaneous interpretation of the caller's speech (SimulInfer policy).

Audio flows ``on_audio`` -> :class:`InterpretPipeline` (Silero VAD in the worker, chunk grid) ->
:class:`SimulPolicy` (one model turn per voiced chunk through the configured speech translator) ->
``translation.chunk`` / ``translation.flush`` / ``translation.reset`` events, and every emitted translation to
:class:`TranslationSpeaker` (TTS on the outgoing track, with catch-up announced as
``translation.speech.catchup``).

Source text (``source_text: true``): engines that recognize the source themselves (cascade, openai) report it in
``translation.chunk.source_text``. With the embedded Whisper engine the source is recognized by the captions
pipeline instead (:class:`SourceCaptions`: ``caption.partial``/``caption.final`` and speech boundaries, fed by the
pipeline's VAD windows), whose language rule the translation then follows with ``source_language: auto``.

The text route: where speech translation cannot produce the target (the embedded Whisper translate task gives
English only, so ``en -> es`` cannot), the app uses what ``client_config.capabilities.listen`` offers instead, as
the call rooms do: the source captions recognise the speech, each ``caption.final`` is translated by the worker's
``mt`` engine (:class:`~rtc_agent.apps.interpret.text_route.FinalsTranslator`: a ``translation.chunk`` ``EMIT``
with its ``source_text``), and the translation is spoken by the voice of the target language
(:func:`~rtc_agent.apps.interpret.deliverable.voice_of`, e.g. Kokoro for Spanish); no voice for it: text only.
The speech-translation turns do not run meanwhile. The caption events themselves reach the client only with
``source_text``. A target nothing here delivers is refused with ``unsupported_language``.

``session.update`` with ``{"session": {"source_language", "target_language", "direction", "speak",
"max_lag_s", "language_prior"}}`` (or the same under ``"config"``) changes languages and speech on the fly (a new
target may switch the route); ``chunk_ms`` and ``source_text`` are fixed for the session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from rtc_agent.apps.base import App, AppContext
from rtc_agent.apps.interpret.chunker import ChunkCutter
from rtc_agent.apps.interpret.config import resolve_config
from rtc_agent.apps.interpret.deliverable import ROUTE_SPEECH, ROUTE_TEXT, route_for, voice_of
from rtc_agent.apps.interpret.neural_voices import claim_voice
from rtc_agent.apps.interpret.pipeline import InterpretPipeline
from rtc_agent.apps.interpret.policy import SimulPolicy
from rtc_agent.apps.interpret.policy_config import PolicyConfig
from rtc_agent.apps.interpret.source_captions import SourceCaptions
from rtc_agent.apps.interpret.speech import TranslationSpeaker, catchup_synthesizer
from rtc_agent.apps.interpret.text_route import FinalsTranslator, FinalTranslation
from rtc_agent.engines import st
from rtc_agent.engines.tts.stream import SpeechSynthesizer
from rtc_agent.errors import InvalidRequest
from rtc_agent.protocol import ClientEvent, ServerEvent
from rtc_agent.protocol.events import (
    CaptionFinal,
    CaptionPartial,
    SessionUpdate,
    SessionUpdated,
    TranslationChunk,
)

__all__ = ["InterpretApp", "build_pipeline"]

log = logging.getLogger(__name__)

FINISH_TIMEOUT_S = 3.0


def build_pipeline(settings: Any, worker: Any, config: dict[str, Any], emit: Callable[[ServerEvent], None], *,
                   on_text: Callable[[str, int, int], None] | None = None, max_queued_chunks: int = 6,
                   source: SourceCaptions | None = None) -> InterpretPipeline:
    """A pipeline for validated ``config`` (see :func:`resolve_config`) with the server's engines. With ``source``
    (source captions) the translator recognizes no source text itself, the source captions get the pipeline's
    audio and VAD windows, and their language rule drives the policy's source language."""
    translator = st.create_translator(settings, worker,
                                      source_text=config.get("source_text", False) and source is None)
    window = float(getattr(settings, "st_window_s", 24.0) or 0.0)
    policy_config = PolicyConfig(chunk_ms=config["chunk_ms"], max_model_len=translator.max_model_len,
                                 window_s=window if window > 0 else None)
    language = config["source_language"]
    policy = SimulPolicy(policy_config, translator, emit, source_language=None if language == "auto" else language,
                         target_language=config["target_language"], language_prior=config.get("language_prior"),
                         on_text=on_text)
    policy.observe_languages = source is None
    cutter = ChunkCutter(chunk_ms=config["chunk_ms"], threshold=getattr(settings, "vad_threshold", 0.5),
                         min_speech_ms=getattr(settings, "vad_min_speech_ms", 200),
                         min_silence_ms=getattr(settings, "vad_min_silence_ms", 250))
    return InterpretPipeline(policy, worker, cutter, max_queued_chunks=max_queued_chunks,
                             on_window=source.on_window if source is not None else None,
                             on_audio=source.push_audio if source is not None else None)


class InterpretApp(App):
    name = "interpret"
    title = "Interpretation"
    description = "Simultaneous interpretation: translated captions and translated speech while you talk."

    def __init__(self, ctx: AppContext, config: dict[str, Any]) -> None:
        super().__init__(ctx, config)
        s = ctx.settings
        self.route, self.route_info = self._route_of(config["target_language"])
        self.source: SourceCaptions | None = None
        if (config["source_text"] and not st.source_text_by_engine(s)) or self.route == ROUTE_TEXT:
            self.source = self._make_source(config)
        self.pipeline = build_pipeline(s, ctx.worker, config, self._emit, on_text=self._on_text, source=self.source)
        self.pipeline.translating = self.route == ROUTE_SPEECH
        self.policy = self.pipeline.policy
        source = config["source_language"]
        self.finals = FinalsTranslator.from_settings(s, ctx.worker, config["target_language"], self._emit, ctx.now_ms,
                                                     on_text=self._on_final_translation, source_language=source)
        self.speaker: TranslationSpeaker | None = None
        self.voice: dict[str, Any] | None = None
        self._voice_release: Callable[[], None] | None = None  # gives back the neural voice slot (claim_voice)
        if ctx.speech is not None:
            max_lag_ms = int(config["max_lag_s"] * 1000)
            self.speaker = TranslationSpeaker(ctx.speech, SpeechSynthesizer(ctx.worker, "tts"), ctx.emit,
                                              ctx.now_ms, max_lag_ms=max_lag_ms)
            self._set_voice(config["target_language"])

    def _route_of(self, target: str) -> tuple[str, dict[str, Any]]:
        """How ``target`` is made here: the speech route, or the text route (validated configs have one)."""
        route = route_for(self.ctx.settings, target)
        return route if route is not None else (ROUTE_SPEECH, {"engine": st.describe(self.ctx.settings)})

    def _make_source(self, config: dict[str, Any]) -> SourceCaptions:
        s = self.ctx.settings
        return SourceCaptions(
            self.ctx.worker, self._source_emit, self.ctx.spawn, self.ctx.now_ms, source=config["source_language"],
            prior=config["language_prior"], on_language=self._on_source_language,
            threshold=getattr(s, "vad_threshold", 0.5), min_speech_ms=getattr(s, "vad_min_speech_ms", 200),
            min_silence_ms=getattr(s, "vad_min_silence_ms", 250), observe=self.ctx.observe, settings=s)

    def _set_voice(self, target: str) -> None:
        """Speak ``target`` with its own language's voice; a target no voice speaks is text only. A neural voice
        takes one of the server's slots while the session speaks with it (``claim_voice``: past them, espeak-ng
        speaks from the first text); a slot held for another target or for a session that stopped speaking is
        given back first."""
        assert self.speaker is not None
        self._release_voice()
        self.voice = voice_of(self.ctx.settings, target)
        speaking = bool(self.config["speak"] and self.voice is not None)
        if self.voice is not None:
            voice = SpeechSynthesizer(self.ctx.worker, self.voice["engine"], language=target)
            fallback = catchup_synthesizer(self.ctx.worker, self.voice["engine"], target)
            if speaking:
                voice, fallback, self._voice_release = claim_voice(self.ctx.worker, self.ctx.settings, target,
                                                                   voice, fallback)
            self.speaker.synthesizer, self.speaker.fallback = voice, fallback
        self.speaker.language = target
        self.speaker.enabled = speaking

    def _release_voice(self) -> None:
        """Give back the neural voice slot the session holds (if any)."""
        release, self._voice_release = self._voice_release, None
        if release is not None:
            release()

    def _set_route(self, target: str) -> None:
        """The target changed: take its route (the source captions start when the text route first needs them)."""
        self.route, self.route_info = self._route_of(target)
        self.pipeline.translating = self.route == ROUTE_SPEECH
        if self.route == ROUTE_TEXT and self.source is None:
            self.source = self._make_source(self.config)
            self.pipeline.on_window, self.pipeline.on_audio = self.source.on_window, self.source.push_audio
            self.policy.observe_languages = False
        self.finals.set_target(target)
        if self.route != ROUTE_TEXT:
            self.finals.clear()

    @classmethod
    def validate_config(cls, config: dict[str, Any], settings: Any) -> dict[str, Any]:
        return resolve_config(config, settings, text_route=True)

    def engines(self) -> dict[str, str]:
        s = self.ctx.settings
        out = {"vad": "silero-vad", "st": st.describe(s)}
        if self.route == ROUTE_TEXT:
            out["mt"] = str(self.route_info.get("engine") or "mt")
        if self.source is not None:
            out["asr"] = f"{s.asr_engine}:{s.asr_model or 'whisper-base'}"
        if self.speaker is not None and self.voice is not None:
            engine = self.voice["engine"]
            out["tts"] = f"{s.tts_engine}:{s.tts_model or 'piper-joe'}" if engine == "tts" else \
                f"{engine}:{self.voice.get('voice') or 'default'}"
        return out

    def _emit(self, event: ServerEvent) -> None:
        if isinstance(event, TranslationChunk) and event.latency_ms is not None:
            self.ctx.observe("interpret_chunk", event.latency_ms / 1000)
        self.ctx.emit(event)

    async def start(self) -> None:
        self.ctx.spawn(self.pipeline.run_vad(), "interpret-vad")
        self.ctx.spawn(self.pipeline.run_policy(), "interpret-policy")
        self.ctx.spawn(self.finals.run(), "interpret-mt")
        if self.speaker is not None:
            self.ctx.spawn(self.speaker.run(), "interpret-speech")

    def on_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        self.pipeline.push_audio(pcm.astype(np.float32) / 32768.0, start_ms)

    def _on_source_language(self, language: str) -> None:
        """The source captions' language rule settled or switched: the translation follows it."""
        self.policy.follow_language(language)

    def _on_text(self, text: str, start_ms: int, end_ms: int) -> None:
        if self.speaker is not None:
            self.speaker.say(text, end_ms)

    def _source_emit(self, event: ServerEvent) -> None:
        """The source captions' events: captions feed the text route (finals, and partials' committed words to
        compute ahead); captions reach the client with ``source_text``."""
        if isinstance(event, CaptionPartial | CaptionFinal) and self.route == ROUTE_TEXT:
            self.finals.on_caption(event)
        if self.config["source_text"] or not isinstance(event, CaptionPartial | CaptionFinal):
            self.ctx.emit(event)

    def _on_final_translation(self, done: FinalTranslation) -> None:
        if self.speaker is not None:
            self.speaker.say(done.text, done.final.audio_end_ms, segment_id=done.final.segment_id)

    async def on_event(self, event: ClientEvent) -> None:
        if isinstance(event, SessionUpdate):
            update = event.session.get("config", event.session)
            if not isinstance(update, dict):
                raise InvalidRequest("session.update needs an object of settings", code="invalid_config")
            update = {k: v for k, v in update.items() if k not in ("type", "app")}
            fixed = {"chunk_ms", "source_text"} & set(update)
            if any(update[k] != self.config[k] for k in fixed):
                raise InvalidRequest(f"{sorted(fixed)} cannot change during a session", code="invalid_config")
            before = (self.config["source_language"], self.config["language_prior"])
            target_before = self.config["target_language"]
            self.config = resolve_config(update, self.ctx.settings, base=self.config, text_route=True)
            source, prior = self.config["source_language"], self.config["language_prior"]
            target = self.config["target_language"]
            self.policy.set_languages(None if source == "auto" else source, target, prior)
            self.finals.source_language = None if source == "auto" else source
            if target != target_before:
                self._set_route(target)
            if self.source is not None and (source, prior) != before:
                self.source.set_language(source, prior)
            if self.speaker is not None:
                self.speaker.max_lag_ms = int(self.config["max_lag_s"] * 1000)
                self.speaker.skip_lag_ms = 2 * self.speaker.max_lag_ms
                was_speaking = self.speaker.enabled
                self._set_voice(target)
                if was_speaking and not self.speaker.enabled:
                    self.speaker.clear()
            self.ctx.emit(SessionUpdated(session={"config": self.config}))
            return
        await super().on_event(event)

    def stats(self) -> dict[str, Any]:
        out = {**self.policy.stats(), **self.pipeline.stats(), "config": self.config, "route": self.route}
        if self.route == ROUTE_TEXT:
            out["text_route"] = self.finals.stats()
        if self.source is not None:
            out["source_captions"] = self.source.stats()
        if self.speaker is not None:
            out["speech"] = self.speaker.stats()
        return out

    async def close(self) -> None:
        """The session ends: translate what is left and give the source captions their last final (together, one
        bounded wait), so the last words reach the page; then give back the neural voice slot."""
        try:
            await self._finish()
        finally:
            self._release_voice()

    async def _finish(self) -> None:
        """The bounded last translation and final caption of :meth:`close`."""
        jobs = [self.pipeline.finish()]
        if self.source is not None:  # its own deadline a little earlier, so it reports what it could not finish
            jobs.append(self._finish_source(self.source))
        try:
            await asyncio.wait_for(asyncio.gather(*jobs), FINISH_TIMEOUT_S)
        except TimeoutError:
            log.info("session %s: the last translation did not finish within %.0f s", self.ctx.session_id,
                     FINISH_TIMEOUT_S)
        except Exception:
            log.exception("session %s: the final translation flush failed", self.ctx.session_id)

    async def _finish_source(self, source: SourceCaptions) -> None:
        """The last final caption, then (text route) the translation of every final still waiting."""
        await source.finish(FINISH_TIMEOUT_S - 0.2)
        if self.route == ROUTE_TEXT:
            await self.finals.drained()
