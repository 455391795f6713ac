"""The embedded scene describer on generated videos: commentary within 1.5 s of each change, silence elsewhere.

Videos are tiny MPEG-4 files written with PyAV into tmp_path (320x240, 10 fps, a little sensor noise) and sampled
at 1 fps as the camera path does. People are drawn faces (skin ellipse, hair, brows, eyes, nose, mouth) that
OpenCV's frontal-face Haar cascade detects. OpenCV builds without the packaged cascades (OpenCV 5) still get
the same changes reported as movement, so the timing checks hold in both modes; the wording checks about people
run only where the cascade exists. The face-count logic itself is also tested with a scripted detector.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from rtc_agent.engines.vlm import SessionOptions, VisionOutput
from rtc_agent.engines.vlm.chat_format import Segment
from rtc_agent.engines.vlm.scene import (
    SceneConfig,
    SceneDescriber,
    SceneDescriberEngine,
    SceneTokenSource,
    describe_view,
    haar_face_detector,
)

W, H, FPS = 320, 240, 10
TOLERANCE_S = 1.5
HAAR = haar_face_detector() is not None


def texture(seed: int, tint: tuple[int, int, int]) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (H // 8, W // 8, 3)).astype(np.float32)
    base = cv2.resize(base, (W, H), interpolation=cv2.INTER_CUBIC)
    return np.clip(0.35 * base + 0.65 * np.array(tint, np.float32), 0, 255).astype(np.uint8)


def draw_face(img: np.ndarray, cx: int, cy: int, s: float = 0.6) -> None:
    """A cartoon face the Haar cascade sees: dark brows and eyes over lighter cheeks, a bright nose bridge."""
    cv2.ellipse(img, (cx, cy), (int(45 * s), int(58 * s)), 0, 0, 360, (215, 175, 150), -1)
    cv2.ellipse(img, (cx, cy - int(40 * s)), (int(47 * s), int(25 * s)), 0, 180, 360, (40, 30, 30), -1)
    for dx in (-1, 1):
        ex, ey = cx + dx * int(18 * s), cy - int(8 * s)
        cv2.line(img, (ex - int(11 * s), ey - int(12 * s)), (ex + int(11 * s), ey - int(12 * s)), (50, 40, 40),
                 max(1, int(4 * s)))
        cv2.ellipse(img, (ex, ey), (int(10 * s), int(5 * s)), 0, 0, 360, (250, 250, 250), -1)
        cv2.circle(img, (ex, ey), max(1, int(4 * s)), (20, 20, 20), -1)
    cv2.line(img, (cx, cy - int(4 * s)), (cx - int(4 * s), cy + int(14 * s)), (180, 140, 120), max(1, int(2 * s)))
    cv2.ellipse(img, (cx, cy + int(28 * s)), (int(16 * s), int(6 * s)), 0, 0, 360, (150, 60, 60), -1)


BACKGROUND = texture(6, (110, 120, 110))


def write_video(path: Path, frame_at: Callable[[float], np.ndarray], seconds: float) -> Path:
    rng = np.random.default_rng(7)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        stream.bit_rate = 800_000
        for i in range(int(seconds * FPS)):
            noisy = frame_at(i / FPS).astype(np.int16) + rng.integers(-3, 4, (H, W, 3))
            frame = av.VideoFrame.from_ndarray(np.clip(noisy, 0, 255).astype(np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def sample(path: Path, fps: float = 1.0) -> list[tuple[float, np.ndarray]]:
    """The latest decoded frame at every 1/fps seconds, with its time (what VideoInput hands the app)."""
    frames: list[tuple[float, np.ndarray]] = []
    due = 0.0
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            t = float(frame.pts * frame.time_base)
            if t + 1e-6 >= due:
                frames.append((round(t, 3), frame.to_ndarray(format="rgb24")))
                due += 1 / fps
    return frames


def cuts_video(t: float) -> np.ndarray:
    if t < 2.0:
        return texture(1, (60, 150, 70))
    if t < 5.0:
        return texture(2, (50, 70, 170))
    return texture(3, (120, 40, 40))


def face_video(t: float) -> np.ndarray:
    """A person slides in from the left over 2.5-3.0 s, stays, and slides out to the right over 6.0-6.5 s."""
    img = BACKGROUND.copy()
    if 2.5 <= t < 6.5:
        if t < 3.0:
            cx = int(-40 + (t - 2.5) / 0.5 * 200)
        elif t < 6.0:
            cx = 160
        else:
            cx = int(160 + (t - 6.0) / 0.5 * 210)
        draw_face(img, cx, 120)
    return img


def ball_video(t: float) -> np.ndarray:
    """A ball rests on the left, rolls right from 3.0 to 6.0 s, then rests again."""
    img = BACKGROUND.copy()
    x = 40 if t < 3 else (280 if t >= 6 else int(40 + (t - 3) / 3 * 240))
    cv2.circle(img, (x, 170), 16, (230, 200, 40), -1)
    return img


def run_session(frames: list[tuple[float, np.ndarray]]) -> dict[float, list[str]]:
    """Feed frames one at a time through a real session of the engine; the sentences each frame caused."""
    engine = SceneDescriberEngine()
    engine.load(lambda msg: None)
    session = engine.open_session(SessionOptions(max_tokens_per_turn=1000, frame_queue_size=4))
    said: dict[float, list[str]] = {}
    with session:
        for ts, image in frames:
            session.push_frame(image, ts)
            events: list[VisionOutput] = []
            deadline = time.monotonic() + 10
            while not any(e.kind == "silence" for e in events):
                assert time.monotonic() < deadline, f"no silence after the frame at {ts}: {events}"
                event = session.poll_event(timeout=0.05)
                if event is not None:
                    events.append(event)
            text = "".join(e.text for e in events if e.kind == "text")
            assert all(e.frame_ts == ts for e in events if e.kind == "text")
            said[ts] = [text] if text else []
    engine.close()
    return said


def check_timing(said: dict[float, list[str]], changes: list[float]) -> None:
    """Every change gets commentary within TOLERANCE_S after it; every other frame is silent."""
    spoken = [ts for ts, text in said.items() if text]
    for change in changes:
        assert any(change <= ts <= change + TOLERANCE_S for ts in spoken), f"nothing said for the change at {change}"
    for ts in spoken:
        assert any(change <= ts <= change + TOLERANCE_S for change in changes), f"spurious commentary at {ts}: {said}"


@pytest.mark.real_model
def test_scene_cuts(tmp_path: Path) -> None:
    said = run_session(sample(write_video(tmp_path / "cuts.mp4", cuts_video, 8)))
    check_timing(said, [0.0, 2.0, 5.0])
    assert said[0.0] == ["I can see a mostly green view."]
    assert said[2.0] == ["The scene changed to a mostly blue view."]
    assert said[5.0][0].startswith("The scene changed to") and "red" in said[5.0][0]


@pytest.mark.real_model
def test_a_person_entering_and_leaving(tmp_path: Path) -> None:
    said = run_session(sample(write_video(tmp_path / "face.mp4", face_video, 9)))
    check_timing(said, [0.0, 2.5, 6.0])
    if HAAR:
        assert said[3.0] == ["A person appeared in the middle."]
        assert said[7.0] == ["The person left."]
    else:  # no cascade in this OpenCV build: the same changes, seen as movement
        assert said[3.0] == ["Something is moving in the middle."]


@pytest.mark.real_model
def test_movement(tmp_path: Path) -> None:
    said = run_session(sample(write_video(tmp_path / "ball.mp4", ball_video, 8)))
    check_timing(said, [0.0, 3.0])
    assert said[4.0] == ["Something is moving on the left."]


# --- the describer's rules, with a scripted face detector ------------------------------------------------------------

class ScriptedFaces:
    """Returns the scripted number of faces (centred boxes) for each call."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts
        self.calls = 0

    def __call__(self, gray: np.ndarray) -> list[tuple[int, int, int, int]]:
        n = self.counts[min(self.calls, len(self.counts) - 1)]
        self.calls += 1
        return [(10 + 40 * i, 10, 30, 30) for i in range(n)]


