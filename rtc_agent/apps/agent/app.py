"""The ``agent`` app: a spoken assistant with tools and barge-in (OpenAI Realtime events, Sophon rules).

Turn taking: Silero VAD (through :class:`VoiceActivity`) and a :class:`SpeechSegmenter` find the user's turns.
At the first quiet window the turn so far is transcribed and a response starts *held* (preemptive generation);
when the VAD confirms the end of the turn and no speech came after, that response is released and speaks at once,
otherwise it is dropped and a fresh one starts. So the voice-to-voice delay is about the end-of-turn silence, not
silence + ASR + LLM + TTS.

Barge-in: while the agent is audible (past a grace window after its audio started, against echo of its own
voice), the first loud VAD window pauses playback within one frame. If the speech lasts the minimum speech
duration, the response is cancelled and its item truncated to what was played; if it was only a cough, playback
resumes where it paused.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import numpy as np

from rtc_agent.apps.agent.builtin_tools import register_builtins
from rtc_agent.apps.agent.conversation import Conversation, Item, new_item_id
from rtc_agent.apps.agent.onset import LoudnessOnset
from rtc_agent.apps.agent.responder import Responder, ResponseOptions
from rtc_agent.apps.agent.tools import PendingBrowserCalls, ToolRegistry
from rtc_agent.apps.audio_ring import AudioRing
from rtc_agent.apps.base import App, AppContext
from rtc_agent.apps.captions.app import check_language
from rtc_agent.apps.captions.speech_segmenter import SpeechSegmenter
from rtc_agent.apps.vision_commentary import VisionCommentary, validate_commentary_config
from rtc_agent.apps.voice_activity import VoiceActivity
from rtc_agent.engines.asr.base import TranscribeRequest
from rtc_agent.engines.llm.base import LLMClient
from rtc_agent.engines.tts.stream import SpeechSynthesizer
from rtc_agent.errors import AgentError, InvalidRequest
from rtc_agent.protocol import ClientEvent, error_event
from rtc_agent.protocol.events import (
    ConversationItemCreate,
    ConversationItemCreated,
    InputTranscriptionCompleted,
    ResponseCancel,
    ResponseCreate,
    SessionUpdate,
    SessionUpdated,
    SpeechStarted,
    SpeechStopped,
    VisionPrompt,
)

PREROLL_MS = 300
RING_SECONDS = 60  # the longest turn kept for recognition
# Holding playback is cheap to undo, so it triggers on weaker evidence than the start of a turn: a VAD window
# above PAUSE_THRESHOLD, or 10 ms louder than -35 dBFS (LoudnessOnset, before the VAD has a whole window).
PAUSE_THRESHOLD = 0.3

DEFAULT_INSTRUCTIONS = (
    "You are a helpful voice assistant. Answer in one or two short spoken sentences. Use plain words: no lists, "
    "no markdown, no emoji."
)

DEFAULTS: dict[str, Any] = {
    "instructions": DEFAULT_INSTRUCTIONS,
    "language": "en",
    "tools": "auto",  # auto: offer tools only to a remote LLM (SmolLM2-135M picks tools unreliably)
    "max_tokens": 200,
    "temperature": None,
    "max_tool_rounds": 3,
    "filler": "One moment.",
    "vad_threshold": 0.5,
    "min_silence_ms": 400,
    "min_speech_ms": 250,
    "barge_in": True,
    "barge_in_grace_ms": 300,
    "preemptive": True,
    "vision": False,  # true or commentary options: visual commentary of the camera track (vision.* events)
}


def _check(config: dict[str, Any], key: str, kinds: tuple[type, ...], low: float | None = None,
           high: float | None = None) -> None:
    value = config[key]
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if ok and low is not None and not low <= value <= (high if high is not None else value):
        ok = False
    if not ok:
        raise InvalidRequest(f"agent config {key!r} has a bad value {value!r}", code="invalid_config")


class Turn:
    """One recognized user turn and the response prepared for it (possibly held)."""

    def __init__(self, item_id: str, audio_end_ms: int) -> None:
        self.item_id = item_id
        self.audio_end_ms = audio_end_ms
        self.task: asyncio.Task | None = None
        self.responder: Responder | None = None
        self.transcript: str | None = None
        self.confirmed = asyncio.Event()
        self.asr_ms: float | None = None


class AgentApp(App):
    name = "agent"
    title = "Voice agent"
    description = "A spoken assistant that answers, calls tools and stops when you talk over it."
    uses_video = True  # only with config "vision"; otherwise frames are drained and ignored

    def __init__(self, ctx: AppContext, config: dict[str, Any]) -> None:
        super().__init__(ctx, config)
        self.conversation = Conversation(config["instructions"])
        self.tools = register_builtins(ToolRegistry())
        self.pending = PendingBrowserCalls()
        self.llm = LLMClient(ctx.worker, "llm")
        self.synthesizer = SpeechSynthesizer(ctx.worker, "tts")
        self.segmenter = SpeechSegmenter(threshold=config["vad_threshold"], min_speech_ms=config["min_speech_ms"],
                                         min_silence_ms=config["min_silence_ms"])
        self.vad = VoiceActivity(ctx.worker, self._on_window)
        self.onset = LoudnessOnset()
        self.ring = AudioRing(RING_SECONDS)
        self.responder: Responder | None = None  # the response speaking (or last to speak)
        self._response_task: asyncio.Task | None = None
        self._turn_start_ms: int | None = None
        self._user_item_id: str | None = None
        self._pending_turn: Turn | None = None  # transcribed at a pause, awaiting the end of the turn
        self._paused_at: int | None = None  # tentative barge-in: playback held since this window
        vision = config["vision"]
        self.vision = (VisionCommentary(ctx, ctx.worker, "vlm", validate_commentary_config(
            vision if isinstance(vision, dict) else None)) if vision is not False else None)
        self.counts = {"turns": 0, "responses": 0, "barge_ins": 0, "false_barge_ins": 0, "preemptive_used": 0,
                       "preemptive_dropped": 0}

    # --- configuration ---

    @classmethod
    def validate_config(cls, config: dict[str, Any], settings: Any) -> dict[str, Any]:
        unknown = set(config) - set(DEFAULTS)
        if unknown:
            raise InvalidRequest(f"unknown agent config keys: {sorted(unknown)}", code="invalid_config")
        out = {**DEFAULTS, "vad_threshold": settings.vad_threshold, **config}
        if settings.asr_language != "auto" and "language" not in config:
            out["language"] = settings.asr_language
        out["language"] = check_language(out["language"])
        _check(out, "instructions", (str,))
        _check(out, "max_tokens", (int,), 1, 4096)
        _check(out, "max_tool_rounds", (int,), 0, 10)
        _check(out, "filler", (str,))
        _check(out, "vad_threshold", (int, float), 0.01, 0.99)
        _check(out, "min_silence_ms", (int,), 100, 5000)
        _check(out, "min_speech_ms", (int,), 0, 2000)
        _check(out, "barge_in", (bool,))
        _check(out, "barge_in_grace_ms", (int,), 0, 5000)
        _check(out, "preemptive", (bool,))
        if out["temperature"] is not None:
            _check(out, "temperature", (int, float), 0, 2)
        if not isinstance(out["vision"], bool | dict):
            raise InvalidRequest("agent config 'vision' must be true, false or commentary options",
                                 code="invalid_config")
        if isinstance(out["vision"], dict):
            validate_commentary_config(out["vision"])
        if out["tools"] not in ("auto", True, False):
            raise InvalidRequest("agent config 'tools' must be 'auto', true or false", code="invalid_config")
        return out

    def engines(self) -> dict[str, str]:
        s = self.ctx.settings
        llm_model = s.llm_model or ("SmolLM2-135M-Instruct" if s.llm_engine == "embedded" else "default")
        return {"vad": "silero-vad", "asr": f"{s.asr_engine}:{s.asr_model or 'whisper-base'}",
                "llm": f"{s.llm_engine}:{llm_model}", "tts": f"{s.tts_engine}:{s.tts_model or 'piper-joe'}"}

    @property
    def offer_tools(self) -> bool:
        mode = self.config["tools"]
        return mode is True or (mode == "auto" and self.ctx.settings.llm_engine != "embedded")

    def _options(self) -> ResponseOptions:
        c = self.config
        return ResponseOptions(max_tokens=c["max_tokens"], temperature=c["temperature"],
                               max_tool_rounds=c["max_tool_rounds"], filler=c["filler"],
                               offer_tools=self.offer_tools)

    # --- media ---

    async def start(self) -> None:
        self.ctx.spawn(self.vad.run(), "agent-vad")

    def on_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        audio = pcm.astype(np.float32) / 32768.0
        self.ring.push(audio, start_ms)
        self.vad.push(audio, start_ms)
        if self.onset.feed(audio):
            self._maybe_pause(1.0, start_ms)

    def on_frame(self, image: np.ndarray, ts_ms: int) -> None:
        if self.vision is not None:
            self.vision.watch(image, ts_ms)

    def _on_window(self, prob: float, start_ms: int, end_ms: int) -> None:
        self._maybe_pause(prob, start_ms)
        for event in self.segmenter.feed(prob, start_ms, end_ms):
            if event.kind == "start":
                self._speech_started(event.ms)
            elif event.kind == "pause":
                self._speech_paused(event.ms)
            elif event.kind == "resume":
                self._drop_pending_turn()
            else:
                self._speech_ended(event.ms)
        if (self._paused_at is not None and not self.segmenter.in_speech
                and end_ms - self._paused_at > self.config["min_speech_ms"] + 200):
            self._paused_at = None  # a cough or a click, not speech: carry on talking
            self.counts["false_barge_ins"] += 1
            if self.ctx.speech is not None:
                self.ctx.speech.resume()

    def _maybe_pause(self, prob: float, start_ms: int) -> None:
        """Tentative barge-in: hold the agent's audio at the first loud window while it is audible."""
        r = self.responder
        if (self._paused_at is not None or not self.config["barge_in"] or prob < PAUSE_THRESHOLD
                or r is None or not r.audible or r.played_ms < self.config["barge_in_grace_ms"]
                or self.ctx.speech is None):
            return
        self._paused_at = start_ms
        self.ctx.speech.pause()

    def _speech_started(self, ms: int) -> None:
        self._turn_start_ms = ms
        self._user_item_id = new_item_id()
        self._drop_pending_turn()
        if self.responder is not None and (self.responder.playing or not self._response_done()):
            self.counts["barge_ins"] += 1
            self._cancel_response()
        elif self._paused_at is not None and self.ctx.speech is not None:
            self.ctx.speech.resume()
        self._paused_at = None
        self.ctx.emit(SpeechStarted(audio_start_ms=ms, item_id=self._user_item_id))

    def _speech_paused(self, ms: int) -> None:
        if not self.config["preemptive"] or self._turn_start_ms is None:
            return
        self._drop_pending_turn()
        self._pending_turn = self._start_turn(ms, held=True)

    def _speech_ended(self, ms: int) -> None:
        if self._turn_start_ms is None:
            return
        self.ctx.emit(SpeechStopped(audio_end_ms=ms, item_id=self._user_item_id))
        turn = self._pending_turn
        self._pending_turn = None
        if turn is not None and turn.audio_end_ms >= ms:
            self.counts["preemptive_used"] += 1
            turn.confirmed.set()
        else:
            if turn is not None:
                self._discard(turn)
            self._start_turn(ms, held=False).confirmed.set()
        self._turn_start_ms = None

    # --- turns and responses ---

    def _start_turn(self, end_ms: int, *, held: bool) -> Turn:
        assert self._turn_start_ms is not None and self._user_item_id is not None
        audio = self.ring.slice(self._turn_start_ms - PREROLL_MS, max(end_ms, self.ring.end_ms))
        turn = Turn(self._user_item_id, self.ring.end_ms)
        turn.task = self.ctx.spawn(self._run_turn(turn, audio, held), "agent-turn")
        return turn

    def _drop_pending_turn(self) -> None:
        if self._pending_turn is not None:
            self._discard(self._pending_turn)
            self._pending_turn = None

    def _discard(self, turn: Turn) -> None:
        self.counts["preemptive_dropped"] += 1
        if turn.task is not None and not turn.task.done():
            turn.task.cancel()

    async def _run_turn(self, turn: Turn, audio: np.ndarray, held: bool) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        language = self.config["language"]
        try:
            transcript = await self.ctx.worker.call("asr", TranscribeRequest(
                audio, language=None if language == "auto" else language))
        except AgentError as exc:
            await turn.confirmed.wait()
            self.ctx.emit(error_event(exc))
            return
        turn.asr_ms = round((loop.time() - started) * 1000, 1)
        text = transcript.text.strip()
        silent = not text or transcript.looks_like_silence or transcript.looks_repetitive
        user = Item(turn.item_id, "user", text)
        responder = None
        if not silent:
            responder = self._make_responder([*self.conversation.messages(), user.message()], held=True)
            turn.responder = responder
            responder_task = asyncio.get_running_loop().create_task(responder.run())
        try:
            await turn.confirmed.wait()
        except asyncio.CancelledError:
            if responder is not None:
                responder_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await responder_task
            raise
        if silent or responder is None:
            return
        self.counts["turns"] += 1
        self.conversation.add(user)
        self.ctx.emit(InputTranscriptionCompleted(item_id=turn.item_id, transcript=text))
        responder.timings["asr_ms"] = turn.asr_ms
        await self._adopt(responder, responder_task)

    def _make_responder(self, history: list[dict[str, Any]], *, held: bool) -> Responder:
        return Responder(llm=self.llm, synthesizer=self.synthesizer, speech=self.ctx.speech, emit=self.ctx.emit,
                         tools=self.tools, pending=self.pending, history=history, options=self._options(),
                         held=held)

    async def _adopt(self, responder: Responder, task: asyncio.Task) -> None:
        """Make ``responder`` the session's response: release it and commit its items when it ends."""
        if self._response_task is not None and not self._response_task.done():
            self._cancel_response()
        self.responder = responder
        self._response_task = task
        self.counts["responses"] += 1
        responder.release()
        try:
            await asyncio.shield(task)
        finally:
            for item in responder.items:
                self.conversation.add(item)
            for key, value in responder.timings.items():
                if value is not None:
                    self.ctx.observe("agent_" + key.removesuffix("_ms"), value / 1000)

    def _response_done(self) -> bool:
        return self._response_task is None or self._response_task.done()

    def _cancel_response(self) -> None:
        """Barge-in or response.cancel: stop the audio now, truncate, cancel generation and tools."""
        if self.responder is not None:
            self.responder.interrupt()
        if self._response_task is not None and not self._response_task.done():
            self._response_task.cancel()
        self.pending.cancel_all()

    def _respond_now(self) -> None:
        responder = self._make_responder(self.conversation.messages(), held=False)
        task = asyncio.get_running_loop().create_task(responder.run())
        self.ctx.spawn(self._adopt(responder, task), "agent-response")

    # --- client events ---

    async def on_event(self, event: ClientEvent) -> None:
        if isinstance(event, SessionUpdate):
            self._update_session(event.session)
        elif isinstance(event, ConversationItemCreate):
            self._create_item(event.item)
        elif isinstance(event, ResponseCreate):
            self._cancel_response()
            self._respond_now()
        elif isinstance(event, VisionPrompt):
            if self.vision is None:
                raise InvalidRequest("visual commentary is off for this session", code="vision_unavailable")
            await self.vision.prompt(event.text)
        elif isinstance(event, ResponseCancel):
            if self._response_done() and not (self.responder and self.responder.playing):
                raise InvalidRequest("there is no response to cancel", code="no_active_response")
            self._cancel_response()
        else:
            await super().on_event(event)

    def _update_session(self, session: dict[str, Any]) -> None:
        declared = self.tools.declare_browser_tools(session["tools"]) if "tools" in session else None
        if "instructions" in session:
            if not isinstance(session["instructions"], str):
                raise InvalidRequest("instructions must be a string", code="invalid_config")
            self.config["instructions"] = self.conversation.instructions = session["instructions"]
        self.ctx.emit(SessionUpdated(session={
            "config": {k: v for k, v in self.config.items() if k != "instructions"},
            "instructions": self.conversation.instructions,
            "tools": [t.realtime_spec() for t in self.tools.tools()],
            "browser_tools": [t.name for t in declared] if declared is not None else None,
            "tools_offered": self.offer_tools,
        }))

    def _create_item(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str) or output is None:
                raise InvalidRequest("function_call_output needs call_id and output", code="invalid_item")
            if not self.pending.resolve(call_id, output):
                raise InvalidRequest(f"no tool call {call_id!r} is waiting for output", code="unknown_call")
            return
        if kind == "message" and item.get("role", "user") == "user":
            parts = item.get("content") or []
            text = " ".join(p.get("text", "") for p in parts if isinstance(p, dict)
                            and p.get("type") in ("input_text", "text")).strip()
            if not text:
                raise InvalidRequest("a user message needs input_text content", code="invalid_item")
            created = self.conversation.add_user(text, item.get("id") if isinstance(item.get("id"), str) else None)
            self.ctx.emit(ConversationItemCreated(item=created.realtime()))
            return
        raise InvalidRequest("items may be user messages or function_call_output", code="invalid_item")

    # --- reporting and shutdown ---

    def stats(self) -> dict[str, Any]:
        return {**self.counts, "items": len(self.conversation.items), "vad_dropped_ms": self.vad.dropped_ms,
                "in_speech": self.segmenter.in_speech, "tools_offered": self.offer_tools,
                "tools": self.tools.names(), "vision": self.vision.stats() if self.vision else None}

    async def close(self) -> None:
        self._drop_pending_turn()
        self._cancel_response()
        if self.vision is not None:
            await self.vision.close()
