"""The ``captions`` app: live captions of the caller's speech (and, with a camera, visual commentary).

Audio flows: ``on_audio`` -> Silero VAD in the worker (batched across sessions) -> :class:`SpeechSegmenter` ->
:class:`StreamingTranscriber` -> ``caption.*`` events. The VAD runs in its own task so a slow decode never delays
speech boundaries.

The final's beam and the partial interval come from the server's decode plan (``worker.decode_plans``:
:mod:`rtc_agent.worker.decode_plan`, from the measured speed and the sessions running): read when the session
starts and every ``PLAN_REFRESH_MS`` of audio after; without a planner, the settings and defaults.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rtc_agent.apps.base import App, AppContext
from rtc_agent.apps.captions.earlier_finals import FinalCaption
from rtc_agent.apps.captions.speech_segmenter import SpeechSegmenter
from rtc_agent.apps.captions.transcriber import StreamingTranscriber
from rtc_agent.apps.captions.transcriber_config import apply_plan, transcriber_config
from rtc_agent.apps.limits import show, show_keys
from rtc_agent.apps.vision_commentary import VisionCommentary, validate_commentary_config
from rtc_agent.apps.voice_activity import VoiceActivity
from rtc_agent.engines.asr import english_only
from rtc_agent.engines.asr.base import TranscribeRequest, Transcript
from rtc_agent.errors import AgentError, InvalidRequest
from rtc_agent.protocol import ClientEvent, ServerEvent, error_event
from rtc_agent.protocol.events import (
    InputAudioBufferClear,
    InputAudioBufferCleared,
    InputAudioBufferCommit,
    SessionUpdate,
    SessionUpdated,
    VisionPrompt,
)
from rtc_agent.redact import redact_url
from rtc_agent.worker.decode_plan import PLAN_REFRESH_MS

LANGUAGE_CODES = frozenset([  # the languages Whisper knows
    "af", "am", "ar", "as", "az", "ba", "be", "bg", "bn", "bo", "br", "bs", "ca", "cs", "cy", "da", "de", "el",
    "en", "es", "et", "eu", "fa", "fi", "fo", "fr", "gl", "gu", "ha", "haw", "he", "hi", "hr", "ht", "hu", "hy",
    "id", "is", "it", "ja", "jw", "ka", "kk", "km", "kn", "ko", "la", "lb", "ln", "lo", "lt", "lv", "mg", "mi",
    "mk", "ml", "mn", "mr", "ms", "mt", "my", "ne", "nl", "nn", "no", "oc", "pa", "pl", "ps", "pt", "ro", "ru",
    "sa", "sd", "si", "sk", "sl", "sn", "so", "sq", "sr", "su", "sv", "sw", "ta", "te", "tg", "th", "tk", "tl",
    "tr", "tt", "uk", "ur", "uz", "vi", "yi", "yo", "yue", "zh"
])


def check_language(value: Any, settings: Any = None) -> str:
    """A spoken ``language`` a session asks for: ``auto`` or a Whisper code; with ``settings`` whose recognizer is
    English-only (``asr_model = "tiny.en"``), ``en`` or ``auto`` alone."""
    if not isinstance(value, str) or (value != "auto" and value not in LANGUAGE_CODES):
        raise InvalidRequest(f"language must be 'auto' or a Whisper language code such as 'en', got {show(value)}",
                             code="invalid_config")
    if settings is not None and value not in ("auto", "en") and english_only(settings):
        raise InvalidRequest(f"this server's speech recognizer ({settings.asr_model}) is English-only: language "
                             f"must be 'en' or 'auto', got {show(value)}", code="invalid_config")
    return value


def language_prior(value: Any) -> str | None:
    """``language_prior``: the language to expect with ``auto`` (a BCP 47 tag such as the browser's ``en-GB``;
    its primary subtag is used when Whisper knows it, otherwise it is ignored). None or absent: no prior."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 35:
        raise InvalidRequest(f"language_prior must be a language tag such as 'en-GB', got {show(value)}",
                             code="invalid_config")
    primary = value.strip().split("-")[0].split("_")[0].lower()
    return primary if primary in LANGUAGE_CODES else None


FINISH_ON = frozenset({"deleted", "server_shutdown", "max_duration"})  # close reasons that wait for finals
VAD_WINDOW_MS = 32
DRAIN_POLL_S = 0.02


def feed_window(segmenter: SpeechSegmenter, transcriber: StreamingTranscriber, prob: float, start_ms: int,
                end_ms: int, now_ms: int) -> None:
    """One VAD window: its speech boundaries to the transcriber, then a chance to decode."""
    for event in segmenter.feed(prob, start_ms, end_ms):
        transcriber.on_speech(event, now_ms)
    transcriber.poll(now_ms)


