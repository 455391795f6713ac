"""``ClientPeer``: a Python WebRTC client for an rtc-agent server.

It does what the browser client does: opens a peer connection with optional audio and video tracks and the
``events`` data channel, posts the offer to ``/v1/sessions``, keeps the heartbeat, collects server events and
records the audio the server sends back. Benchmarks measure at this peer; tests drive the real server with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from rtc_agent.rtc.event_channel import LABEL
from rtc_agent.rtc.jitter import shorten_audio_jitter
from rtc_agent.rtc.peer_close import PC_CLOSE_TIMEOUT_S, close_peer_connection
from rtc_agent.rtc.resampler import audio_resampler
from rtc_agent.tasks import wait_tasks

RECEIVED_AUDIO_LIMIT_S = 600  # the client keeps at most this much received audio
TASKS_END_TIMEOUT_S = 5.0  # close() waits this long for its cancelled tasks


class SessionRefused(Exception):
    """The server answered the offer with an error."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


class ClientPeer:
    """One client session. ``await connect()``, use, then ``await close()`` (or ``async with``)."""

    def __init__(self, base_url: str, app: str, *, config: dict[str, Any] | None = None,
                 audio: MediaStreamTrack | None = None, video: MediaStreamTrack | None = None,
                 receive_audio: bool = True, heartbeat_s: float | None = 2.0, audio_jitter_frames: int = 0,
                 http: aiohttp.ClientSession | None = None, credential: str | None = None) -> None:
        """``credential`` (an API key or a client token) is sent as ``Authorization: Bearer`` when creating the
        session; afterwards the session's own token (``session_token`` of the answer) authorises the rest."""
        self.base_url = base_url.rstrip("/")
        self.credential = credential
        self.session_token: str | None = None
        self.app = app
        self.config = config or {}
        self.audio = audio
        self.video = video
        self.receive_audio = receive_audio
        self.heartbeat_s = heartbeat_s
        self._http = http
        self._own_http = http is None
        self.audio_jitter_frames = audio_jitter_frames
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.channel = None
        self.session_id: str | None = None
        self.events: list[dict[str, Any]] = []
        self.event_times: list[float] = []
        self._event_signal = asyncio.Condition()
        self._opened = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        # received audio: (arrival monotonic time, 48 kHz mono int16 samples)
        self.audio_frames: list[tuple[float, np.ndarray]] = []
        self._audio_samples = 0
        self.remote_audio_ended = asyncio.Event()

    async def __aenter__(self) -> ClientPeer:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        return self._http

    async def connect(self, timeout: float = 20.0) -> None:
        """Offer, get the answer, and wait until the event channel is open."""
        if self.audio is not None:
            self.pc.addTrack(self.audio)
        elif self.receive_audio:
            self.pc.addTransceiver("audio", direction="recvonly")
        if self.video is not None:
            self.pc.addTrack(self.video)
        for transceiver in self.pc.getTransceivers():
            if transceiver.kind == "audio":
                shorten_audio_jitter(transceiver.receiver, self.audio_jitter_frames)
        self.channel = self.pc.createDataChannel(LABEL, ordered=True)
        self.channel.on("message", self._on_message)
        self.channel.on("open", self._opened.set)
        self.pc.on("track", self._on_track)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        body = {"app": self.app, "sdp": self.pc.localDescription.sdp, "type": "offer", "config": self.config}
        headers = {"Authorization": f"Bearer {self.credential}"} if self.credential else {}
        async with self.http.post(f"{self.base_url}/v1/sessions", json=body, headers=headers) as resp:
            data = await resp.json(content_type=None)
            if resp.status != 201:
                raise SessionRefused(resp.status, data)
        self.session_id = data["session_id"]
        self.session_token = data.get("session_token")
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=data["sdp"], type="answer"))
        await asyncio.wait_for(self._opened.wait(), timeout)
        if self.heartbeat_s:
            self._tasks.append(asyncio.create_task(self._heartbeat(), name="client-heartbeat"))

    def send(self, event: dict[str, Any]) -> None:
        """Send a client event (an ``event_id`` is added when missing)."""
        event = {"event_id": f"cli_{time.monotonic_ns()}", **event}
        self.channel.send(json.dumps(event))

    def send_raw(self, text: str | bytes) -> None:
        self.channel.send(text)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            if self.channel is not None and self.channel.readyState == "open":
                self.send({"type": "ping", "client_ts": time.monotonic() * 1000})

    def _on_message(self, message: str | bytes) -> None:
        event = json.loads(message)
        self.events.append(event)
        self.event_times.append(time.monotonic())
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._event_signal:
            self._event_signal.notify_all()

    async def wait_for(self, event_type: str, predicate: Callable[[dict[str, Any]], bool] | None = None,
                       timeout: float = 10.0, after: int = 0) -> dict[str, Any]:
        """The first event of ``event_type`` (index >= ``after``) that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout

        def find() -> dict[str, Any] | None:
            for event in self.events[after:]:
                if event.get("type") == event_type and (predicate is None or predicate(event)):
                    return event
            return None

        async with self._event_signal:
            while (found := find()) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    seen = [e.get("type") for e in self.events[-20:]]
                    raise TimeoutError(f"no {event_type} event within {timeout} s; last events: {seen}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._event_signal.wait(), remaining)
        return found

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._tasks.append(asyncio.create_task(self._read_audio(track), name="client-audio"))
        else:
            self._tasks.append(asyncio.create_task(self._drain(track), name="client-drain"))

    async def _read_audio(self, track: MediaStreamTrack) -> None:
        resampler = audio_resampler(48000)
        try:
            while True:
                frame = await track.recv()
                now = time.monotonic()
                for f in resampler.resample(frame):
                    pcm = f.to_ndarray().reshape(-1)
                    self.audio_frames.append((now, pcm))
                    self._audio_samples += pcm.size
                while self._audio_samples > RECEIVED_AUDIO_LIMIT_S * 48000:
                    _, dropped = self.audio_frames.pop(0)
                    self._audio_samples -= dropped.size
        except MediaStreamError:
            pass
        finally:
            self.remote_audio_ended.set()

    @staticmethod
    async def _drain(track: MediaStreamTrack) -> None:
        try:
            while True:
                await track.recv()
        except MediaStreamError:
            pass

    def received_audio(self) -> np.ndarray:
        """All audio received so far, 48 kHz mono int16."""
        if not self.audio_frames:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate([pcm for _, pcm in self.audio_frames])

    @property
    def auth_headers(self) -> dict[str, str]:
        """``Authorization`` with the session's own token (for GET/PATCH/DELETE and exports of this session)."""
        return {"Authorization": f"Bearer {self.session_token}"} if self.session_token else {}

    async def session_info(self) -> dict[str, Any]:
        async with self.http.get(f"{self.base_url}/v1/sessions/{self.session_id}", headers=self.auth_headers) as resp:
            return await resp.json()

    async def delete(self) -> int:
        async with self.http.delete(f"{self.base_url}/v1/sessions/{self.session_id}",
                                    headers=self.auth_headers) as resp:
            return resp.status

    async def close(self, *, delete: bool = True) -> None:
        """End the session (DELETE unless ``delete=False``), close the peer connection and stop every task, in
        bounded time (:func:`~rtc_agent.rtc.peer_close.close_peer_connection`)."""
        if delete and self.session_id is not None and not self.http.closed:
            with contextlib.suppress(aiohttp.ClientError):
                await self.delete()
        for task in self._tasks:
            task.cancel()
        await close_peer_connection(self.pc, PC_CLOSE_TIMEOUT_S, name=f"client of {self.session_id}")
        await wait_tasks(self._tasks, TASKS_END_TIMEOUT_S, name=f"client of {self.session_id}")
        for task in self._tasks:  # a reader's own error ends with the peer (retrieved, so never logged as lost)
            if task.done() and not task.cancelled():
                task.exception()
        self._tasks.clear()
        if self._own_http and self._http is not None:
            await self._http.close()
