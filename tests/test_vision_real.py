"""Visual commentary through the real path: a camera track on a real aiortc peer into the captions app, the
embedded scene describer behind the realtime vision session, vision.* events back on the data channel."""

from __future__ import annotations

import asyncio
import fractions

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.pacing import FramePacer

pytestmark = pytest.mark.real_model  # loads real models: .ci/run runs these under cpu-profile avx2 too


class SceneTrack(MediaStreamTrack):
    """A camera that shows a dark scene, then cuts to a bright one after ``cut_s``."""

    kind = "video"

    def __init__(self, cut_s: float, fps: int = 10) -> None:
        super().__init__()
        self.cut_s = cut_s
        self.fps = fps
        self.pacer = FramePacer(90000, 90000 // fps)
        self.frames = 0
        y, x = np.mgrid[0:240, 0:320]
        self.dark = np.stack([(x // 3) % 64, (y // 3) % 64, np.full_like(x, 40)], axis=-1).astype(np.uint8)
        self.bright = np.stack([255 - (y // 2) % 80, np.full_like(x, 220), (x // 2) % 200], axis=-1).astype(np.uint8)

    async def recv(self) -> av.VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        pts = await self.pacer.next_pts()
        image = self.dark if self.frames / self.fps < self.cut_s else self.bright
        self.frames += 1
        frame = av.VideoFrame.from_ndarray(image, format="rgb24")
        frame.pts, frame.time_base = pts, fractions.Fraction(1, 90000)
        return frame


async def test_camera_commentary_arrives_as_vision_events(start_server):
    server = await start_server(video_fps=2.0)
    peer = ClientPeer(server.url, "captions", config={"language": "en"}, video=SceneTrack(cut_s=2.5))
    await peer.connect()
    try:
        started = await peer.wait_for("vision.round.started", timeout=15)
        delta = await peer.wait_for("vision.text.delta", timeout=15)
        assert delta["round_id"] == started["round_id"] and delta["delta"]
        assert isinstance(delta["frame_ts"], float)
        await asyncio.sleep(4.0)  # past the cut
        text = "".join(e["delta"] for e in peer.events if e["type"] == "vision.text.delta")
        assert "scene" in text.lower() or "cut" in text.lower() or "change" in text.lower(), text
        assert any(e["type"] == "vision.silence" for e in peer.events)
        peer.send({"type": "vision.prompt", "text": "What do you see?"})
        answer = await peer.wait_for("vision.round.started", lambda e: e["prompt"] == "What do you see?", timeout=10)
        await peer.wait_for("vision.round.ended", lambda e: e["round_id"] == answer["round_id"], timeout=10)
        info = await peer.session_info()
        assert info["app_stats"]["vision"]["state"] == "running"
        assert info["engines"]["vlm"].startswith("embedded")
    finally:
        await peer.close()


async def test_second_camera_session_gets_a_capacity_error(start_server):
    server = await start_server(video_fps=2.0)
    first = ClientPeer(server.url, "captions", video=SceneTrack(cut_s=100))
    second = ClientPeer(server.url, "captions", video=SceneTrack(cut_s=100))
    await first.connect()
    try:
        await first.wait_for("vision.round.started", timeout=15)
        await second.connect()
        error = await second.wait_for("error", lambda e: e["error"]["code"] == "engine_capacity", timeout=15)
        assert "vision" in error["error"]["message"].lower() or error["error"]["message"]
        assert server.registry.get(second.session_id).state == "connected"  # the session goes on
    finally:
        await second.close()
        await first.close()


async def test_vision_can_be_turned_off(server):
    peer = ClientPeer(server.url, "captions", config={"vision": False}, video=SceneTrack(cut_s=1))
    await peer.connect()
    try:
        await asyncio.sleep(2.0)
        assert not [e for e in peer.events if e["type"].startswith("vision.")]
        peer.send({"type": "vision.prompt", "text": "hello"})
        await peer.wait_for("error", lambda e: e["error"]["code"] == "vision_unavailable")
    finally:
        await peer.close()


async def test_agent_sessions_can_watch_the_camera_too(start_server):
    server = await start_server(video_fps=2.0)
    peer = ClientPeer(server.url, "agent", config={"vision": True}, video=SceneTrack(cut_s=100))
    await peer.connect()
    try:
        delta = await peer.wait_for("vision.text.delta", timeout=15)
        assert delta["delta"]
    finally:
        await peer.close()
    plain = ClientPeer(server.url, "agent", video=SceneTrack(cut_s=100))
    await plain.connect()
    try:
        await asyncio.sleep(1.5)
        assert not [e for e in plain.events if e["type"].startswith("vision.")]
    finally:
        await plain.close()