async def finish_finals(transcriber: StreamingTranscriber, judged_until_ms: Callable[[], int], timeout: float,
                        emit: Callable[[ServerEvent], None]) -> None:
    """The audio ended where the audio ``transcriber`` received ends (a session that sent none has nothing to
    finish): wait (at most ``timeout`` s) for the VAD to judge it (``judged_until_ms()``: the end of the last window
    judged), end the open utterance there and wait for its last decode. What could not be finished is reported
    through ``emit`` as an ``error`` (``captions_dropped``)."""
    end_ms = transcriber.audio_end_ms
    deadline = time.monotonic() + timeout
    while judged_until_ms() < end_ms - VAD_WINDOW_MS and time.monotonic() < deadline:
        await asyncio.sleep(DRAIN_POLL_S)  # the VAD judges the audio it has not seen yet
    unjudged_ms = max(0, end_ms - VAD_WINDOW_MS - judged_until_ms())
    transcriber.flush(end_ms)  # the transcriber holds every sample up to end_ms
    while transcriber.pending_utterances > 0 and time.monotonic() < deadline:
        await asyncio.sleep(DRAIN_POLL_S)  # its last decode
    open_ms = transcriber.buffer_ms if transcriber.pending_utterances > 0 else 0
    if open_ms or unjudged_ms:
        emit(error_event(AgentError(
            f"the session ended before the last captions were finished: {open_ms} ms of speech without a "
            f"final caption, {unjudged_ms} ms of audio not checked for speech",
            code="captions_dropped", status=503)))