@pytest.mark.real_model
def test_face_changes_with_movement_are_immediate_and_flicker_needs_confirmation() -> None:
    still = BACKGROUND.copy()
    moved = BACKGROUND.copy()
    cv2.rectangle(moved, (100, 60), (200, 180), (250, 250, 250), -1)
    describer = SceneDescriber(face_detector=ScriptedFaces([0, 1, 1, 0, 1, 1, 1, 0, 0]))
    frames = [still, moved, moved, still, still, still, still, still, still]
    said = [describer.observe(img, float(t)) for t, img in enumerate(frames)]
    assert said[0] == ["I can see a grey view."]
    assert said[1] == ["A person appeared on the left."]  # with movement: at once
    assert said[2] == []
    assert said[3] == ["The person left."]  # with movement: at once
    assert said[4] == []  # a face without movement: wait for a second sample
    assert said[5] == ["A person appeared on the left."]
    assert said[6] == []
    assert said[7] == []  # gone without movement: confirm first
    assert said[8] == ["The person left."]
    assert describer.summary() == "I see no one in a grey view."


@pytest.mark.real_model
def test_prompt_gets_a_summary_and_stale_commentary_is_bounded() -> None:
    source = SceneTokenSource(SceneConfig(max_pending=2), face_detector=None)
    source.begin("system", "")
    frames = [cuts_video(t) for t in (0.0, 2.0, 5.5)]
    source.feed(Segment(text="", images=tuple(frames), timestamps=(0.0, 2.0, 5.5)))
    assert len(source._pending) == 2  # three sentences, the oldest dropped
    source.feed(Segment(text="", prompts=("what do you see?",)))
    tokens = []
    while (token := source.next_token(frozenset())) != source.SILENCE_ID:
        tokens.append(token)
    assert source.decode(tokens) == "I see a mostly red view."


