"""``Session``: one peer connection, its media edges, its event channel and its app, with one lifecycle.

A session ends on DELETE, ICE failure, peer close (the data channel closes), heartbeat loss, a connect timeout,
the maximum duration, server shutdown or a crash of one of its own tasks (``internal_error``). Ending it stops
the app (which may finish its last results), sends ``session.ended {reason, message}`` while the channel is
open and waits briefly for it to leave, cancels every task it spawned, stops its outgoing track and closes the
peer connection, which ends every incoming track and so every track reader.

Contract of :meth:`Session.close`: it never raises, every step has a deadline, and it always ends in state
``closed`` with ``on_closed`` called (so the registry frees the slot), whatever aiortc or the app do.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from rtc_agent.apps.base import App
from rtc_agent.config import Settings
from rtc_agent.errors import AgentError, InvalidRequest
from rtc_agent.metrics import Metrics
from rtc_agent.protocol import ClientEvent, ServerEvent
from rtc_agent.protocol.events import (
    InputAudioMuted,
    MetricsEvent,
    OutputAudioStarted,
    OutputAudioStopped,
    SessionCreated,
)
from rtc_agent.protocol.message_budget import BudgetLimits
from rtc_agent.rtc import AudioInput, EventChannel, SessionClock, SpeechOutput, Utterance, VideoInput
from rtc_agent.rtc.candidates import CandidateFilter
from rtc_agent.rtc.event_channel import LABEL
from rtc_agent.rtc.jitter import shorten_audio_jitter
from rtc_agent.rtc.offer import check_offer
from rtc_agent.rtc.peer_close import PC_CLOSE_TIMEOUT_S, close_peer_connection
from rtc_agent.server.ice import server_ice_servers
from rtc_agent.server.session_context import SessionContext
from rtc_agent.server.session_end import ClosingSession, announce_end
from rtc_agent.tasks import wait_tasks

log = logging.getLogger(__name__)

EVENT_QUEUE_LIMIT = 64
WATCHDOG_PERIOD_S = 0.5
METRICS_PERIOD_S = 2.0
SIGNALING_TIMEOUT_S = 10.0  # applying the offer and gathering local candidates
TASKS_TIMEOUT_S = 3.0  # cancelled tasks finishing
ENDED_DRAIN_S = 0.5  # session.ended leaving the data channel
SESSION_CANDIDATES_FACTOR = 5  # a session takes at most this many PATCHes' worth of candidates
CRITICAL_TASKS = frozenset({"events", "watchdog", "metrics", "audio-in", "video-in"})  # their crash ends it


async def drain(track: MediaStreamTrack) -> None:
    """Read and discard a track nobody uses (aiortc would otherwise queue its frames without bound)."""
    try:
        while True:
            await track.recv()
    except MediaStreamError:
        return


class Session(SessionContext, ClosingSession):
    """A live WebRTC session. Create with :meth:`accept`; end with :meth:`close` (idempotent). A crash of one of
    its :data:`CRITICAL_TASKS` ends it with ``internal_error``."""

    critical_tasks = CRITICAL_TASKS
    channel_label = LABEL  # the data channel that carries its events

    def __init__(self, app_cls: type[App], config: dict[str, Any], *, settings: Settings, worker: Any,
                 metrics: Metrics, on_closed: Callable[[Session], None], session_id: str | None = None,
                 token_hash: str = "", rooms: Any = None) -> None:
        self.id = session_id or "sess_" + secrets.token_hex(8)
        self.token_hash = token_hash  # digest of the session's own token (GET/PATCH/DELETE/exports)
        self.app_name = app_cls.name
        self.config = config
        self.settings = settings
        self.worker = worker
        self.rooms = rooms  # the server's call rooms (AppContext.rooms); None for a Realtime API call
        self.metrics = metrics
        self._on_closed = on_closed
        self.created_at = time.time()
        self._started = time.monotonic()
        self.client = ""  # who created it (API key id or IP), for the registry's per-client cap
        self.connected_at: float | None = None
        self.state = "new"
        self.close_reason: str | None = None
        self.clock = SessionClock()
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=server_ice_servers(settings, user=self.id)))
        self.channel = EventChannel(
            self.clock.ms, max_event_bytes=settings.max_event_bytes, on_event=self._queue_event,
            max_json_depth=settings.json_max_depth, max_number_chars=settings.json_max_number_chars,
            on_error=lambda code: metrics.errors.labels(code=code).inc(),
            on_close=lambda: self.close_soon("peer_closed"),
            budget=BudgetLimits.from_settings(settings, max_message_bytes=settings.max_event_bytes),
            on_overload=self.close_soon,
        )
        self.speech: SpeechOutput | None = SpeechOutput(
            max_seconds=settings.max_output_seconds, listener=self._on_utterance
        )
        self.audio_in: AudioInput | None = None
        self.video_in: VideoInput | None = None
        self.expects_channel = False
        self._tasks: set[asyncio.Task] = set()
        self._events: asyncio.Queue[ClientEvent] = asyncio.Queue(maxsize=EVENT_QUEUE_LIMIT)
        self._closed = asyncio.Event()
        self._closing_task: asyncio.Task | None = None
        self._candidates = CandidateFilter(allow_loopback=settings.ice_allow_loopback_candidates)
        self.remote_candidates = 0  # trickled candidates taken
        self.app: App = app_cls(self, config)

    @property
    def started_at(self) -> float:
        """``time.monotonic()`` when the session was created."""
        return self._started

    # --- AppContext (session_id, observe and spawn: SessionContext) ---

    def now_ms(self) -> int:
        return self.clock.ms()

    def emit(self, event: ServerEvent) -> None:
        if self.state != "closed":
            self.channel.send(event)

    def report_failure(self, exc: AgentError) -> None:
        self.channel.send_error(exc)

    # --- signaling ---

    async def accept(self, offer_sdp: str) -> str:
        """Apply the client's offer, start the app and the media readers, and return the answer SDP.

        Raises :class:`AgentError` only: a bad offer or any unexpected failure is an :class:`InvalidRequest`
        (400), a set-up that takes longer than ``SIGNALING_TIMEOUT_S`` a 504. The caller closes the session
        on failure (``close("setup_failed")``, which always frees its slot).
        """
        try:
            return await self._accept(offer_sdp)
        except AgentError:
            raise
        except Exception as exc:
            log.warning("session %s: set-up failed: %r", self.id, exc)
            raise InvalidRequest(f"the session could not be set up: {exc}", code="setup_failed") from None

    async def _accept(self, offer_sdp: str) -> str:
        offer_sdp = check_offer(offer_sdp, self._candidates,
                                max_candidates=self.settings.max_candidates_per_patch * SESSION_CANDIDATES_FACTOR)
        self.state = "connecting"
        self.expects_channel = "m=application" in offer_sdp
        self.pc.on("track", self._on_track)
        self.pc.on("datachannel", self._on_datachannel)
        self.pc.on("connectionstatechange", self._on_connection_state)
        try:
            await asyncio.wait_for(self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer")),
                                   SIGNALING_TIMEOUT_S)
        except TimeoutError:
            raise AgentError("applying the offer took too long", code="setup_timeout", status=504) from None
        except Exception as exc:
            raise InvalidRequest(f"the offer could not be applied: {exc}", code="invalid_sdp") from None
        audio = [t for t in self.pc.getTransceivers() if t.kind == "audio"]
        for transceiver in audio:
            shorten_audio_jitter(transceiver.receiver, self.settings.audio_jitter_frames)
        if audio and audio[0].direction in ("sendrecv", "recvonly") and self.speech is not None:
            self.pc.addTrack(self.speech)
        else:
            self.speech = None
        try:
            answer = await self.pc.createAnswer()
            await asyncio.wait_for(self.pc.setLocalDescription(answer), SIGNALING_TIMEOUT_S)  # gathers candidates
        except TimeoutError:
            raise AgentError("gathering local ICE candidates took too long", code="setup_timeout",
                             status=504) from None
        except Exception as exc:
            raise InvalidRequest(f"no answer could be made for this offer: {exc}", code="invalid_sdp") from None
        await self.app.start()
        self.spawn(self._process_events(), "events")
        self.spawn(self._watchdog(), "watchdog")
        self.spawn(self._report_metrics(), "metrics")
        self.channel.send(SessionCreated(session=self.summary()))
        return self.pc.localDescription.sdp

    async def add_candidates(self, candidates: list[Any], end_of_candidates: bool) -> int:
        """Add trickled remote candidates (browser ``RTCIceCandidateInit`` dicts); returns how many were used.

        All are validated before any is added (:mod:`rtc_agent.rtc.candidates`): more than
        ``max_candidates_per_patch`` (or past the session's total) is refused by count before parsing
        (``too_many_candidates``), a malformed one refuses the whole PATCH (``invalid_candidate``); candidates
        on loopback, link-local and similar addresses are dropped quietly.
        """
        limit = self.settings.max_candidates_per_patch
        valid, end = self._candidates.check_patch(candidates, limit=limit, taken=self.remote_candidates,
                                                  total=limit * SESSION_CANDIDATES_FACTOR)
        end_of_candidates = end_of_candidates or end
        if self.state in ("closing", "closed"):
            return 0
        try:
            for candidate in valid:
                await self.pc.addIceCandidate(candidate)
                self.remote_candidates += 1
            if end_of_candidates:
                await self.pc.addIceCandidate(None)
        except Exception as exc:
            raise InvalidRequest(f"the candidate could not be added: {exc}", code="invalid_candidate") from None
        return len(valid)

    # --- media and events ---

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio" and self.audio_in is None:
            self.audio_in = AudioInput(track, self.clock, self.app.on_audio)
            self.spawn(self.audio_in.run(), "audio-in")  # critical: its crash ends the session
        elif track.kind == "video" and self.video_in is None:
            sink = self.app.on_frame if self.app.uses_video else None
            self.video_in = VideoInput(track, self.clock.ms, sink, self.settings.video_fps,
                                       self.settings.video_max_edge)
            self.spawn(self.video_in.run(), "video-in")
            if sink is not None:
                self.spawn(self.video_in.sample(), "video-sample")
        else:
            self.spawn(drain(track), f"drain-{track.kind}")

    def _on_datachannel(self, channel: Any) -> None:
        if channel.label == self.channel_label and self.channel.channel is None:
            self.channel.attach(channel)
        else:
            channel.close()

    def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        if state == "connected" and self.connected_at is None:
            self.connected_at = time.monotonic()
            self.state = "connected"
            self.metrics.stage_latency.labels(stage="connect").observe(self.connected_at - self._started)
        elif state == "failed":
            self.close_soon("ice_failed")
        elif state == "closed":
            self.close_soon("peer_closed")

    def _queue_event(self, event: ClientEvent) -> None:
        try:
            self._events.put_nowait(event)
        except asyncio.QueueFull:
            self.channel.send_error(AgentError("too many client events waiting; slow down",
                                               code="event_queue_full", status=429),
                                    event_id=event.event_id)

    async def _process_events(self) -> None:
        while True:
            event = await self._events.get()
            try:
                if isinstance(event, InputAudioMuted):  # every app takes it (see App.set_input_muted)
                    self.app.set_input_muted(event.muted)
                    continue
                await self.app.on_event(event)
            except AgentError as exc:
                self.channel.send_error(exc, event_id=event.event_id)
            except Exception as exc:
                log.exception("session %s: handling %s failed", self.id, event.type)
                self.channel.send_error(AgentError(f"internal error handling {event.type}: {exc}"),
                                        event_id=event.event_id)

    def _on_utterance(self, utterance: Utterance, what: str) -> None:
        if what == "started":
            self.emit(OutputAudioStarted(utterance_id=utterance.id, response_id=utterance.response_id))
        else:
            self.emit(OutputAudioStopped(utterance_id=utterance.id, sent_ms=utterance.sent_ms,
                                         cleared=utterance.cleared, response_id=utterance.response_id))

    async def _watchdog(self) -> None:
        s = self.settings
        while True:
            await asyncio.sleep(WATCHDOG_PERIOD_S)
            age = time.monotonic() - self._started
            up = self.connected_at is not None and (self.channel.is_open or not self.expects_channel)
            if s.max_session_seconds and age > s.max_session_seconds:
                self.close_soon("max_duration")
            elif not up and age > s.connect_timeout_s:
                self.close_soon("connect_timeout")
            elif self.channel.is_open and self.channel.idle_seconds() > s.heartbeat_timeout_s:
                self.close_soon("heartbeat_lost")

    async def _report_metrics(self) -> None:
        while True:
            await asyncio.sleep(METRICS_PERIOD_S)
            if self.channel.is_open:
                self.emit(MetricsEvent(**self.media_stats()))

    # --- lifecycle ---

    def close_soon(self, reason: str) -> None:
        """Schedule :meth:`close` from a callback or from one of the session's own tasks."""
        if self._closing_task is None and self.state not in ("closing", "closed"):
            self._closing_task = asyncio.get_running_loop().create_task(self.close(reason),
                                                                        name=f"{self.id}:close")

    async def _end_transport(self, reason: str, tasks: list[asyncio.Task]) -> None:
        if self.speech is not None:
            self.speech.stop()
        await announce_end(self.channel, reason, ENDED_DRAIN_S, name=self.id)  # the last event
        for task in tasks:
            task.cancel()
        # closing the peer connection ends the incoming tracks, so their readers return
        await close_peer_connection(self.pc, PC_CLOSE_TIMEOUT_S, name=f"session {self.id}")
        await wait_tasks(tasks, TASKS_TIMEOUT_S, name=f"session {self.id}")

    # --- reporting ---

    def summary(self) -> dict[str, Any]:
        """What ``session.created`` carries: ``{id, app, engines, config}``."""
        return {"id": self.id, "app": self.app_name, "engines": self.app.engines(), "config": self.config}

    def media_stats(self) -> dict[str, Any]:
        audio = self.audio_in
        video = self.video_in
        speech = self.speech
        return {
            "audio": {"received_ms": audio.received_ms if audio else 0, "frames": audio.frames if audio else 0},
            "video": {
                "frames_received": video.frames_received if video else 0,
                "frames_sampled": video.frames_sampled if video else 0,
                "width": video.width if video else 0,
                "height": video.height if video else 0,
                "fps": self.settings.video_fps,
            },
            "output": {
                "frames_sent": speech.frames_sent if speech else 0,
                "speech_frames_sent": speech.speech_frames_sent if speech else 0,
                "queued_ms": speech.queued_ms if speech else 0,
            },
            "events": {"sent": self.channel.sent, "received": self.channel.received,
                       "errors": self.channel.errors, "dropped": self.channel.dropped},
        }

    def describe(self) -> dict[str, Any]:
        """State and live metrics for ``GET /v1/sessions/{id}``."""
        return {
            "session_id": self.id,
            "app": self.app_name,
            "state": self.state,
            "close_reason": self.close_reason,
            "created_at": self.created_at,
            "age_s": round(time.monotonic() - self._started, 3),
            "session_ms": self.clock.ms(),
            "connection_state": self.pc.connectionState,
            "ice_connection_state": self.pc.iceConnectionState,
            "event_channel": "open" if self.channel.is_open else ("none" if self.channel.channel is None
                                                                  else self.channel.channel.readyState),
            "config": self.config,
            "engines": self.app.engines(),
            **self.media_stats(),
            "tasks": self.task_count,
            "app_stats": self.app.stats(),
        }
