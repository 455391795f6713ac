"""``Session``: one peer connection, its media edges, its event channel and its app, with one lifecycle.

A session ends on DELETE, ICE failure, peer close (the data channel closes), heartbeat loss, a connect timeout
or the maximum duration. Ending it stops the app, cancels every task it spawned, stops its outgoing track and
closes the peer connection, which ends every incoming track and so every track reader.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiortc import RTCConfiguration, RTCIceCandidate, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.sdp import candidate_from_sdp

from rtc_agent.apps.base import App
from rtc_agent.config import Settings
from rtc_agent.errors import AgentError, InvalidRequest
from rtc_agent.metrics import Metrics
from rtc_agent.protocol import ClientEvent, ServerEvent
from rtc_agent.protocol.events import MetricsEvent, OutputAudioStarted, OutputAudioStopped, SessionCreated
from rtc_agent.rtc import AudioInput, EventChannel, SessionClock, SpeechOutput, Utterance, VideoInput
from rtc_agent.rtc.event_channel import LABEL
from rtc_agent.rtc.jitter import shorten_audio_jitter
from rtc_agent.server.ice import server_ice_servers

log = logging.getLogger(__name__)

EVENT_QUEUE_LIMIT = 64
WATCHDOG_PERIOD_S = 0.5
METRICS_PERIOD_S = 2.0
APP_CLOSE_TIMEOUT_S = 5.0


async def drain(track: MediaStreamTrack) -> None:
    """Read and discard a track nobody uses (aiortc would otherwise queue its frames without bound)."""
    try:
        while True:
            await track.recv()
    except MediaStreamError:
        return


class Session:
    """A live WebRTC session. Create with :meth:`accept`; end with :meth:`close` (idempotent)."""

    def __init__(self, app_cls: type[App], config: dict[str, Any], *, settings: Settings, worker: Any,
                 metrics: Metrics, on_closed: Callable[[Session], None]) -> None:
        self.id = "sess_" + secrets.token_hex(8)
        self.app_name = app_cls.name
        self.config = config
        self.settings = settings
        self.worker = worker
        self.metrics = metrics
        self._on_closed = on_closed
        self.created_at = time.time()
        self._started = time.monotonic()
        self.connected_at: float | None = None
        self.state = "new"
        self.close_reason: str | None = None
        self.clock = SessionClock()
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=server_ice_servers(settings)))
        self.channel = EventChannel(
            self.clock.ms, max_event_bytes=settings.max_event_bytes, on_event=self._queue_event,
            on_error=lambda code: metrics.errors.labels(code=code).inc(),
            on_close=lambda: self.close_soon("peer_closed"),
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
        self.app: App = app_cls(self, config)

    # --- AppContext ---

    @property
    def session_id(self) -> str:
        return self.id

    def now_ms(self) -> int:
        return self.clock.ms()

    def emit(self, event: ServerEvent) -> None:
        if self.state != "closed":
            self.channel.send(event)

    def observe(self, stage: str, seconds: float) -> None:
        self.metrics.stage_latency.labels(stage=stage).observe(max(0.0, seconds))

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.id}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        log.error("session %s task %s failed", self.id, task.get_name(), exc_info=exc)
        self.channel.send_error(exc if isinstance(exc, AgentError) else AgentError(f"internal error: {exc}"))

    # --- signaling ---

    async def accept(self, offer_sdp: str) -> str:
        """Apply the client's offer, start the app and the media readers, and return the answer SDP."""
        if not offer_sdp.lstrip().startswith("v=0"):
            raise InvalidRequest("the offer is not an SDP session description (it must start with v=0)",
                                 code="invalid_sdp")
        if "\nm=" not in offer_sdp.replace("\r\n", "\n"):
            raise InvalidRequest("the offer has no media sections (m= lines)", code="invalid_sdp")
        self.state = "connecting"
        self.expects_channel = "m=application" in offer_sdp
        self.pc.on("track", self._on_track)
        self.pc.on("datachannel", self._on_datachannel)
        self.pc.on("connectionstatechange", self._on_connection_state)
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
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
            await self.pc.setLocalDescription(answer)
        except Exception as exc:
            raise InvalidRequest(f"no answer could be made for this offer: {exc}", code="invalid_sdp") from None
        await self.app.start()
        self.spawn(self._process_events(), "events")
        self.spawn(self._watchdog(), "watchdog")
        self.spawn(self._report_metrics(), "metrics")
        self.channel.send(SessionCreated(session=self.summary()))
        return self.pc.localDescription.sdp

    async def add_candidates(self, candidates: list[dict[str, Any]], end_of_candidates: bool) -> int:
        """Add trickled remote candidates (browser ``RTCIceCandidateInit`` dicts); returns how many were used."""
        added = 0
        for init in candidates:
            line = init.get("candidate")
            if not isinstance(line, str):
                raise InvalidRequest("each candidate needs a 'candidate' string", code="invalid_candidate")
            if not line:  # an empty candidate is the browser's end-of-candidates marker
                end_of_candidates = True
                continue
            try:
                candidate: RTCIceCandidate = candidate_from_sdp(line.removeprefix("candidate:"))
            except Exception:
                raise InvalidRequest(f"malformed ICE candidate: {line[:120]!r}", code="invalid_candidate") from None
            candidate.sdpMid = init.get("sdpMid")
            candidate.sdpMLineIndex = init.get("sdpMLineIndex")
            if candidate.sdpMid is None and candidate.sdpMLineIndex is None:
                candidate.sdpMLineIndex = 0
            await self.pc.addIceCandidate(candidate)
            added += 1
        if end_of_candidates:
            await self.pc.addIceCandidate(None)
        return added

    # --- media and events ---

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio" and self.audio_in is None:
            self.audio_in = AudioInput(track, self.clock, self.app.on_audio)
            self.spawn(self.audio_in.run(), "audio-in")
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
        if channel.label == LABEL and self.channel.channel is None:
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

    async def close(self, reason: str = "deleted") -> None:
        """End the session and everything it owns. Safe to call more than once and from anywhere."""
        if self.state in ("closing", "closed"):
            await self._closed.wait()
            return
        self.state = "closing"
        self.close_reason = reason
        log.info("session %s (%s) closing: %s", self.id, self.app_name, reason)
        try:
            await asyncio.wait_for(self.app.close(), APP_CLOSE_TIMEOUT_S)
        except Exception:
            log.exception("session %s: app close failed", self.id)
        if self.speech is not None:
            self.speech.stop()
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for task in tasks:
            task.cancel()
        await self.pc.close()  # ends the incoming tracks, so their readers return
        await asyncio.gather(*tasks, return_exceptions=True)
        self.state = "closed"
        self._closed.set()
        self._on_closed(self)

    @property
    def task_count(self) -> int:
        return sum(1 for t in self._tasks if not t.done())

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