@pytest.mark.parametrize(("tint", "phrase"), [
    ((200, 30, 30), "mostly red"), ((40, 160, 60), "mostly green"), ((30, 60, 200), "mostly blue"),
    ((20, 20, 20), "a dark view"), ((128, 128, 128), "a grey view"), ((240, 240, 240), "a bright, pale view"),
])
def test_view_phrases(tint: tuple[int, int, int], phrase: str) -> None:
    assert phrase in describe_view(np.full((40, 60, 3), tint, np.uint8))


@pytest.mark.real_model
def test_bench_vision_on_a_generated_video(tmp_path: Path) -> None:
    """``rtc-agent bench vision`` in lockstep mode: every cut found, nothing else said."""
    import argparse

    from rtc_agent.bench.vision import add_arguments, main

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    video = write_video(tmp_path / "cuts.mp4", cuts_video, 8)
    out = tmp_path / "bench.json"
    args = parser.parse_args(["--video", str(video), "--events", "0,2,5", "--speed", "0", "--drain-s", "0.3",
                              "--max-tokens-per-turn", "200", "--vlm-engine", "embedded", "--out", str(out)])
    result = main(args)
    assert result["detection"]["precision"] == 1.0 and result["detection"]["recall"] == 1.0
    assert result["fps"]["pushed"] == 8 and result["fps"]["dropped"] == 0
    assert result["latency_ms"]["count"] == 3
    assert [c["frame_ts"] for c in result["commentary"]] == [0.0, 2.0, 5.0]
    assert out.exists()


def test_bench_event_matching() -> None:
    from rtc_agent.bench.vision import match_events, parse_events

    assert parse_events("5, 2,9") == [2.0, 5.0, 9.0]
    assert parse_events("[1, 3.5]") == [1.0, 3.5]
    result = match_events([2.4, 2.9, 7.0, 9.0], [2.0, 5.0, 9.0], 1.5)
    # 2.4 matches 2.0; 2.9 would match 2.0 again (already taken); 7.0 is 2 s after 5.0; 9.0 matches 9.0
    assert result["matched"] == 2 and result["precision"] == 0.5 and result["recall"] == round(2 / 3, 4)
    assert result["missed"] == [5.0]