class CaptionsApp(App):
    name = "captions"
    title = "Live captions"
    description = "Live captions of your speech, with commentary on what the camera shows."
    uses_video = True

    _closing = False  # set by close(): audio arriving after that is ignored
    _vad_until_ms = 0  # the end of the last window the VAD judged
    _plan_at_ms = 0  # session time the decode plan was last read
    plan: Any = None  # the decode plan in use (rtc_agent.worker.decode_plan.DecodePlan); None: settings, defaults
    CONFIG_KEYS = frozenset({"language", "language_prior", "vad_threshold", "vad_min_silence_ms",
                             "vad_min_speech_ms", "vision"})
    VISION_ENGINE = "vlm"

    def __init__(self, ctx: AppContext, config: dict[str, Any]) -> None:
        super().__init__(ctx, config)
        language = config["language"]
        self.transcriber = StreamingTranscriber(
            self._recognize, ctx.emit, ctx.spawn,
            transcriber_config(ctx.settings, None if language == "auto" else language, config["language_prior"]),
        )
        self._plans = getattr(ctx.worker, "decode_plans", None)
        self._replan(joining=1.0)  # this session does not count among the running ones yet
        self.segmenter = SpeechSegmenter(threshold=config["vad_threshold"], min_speech_ms=config["vad_min_speech_ms"],
                                         min_silence_ms=config["vad_min_silence_ms"])
        self.vad = VoiceActivity(ctx.worker, self._on_window)
        # Visual commentary starts with the first camera frame, so audio-only sessions never hold the vision
        # engine's single slot.
        self.vision = (VisionCommentary(ctx, ctx.worker, self.VISION_ENGINE, config["vision"])
                       if config["vision"] is not None else None)

    @classmethod
    def validate_config(cls, config: dict[str, Any], settings: Any) -> dict[str, Any]:
        unknown = set(config) - cls.CONFIG_KEYS
        if unknown:
            raise InvalidRequest(f"unknown captions config keys: {show_keys(unknown)}", code="invalid_config")
        out = {
            "language": check_language(config.get("language", settings.asr_language), settings),
            "language_prior": language_prior(config.get("language_prior")),
            "vad_threshold": config.get("vad_threshold", settings.vad_threshold),
            "vad_min_silence_ms": config.get("vad_min_silence_ms", settings.vad_min_silence_ms),
            "vad_min_speech_ms": config.get("vad_min_speech_ms", settings.vad_min_speech_ms),
            "vision": cls._vision_config(config.get("vision", True), settings),
        }
        if not isinstance(out["vad_threshold"], int | float) or not 0 < out["vad_threshold"] < 1:
            raise InvalidRequest("vad_threshold must be between 0 and 1", code="invalid_config")
        for key in ("vad_min_silence_ms", "vad_min_speech_ms"):
            if not isinstance(out[key], int) or not 0 <= out[key] <= 10_000:
                raise InvalidRequest(f"{key} must be an integer from 0 to 10000", code="invalid_config")
        return out

    @staticmethod
    def _vision_config(value: Any, settings: Any = None) -> dict[str, Any] | None:
        """``vision``: true (defaults), false (off) or a dict of commentary options (text capped by the
        ``settings``' limits: ``config_too_large``)."""
        if value is False:
            return None
        if value is True or isinstance(value, dict):
            return validate_commentary_config(value if isinstance(value, dict) else None, settings)
        raise InvalidRequest("vision must be true, false or an object of commentary options", code="invalid_config")

    def engines(self) -> dict[str, str]:
        """``kind: "engine:model"``; a remote engine without a model name shows its URL redacted (no user-info,
        no query values), since this goes to every client in ``session.created``."""
        s = self.ctx.settings
        engines = {"vad": "silero-vad", "asr": f"{s.asr_engine}:{s.asr_model or 'whisper-base'}"}
        if self.vision is not None:
            engines["vlm"] = f"{s.vlm_engine}:{s.vlm_model or redact_url(s.vlm_url) or 'scene-describer'}"
        return engines

    async def _recognize(self, request: TranscribeRequest) -> Transcript:
        started = time.monotonic()
        transcript = await self.ctx.worker.call("asr", request)
        self.ctx.observe("captions_decode", time.monotonic() - started)
        return transcript

    async def start(self) -> None:
        self.ctx.spawn(self.vad.run(), "captions-vad")

    def on_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        if self._closing:  # the session is ending: what arrived before is finished, nothing new starts
            return
        audio = pcm.astype(np.float32) / 32768.0
        self.transcriber.push_audio(audio, start_ms)
        self.vad.push(audio, start_ms)

    def _replan(self, joining: float = 0.0) -> None:
        if self._plans is not None:
            self.plan = self._plans.plan(joining)
            apply_plan(self.transcriber.config, self.plan)

    def _on_window(self, prob: float, start_ms: int, end_ms: int) -> None:
        self._vad_until_ms = end_ms
        if end_ms - self._plan_at_ms >= PLAN_REFRESH_MS:
            self._plan_at_ms = end_ms
            self._replan()
        feed_window(self.segmenter, self.transcriber, prob, start_ms, end_ms, self.ctx.now_ms())

    def on_frame(self, image: np.ndarray, ts_ms: int) -> None:
        if self.vision is not None:
            self.vision.watch(image, ts_ms)

    async def on_event(self, event: ClientEvent) -> None:
        if isinstance(event, VisionPrompt):
            if self.vision is None:
                raise InvalidRequest("visual commentary is off for this session", code="vision_unavailable")
            await self.vision.prompt(event.text)
            return
        if isinstance(event, SessionUpdate):
            update = event.session.get("config", event.session)
            if not isinstance(update, dict):
                raise InvalidRequest("session.update needs an object of settings", code="invalid_config")
            if "language" in update or "language_prior" in update:
                language = check_language(update.get("language", self.config["language"]), self.ctx.settings)
                prior = (language_prior(update["language_prior"]) if "language_prior" in update
                         else self.config["language_prior"])
                self.config["language"], self.config["language_prior"] = language, prior
                self.transcriber.set_language(None if language == "auto" else language, prior)
            self.ctx.emit(SessionUpdated(session={"config": self.config}))
            return
        if isinstance(event, InputAudioBufferCommit):  # end the utterance now: its final caption follows
            self.segmenter.flush(self.ctx.now_ms())
            self.transcriber.flush(self.ctx.now_ms())
            return
        if isinstance(event, InputAudioBufferClear):  # nothing waits uncommitted: captions are continuous
            self.ctx.emit(InputAudioBufferCleared())
            return
        await super().on_event(event)

    def captions(self) -> list[FinalCaption]:
        """Final captions so far, for export."""
        return list(self.transcriber.finals)

    def stats(self) -> dict[str, Any]:
        return {**self.transcriber.stats(), "plan": self.plan.as_dict() if self.plan is not None else None,
                "final_beam": self.transcriber.config.final_beam_size,
                "partial_interval_ms": self.transcriber.config.decode_interval_ms,
                "vad_dropped_ms": self.vad.dropped_ms, "in_speech": self.segmenter.in_speech,
                "vision": self.vision.stats() if self.vision else None}

    async def close(self) -> None:
        """End the captions. When the session ends for ``deleted``, ``server_shutdown`` or ``max_duration`` (the
        client still listens), speech still queued gets its final caption first: the VAD catches up with the
        audio received so far, the open utterance ends there and its last decode runs, all within
        ``final_drain_s``; what cannot be finished is reported as an ``error`` event (``captions_dropped``). For
        other reasons (heartbeat lost, peer gone) nothing is waited for. Only audio that arrived counts: a
        participant who sent none (no microphone) has nothing to finish."""
        self._closing = True
        reason = getattr(self.ctx, "close_reason", None)
        drain_s = float(getattr(self.ctx.settings, "final_drain_s", 0.0) or 0.0)
        if reason in FINISH_ON and drain_s > 0:
            await self._finish_finals(drain_s)
        else:
            self.transcriber.flush(self.ctx.now_ms())
        if self.vision is not None:
            await self.vision.close()

    async def _finish_finals(self, timeout: float) -> None:
        await finish_finals(self.transcriber, lambda: self._vad_until_ms, timeout, self.ctx.emit)
