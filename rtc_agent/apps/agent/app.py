"""The ``agent`` app: a spoken assistant with tools and barge-in (OpenAI Realtime events, Sophon rules).

Turn taking: Silero VAD (through :class:`VoiceActivity`) and a :class:`SpeechSegmenter` find the user's turns.
At the first quiet window the turn so far is transcribed and a response starts *held* (preemptive generation);
when the VAD confirms the end of the turn and no speech came after, that response is released and speaks at once,
otherwise it is dropped and a fresh one starts. So the voice-to-voice delay is about the end-of-turn silence, not
silence + ASR + LLM + TTS. With ``turn_detection: "manual"`` there is no VAD: the client commits its audio
(``input_audio_buffer.commit``) and asks for responses; with ``create_response: false`` VAD turns become user items
without a response. ``session.update`` is applied here; the other client events are handled by a
:class:`~rtc_agent.apps.agent.client_events.ClientEventHandler`.

Barge-in (:class:`~rtc_agent.apps.agent.interruption.Interruptions`): while the agent is audible (past a grace
window after its audio started), the first loud sign of the user's voice pauses playback within one frame. Speech
over a reply becomes a turn, cancelling the reply and truncating its item to what was played, only once it has
been loud (above the echo-cancelled input's echo and breathing floor, :class:`BargeInGate`) for
``barge_in_min_ms``; shorter or quieter speech (the agent's own echo, breathing, the room) is dropped and playback
resumes where it paused. ``barge_in: false`` turns both off (the user's turn still ends a response that is over).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import numpy as np

from rtc_agent.apps.agent.barge_in import BargeInGate
from rtc_agent.apps.agent.browser_calls import PendingBrowserCalls
from rtc_agent.apps.agent.builtin_tools import register_builtins
from rtc_agent.apps.agent.client_events import ClientEventHandler
from rtc_agent.apps.agent.config import LIVE_KEYS, validate_agent_config
from rtc_agent.apps.agent.conversation import Conversation, Item, new_item_id
from rtc_agent.apps.agent.interruption import Interruptions
from rtc_agent.apps.agent.onset import LoudnessOnset
from rtc_agent.apps.agent.responder import Responder, ResponseOptions
from rtc_agent.apps.agent.spoken_items import SpokenItems
from rtc_agent.apps.agent.tool_registry import ToolRegistry
from rtc_agent.apps.audio_ring import AudioRing
from rtc_agent.apps.base import App, AppContext
from rtc_agent.apps.captions.speech_segmenter import SpeechSegmenter
from rtc_agent.apps.limits import TextLimits, show
from rtc_agent.apps.vision_commentary import VisionCommentary, validate_commentary_config
from rtc_agent.apps.voice_activity import VoiceActivity
from rtc_agent.engines.asr.base import TranscribeRequest, Transcript
from rtc_agent.engines.llm import EMBEDDED_NAMES
from rtc_agent.engines.llm.client import LLMClient
from rtc_agent.engines.llm.packaged import embedded_model_name, offers_tools_by_default
from rtc_agent.engines.tts.stream import SpeechSynthesizer
from rtc_agent.errors import AgentError, InvalidRequest
from rtc_agent.protocol import ClientEvent, error_event
from rtc_agent.protocol.events import (
    InputTranscriptionCompleted,
    SessionUpdate,
    SessionUpdated,
    SpeechStarted,
    SpeechStopped,
)

RING_SECONDS = 60  # the longest turn (or uncommitted input buffer) kept for recognition
SPOKEN_ITEMS = 32  # assistant items whose clause timings are kept for conversation.item.truncate


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
        self.limits = TextLimits.from_settings(ctx.settings)
        self.conversation = Conversation(config["instructions"])
        self.tools = register_builtins(ToolRegistry(max_browser_tools=self.limits.tools))
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
        self.buffer_start_ms = 0  # the input audio not yet part of a turn or a commit starts here
        self.spoken = SpokenItems(SPOKEN_ITEMS)
        self.client_events = ClientEventHandler(self)
        vision = config["vision"]
        self.vision = (VisionCommentary(ctx, ctx.worker, "vlm", validate_commentary_config(
            vision if isinstance(vision, dict) else None, ctx.settings)) if vision is not False else None)
        self.counts = {"turns": 0, "responses": 0, "barge_ins": 0, "false_barge_ins": 0, "preemptive_used": 0,
                       "preemptive_dropped": 0, "tool_guard_retries": 0}
        s = ctx.settings
        self.interruptions = Interruptions(self, ctx.speech, BargeInGate(
            min_ms=config["barge_in_min_ms"], floor_dbfs=s.agent_barge_in_floor_dbfs,
            margin_db=s.agent_barge_in_margin_db))

    # --- configuration ---

    @classmethod
    def validate_config(cls, config: dict[str, Any], settings: Any) -> dict[str, Any]:
        return validate_agent_config(config, settings)

    def engines(self) -> dict[str, str]:
        s = self.ctx.settings
        llm_model = (embedded_model_name(s.llm_model) if s.llm_engine in EMBEDDED_NAMES
                     else s.llm_model or "default")
        return {"vad": "silero-vad", "asr": f"{s.asr_engine}:{s.asr_model or 'whisper-base'}",
                "llm": f"{s.llm_engine}:{llm_model}", "tts": f"{s.tts_engine}:{s.tts_model or 'piper-joe'}"}

    @property
    def offer_tools(self) -> bool:
        mode = self.config["tools"]
        s = self.ctx.settings
        # auto: a remote LLM gets tools; an embedded one only when it scored >= 18/20 on the tool suite
        return mode is True or (mode == "auto" and (s.llm_engine not in EMBEDDED_NAMES
                                                    or offers_tools_by_default(s.llm_model)))

    def _apply_config(self, config: dict[str, Any]) -> None:
        """Take a validated config whose live keys may have changed (``session.update``)."""
        was_manual = self.config["turn_detection"] == "manual"
        self.config = config
        self.segmenter.threshold = config["vad_threshold"]
        self.segmenter.neg_threshold = max(0.01, config["vad_threshold"] - 0.15)
        self.segmenter.min_silence_ms = config["min_silence_ms"]
        self.segmenter.min_speech_ms = config["min_speech_ms"]
        self.interruptions.gate.min_ms = config["barge_in_min_ms"]
        if was_manual != (config["turn_detection"] == "manual"):
            self._drop_pending_turn()
            self._turn_start_ms = None
            self.interruptions.contest = None
            self.segmenter.flush(self.ring.end_ms)

    def _update_session(self, session: dict[str, Any]) -> None:
        """``session.update``: checks everything, then changes instructions, browser tools and live config keys."""
        self.limits.instructions("session.instructions", session.get("instructions"))
        self.limits.tools_list("session.tools", session.get("tools"))
        if "instructions" in session and not isinstance(session["instructions"], str):
            raise InvalidRequest("instructions must be a string", code="invalid_config")
        changes = session.get("config") or {}
        if not isinstance(changes, dict) or set(changes) - LIVE_KEYS:
            fixed = sorted(set(changes) - LIVE_KEYS) if isinstance(changes, dict) else changes
            raise InvalidRequest(f"session.config may change only {sorted(LIVE_KEYS)}, not {show(fixed)}",
                                 code="invalid_config")
        config = validate_agent_config({**self.config, **changes}, self.ctx.settings) if changes else self.config
        declared = (self.tools.declare_browser_tools(session["tools"],
                                                     replace_server=bool(session.get("tools_replace_server")))
                    if "tools" in session else None)
        if "instructions" in session:
            config["instructions"] = self.conversation.instructions = session["instructions"]
        self._apply_config(config)
        self.ctx.emit(SessionUpdated(session={
            "config": {k: v for k, v in self.config.items() if k != "instructions"},
            "instructions": self.conversation.instructions,
            "tools": [t.realtime_spec() for t in self.tools.tools()],
            "browser_tools": [t.name for t in declared] if declared is not None else None,
            "tools_offered": self.offer_tools,
        }))

    async def on_event(self, event: ClientEvent) -> None:
        if isinstance(event, SessionUpdate):
            self._update_session(event.session)
        else:
            await self.client_events.handle(event)

    # --- media ---

    async def start(self) -> None:
        self.ctx.spawn(self.vad.run(), "agent-vad")

    def on_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        audio = pcm.astype(np.float32) / 32768.0
        self.ring.push(audio, start_ms)
        if self.config["turn_detection"] == "manual":
            return  # the client commits its turns
        self.vad.push(audio, start_ms)
        self.interruptions.hear(audio, start_ms)
        if self.onset.feed(audio):
            self.interruptions.maybe_pause(1.0, start_ms)
        self._settle_contest()

    def on_frame(self, image: np.ndarray, ts_ms: int) -> None:
        if self.vision is not None:
            self.vision.watch(image, ts_ms)

    def _on_window(self, prob: float, start_ms: int, end_ms: int) -> None:
        if self.config["turn_detection"] == "manual":
            return
        self.interruptions.maybe_pause(prob, start_ms)
        for event in self.segmenter.feed(prob, start_ms, end_ms):
            if event.kind == "start":
                self._speech_started(event.ms)
            elif event.kind == "pause":
                self._speech_paused(event.ms)
            elif event.kind == "resume":
                self._drop_pending_turn()
            else:
                self._speech_ended(event.ms)
        self._settle_contest()
        self.interruptions.after_window(end_ms, self.segmenter.in_speech)

    def _speech_started(self, ms: int) -> None:
        self._turn_start_ms = ms
        self._user_item_id = new_item_id()
        self._drop_pending_turn()
        if not self.interruptions.contests(ms):
            self._open_turn(ms, interrupt=False)

    def _settle_contest(self) -> None:
        """Speech over a reply that has now earned its turn (or outlived the reply) opens it."""
        verdict = self.interruptions.decide()
        if verdict is not None and self._turn_start_ms is not None:
            self._open_turn(self._turn_start_ms, interrupt=verdict == "interrupt")

    def _open_turn(self, ms: int, *, interrupt: bool) -> None:
        self.ctx.emit(SpeechStarted(audio_start_ms=ms, item_id=self._user_item_id))
        if interrupt:
            self.counts["barge_ins"] += 1
            self.interruptions.paused_at = None
            self.cancel_response()
        else:
            self.interruptions.resume(false_alarm=False)

    def _speech_paused(self, ms: int) -> None:
        if not self.config["preemptive"] or self._turn_start_ms is None or self.interruptions.contest is not None:
            return
        self._drop_pending_turn()
        self._pending_turn = self._start_turn(ms, held=True)

    def _speech_ended(self, ms: int) -> None:
        if self._turn_start_ms is None:
            return
        if self.interruptions.contest is not None:  # echo, breathing or the room: never a turn
            self.interruptions.drop()
            self._turn_start_ms = None
            self.buffer_start_ms = max(self.buffer_start_ms, self.ring.end_ms)
            return
        self.ctx.emit(SpeechStopped(audio_end_ms=ms, item_id=self._user_item_id))
        self.buffer_start_ms = max(self.buffer_start_ms, self.ring.end_ms)
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
        audio = self.ring.slice(self._turn_start_ms - self.config["prefix_padding_ms"], max(end_ms, self.ring.end_ms))
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
        try:
            transcript = await self.transcribe(audio)
        except AgentError as exc:
            await turn.confirmed.wait()
            self.ctx.emit(error_event(exc))
            return
        turn.asr_ms = round((loop.time() - started) * 1000, 1)
        text = transcript.text.strip()
        silent = not text or transcript.looks_like_silence or transcript.looks_repetitive
        user = Item(turn.item_id, "user", text)
        responder = None
        if not silent and self.config["create_response"]:
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
        if silent:
            return
        self.counts["turns"] += 1
        self.conversation.add(user)
        self.ctx.emit(InputTranscriptionCompleted(item_id=turn.item_id, transcript=text))
        if responder is None:
            return
        responder.timings["asr_ms"] = turn.asr_ms
        await self._adopt(responder, responder_task)

    async def transcribe(self, audio: np.ndarray) -> Transcript:
        """``audio`` recognized now (ahead of batch work), in the configured language."""
        language = self.config["language"]
        return await self.ctx.worker.call("asr", TranscribeRequest(
            audio, language=None if language == "auto" else language, urgent=True))

    def _make_responder(self, history: list[dict[str, Any]], *, held: bool,
                        overrides: dict[str, Any] | None = None) -> Responder:
        return Responder(llm=self.llm, synthesizer=self.synthesizer, speech=self.ctx.speech, emit=self.ctx.emit,
                         tools=self.tools, pending=self.pending, history=history,
                         options=ResponseOptions.from_config({**self.config, **(overrides or {})},
                                                             offer_tools=self.offer_tools),
                         held=held)

    async def _adopt(self, responder: Responder, task: asyncio.Task, *, keep: bool = True) -> None:
        """Make ``responder`` the session's response: release it and commit its items when it ends."""
        if self._response_task is not None and not self._response_task.done():
            self.cancel_response()
        self.responder = responder
        self._response_task = task
        self.counts["responses"] += 1
        responder.release()
        try:
            await asyncio.shield(task)
        finally:
            for item in responder.items if keep else ():
                self.conversation.add(item)
            self.counts["tool_guard_retries"] += len(responder.guard_retries)
            self.spoken.remember(responder.clauses)
            for key, value in responder.timings.items():
                if value is not None:
                    self.ctx.observe("agent_" + key.removesuffix("_ms"), value / 1000)

    def _response_done(self) -> bool:
        return self._response_task is None or self._response_task.done()

    def responding(self) -> bool:
        """A response is being generated or its audio is playing."""
        return not self._response_done() or bool(self.responder and self.responder.playing)

    def cancel_response(self) -> None:
        """Barge-in or response.cancel: stop the audio now, truncate, cancel generation and tools."""
        if self.responder is not None:
            self.responder.interrupt()
        if self._response_task is not None and not self._response_task.done():
            self._response_task.cancel()
        self.pending.cancel_all()

    def respond_now(self, overrides: dict[str, Any] | None = None) -> None:
        """A response to the conversation as it is (after committed audio is transcribed); ``overrides`` are
        per-response options as :class:`~rtc_agent.apps.agent.client_events.ClientEventHandler` checks them."""
        overrides = dict(overrides or {})
        keep = overrides.pop("keep", True)
        instructions = overrides.pop("instructions", None)
        history = self.conversation.messages()
        if instructions is not None:
            history[0] = {"role": "system", "content": instructions}
        responder = self._make_responder(history, held=False, overrides=overrides)

        async def run() -> None:
            await self.client_events.wait_for_commits()
            responder.history = [history[0], *self.conversation.messages()[1:]]
            await responder.run()

        task = asyncio.get_running_loop().create_task(run())
        self.ctx.spawn(self._adopt(responder, task, keep=keep), "agent-response")

    # --- reporting and shutdown ---

    def stats(self) -> dict[str, Any]:
        return {**self.counts, "items": len(self.conversation.items), "vad_dropped_ms": self.vad.dropped_ms,
                "in_speech": self.segmenter.in_speech, "tools_offered": self.offer_tools,
                "tools": self.tools.names(), "vision": self.vision.stats() if self.vision else None}

    async def close(self) -> None:
        self._drop_pending_turn()
        self.cancel_response()
        if self.vision is not None:
            await self.vision.close()
