"""aiortc speakers of an SFU room, for tests: what a browser speaker does, without a browser.

A :class:`JanusSpeaker` opens its call session with rtc-agent (``mode: "sfu"``: events only, no media to
rtc-agent), reads ``room.joined``'s ``sfu {url, room, token, display}`` and publishes a microphone (``bursts`` of
its own tone) and a camera (a moving pattern) to the Janus VideoRoom under its participant id with its token,
as static/js/call/sfu.js does in a page. :meth:`JanusSpeaker.close` ends all of it (never raises).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription

from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.peer_close import close_peer_connection
from rtc_agent.rtc.sfu import JanusClient, videoroom
from rtc_agent.rtc.sources import PatternVideoTrack, PcmSourceTrack

RATE = 48_000
JOIN_TIMEOUT_S = 90.0


def bursts(freq: float, count: int = 12, seconds: float = 1.2, gap_s: float = 1.5) -> np.ndarray:
    """``count`` tones of ``freq`` Hz between silences (48 kHz int16): a scripted detector hears one utterance
    per tone, and the tone says whose it is."""
    t = np.arange(int(seconds * RATE)) / RATE
    ramp = np.minimum(1.0, np.minimum(t, seconds - t) / 0.01)  # 10 ms fades: no clicks
    tone = (0.3 * np.sin(2 * np.pi * freq * t) * ramp * 32767).astype(np.int16)
    quiet = np.zeros(int(gap_s * RATE), dtype=np.int16)
    return np.concatenate([quiet, *[np.concatenate([tone, quiet]) for _ in range(count)]])


class JanusSpeaker:
    """One aiortc speaker named ``name`` in rtc-agent room ``room`` at ``base_url``, speaking ``freq`` Hz tones."""

    def __init__(self, base_url: str, room: str, name: str, freq: float, *, video: tuple[int, int] = (160, 120),
                 language: str = "en") -> None:
        self.peer = ClientPeer(base_url, "call", receive_audio=False, config={
            "room": room, "mode": "sfu", "name": name, "language": language, "listen_language": language})
        self.name = name
        self.freq = freq
        self.video = video
        self.janus: JanusClient | None = None
        self.pc: RTCPeerConnection | None = None
        self.joined: dict[str, Any] | None = None
        self.feed_id: int | None = None

    async def start(self) -> JanusSpeaker:
        """Join the room, then publish audio and video to Janus; raises what rtc-agent or Janus refuse."""
        await self.peer.connect()
        self.joined = await self.peer.wait_for("room.joined", timeout=JOIN_TIMEOUT_S)
        sfu = self.joined["sfu"]
        self.janus = await JanusClient(sfu["url"]).connect()
        handle = await self.janus.attach(videoroom.PLUGIN)
        joined = await videoroom.join_publisher(handle, sfu["room"], display=sfu["display"], token=sfu["token"])
        self.feed_id = joined.get("id")
        self.pc = RTCPeerConnection()
        self.pc.addTransceiver(PcmSourceTrack(bursts(self.freq), RATE, tail="silence"), direction="sendonly")
        width, height = self.video
        self.pc.addTransceiver(PatternVideoTrack(width, height, fps=10), direction="sendonly")
        await self.pc.setLocalDescription(await self.pc.createOffer())
        answer = await videoroom.publish(handle, self.pc.localDescription.sdp, audio=True, video=True,
                                         display=sfu["display"])
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        return self

    async def close(self) -> None:
        if self.pc is not None:
            await close_peer_connection(self.pc, name="sfu speaker")
        if self.janus is not None:
            with contextlib.suppress(Exception):
                await self.janus.close()
        with contextlib.suppress(Exception):
            await self.peer.close()
