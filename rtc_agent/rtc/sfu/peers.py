"""aiortc peers to a Janus VideoRoom: one that receives a feed's audio, one that publishes an audio track.

:class:`FeedSubscriber` attaches its own VideoRoom handle, joins as a subscriber of one publisher's audio streams
(Janus offers; we answer with every candidate in the SDP, so no trickle is needed) and hands every decoded frame
of the first audio track to ``sink(pcm, start_ms)`` as 16 kHz mono int16 (:class:`~rtc_agent.rtc.AudioInput`,
its own sample-counted clock from 0). Every other track is drained, so aiortc queues nothing.

:class:`FeedPublisher` attaches its own handle, joins as a publisher under ``display`` with ``token`` and
publishes ``track`` (e.g. a :class:`~rtc_agent.rtc.SpeechOutput`) audio only; its Janus feed id is ``feed_id``,
returned by :meth:`FeedPublisher.start` once Janus reports the feed's PeerConnection up (``webrtcup``): from then on
others can subscribe to it.

Both end with :meth:`close` (idempotent, never raises): the handle leaves and detaches, the peer connection
closes, the reader ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

import rtc_agent.rtc.sfu.videoroom as videoroom
from rtc_agent.rtc.audio_input import AudioInput
from rtc_agent.rtc.clock import SessionClock
from rtc_agent.rtc.peer_close import close_peer_connection
from rtc_agent.rtc.sfu.janus_client import JanusClient, JanusError, JanusHandle
from rtc_agent.tasks import cancel_and_wait

log = logging.getLogger(__name__)

SETUP_TIMEOUT_S = 15.0


async def _drain(track: MediaStreamTrack) -> None:
    try:
        while True:
            await track.recv()
    except MediaStreamError:
        return


async def _end_handle(handle: JanusHandle | None, request: str) -> None:
    """Leave (or unpublish) and detach ``handle``; never raises."""
    if handle is None:
        return
    with contextlib.suppress(JanusError):
        if handle.client.connected and not handle.detached:
            await handle.message({"request": request}, wait_event=True, timeout=3.0)
    await handle.detach()


class FeedSubscriber:
    """Receives the audio of publisher ``feed_id`` in ``room_id`` (joining with ``token``) into ``sink``."""

    def __init__(self, client: JanusClient, room_id: int, feed_id: int, streams: list[dict], *, token: str,
                 sink: Callable[[np.ndarray, int], None], private_id: int | None = None) -> None:
        self.client = client
        self.room_id = room_id
        self.feed_id = feed_id
        self.streams = streams
        self.token = token
        self.sink = sink
        self.private_id = private_id
        self.pc = RTCPeerConnection()
        self.handle: JanusHandle | None = None
        self.audio: AudioInput | None = None
        self.tasks: list[asyncio.Task] = []
        self.closed = False

    @property
    def received_ms(self) -> int:
        return self.audio.received_ms if self.audio is not None else 0

    async def start(self) -> None:
        """Subscribe and answer; returns once Janus has our answer (media then flows). Raises
        :class:`JanusError` (the subscriber is closed then)."""
        try:
            await asyncio.wait_for(self._start(), SETUP_TIMEOUT_S)
        except TimeoutError:
            await self.close()
            raise JanusError(f"subscribing to feed {self.feed_id} took too long", code="sfu_timeout") from None
        except JanusError:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            raise JanusError(f"subscribing to feed {self.feed_id} failed: {exc}") from None

    async def _start(self) -> None:
        self.pc.on("track", self._on_track)
        self.handle = await self.client.attach(videoroom.PLUGIN)
        offer = await videoroom.join_subscriber(self.handle, self.room_id, self.streams, token=self.token,
                                                private_id=self.private_id)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        answer = await self.pc.createAnswer()
        await self.pc.setLocalDescription(answer)  # gathers every candidate into the SDP
        await videoroom.start(self.handle, self.pc.localDescription.sdp)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio" and self.audio is None:
            self.audio = AudioInput(track, SessionClock(), self.sink)
            self.tasks.append(asyncio.get_running_loop().create_task(self.audio.run(), name="sfu-feed-audio"))
        else:
            self.tasks.append(asyncio.get_running_loop().create_task(_drain(track), name="sfu-feed-drain"))

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await _end_handle(self.handle, "leave")
        await close_peer_connection(self.pc, name="sfu peer")  # ends the tracks, so the readers return
        for task in self.tasks:
            await cancel_and_wait(task)
        self.tasks.clear()


class FeedPublisher:
    """Publishes ``track`` (audio) into ``room_id`` as ``display``, joining with ``token``."""

    def __init__(self, client: JanusClient, room_id: int, track: MediaStreamTrack, *, display: str,
                 token: str) -> None:
        self.client = client
        self.room_id = room_id
        self.track = track
        self.display = display
        self.token = token
        self.pc = RTCPeerConnection()
        self.handle: JanusHandle | None = None
        self.feed_id: int | None = None
        self.private_id: int | None = None
        self.closed = False

    async def start(self) -> int:
        """Join and publish; the feed id. Raises :class:`JanusError` (the publisher is closed then)."""
        try:
            return await asyncio.wait_for(self._start(), SETUP_TIMEOUT_S)
        except TimeoutError:
            await self.close()
            raise JanusError(f"publishing {self.display!r} took too long", code="sfu_timeout") from None
        except JanusError:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            raise JanusError(f"publishing {self.display!r} failed: {exc}") from None

    async def _start(self) -> int:
        self.handle = await self.client.attach(videoroom.PLUGIN)
        up = asyncio.Event()  # Janus's ``webrtcup``: the feed can be subscribed to from then on
        self.handle.on_event = lambda data, jsep, message: up.set() if message.get("janus") == "webrtcup" else None
        joined = await videoroom.join_publisher(self.handle, self.room_id, display=self.display, token=self.token)
        self.feed_id = int(joined["id"])
        self.private_id = joined.get("private_id")
        self.pc.addTransceiver(self.track, direction="sendonly")
        offer = await self.pc.createOffer()
        await self.pc.setLocalDescription(offer)
        answer = await videoroom.publish(self.handle, self.pc.localDescription.sdp, audio=True, video=False)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        await up.wait()
        return self.feed_id

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await _end_handle(self.handle, "leave")
        await close_peer_connection(self.pc, name="sfu peer")
