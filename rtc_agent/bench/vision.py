"""Visual commentary benchmark: ``rtc-agent bench vision --video FILE [--events TIMES] [--out FILE]``.

The video is decoded with PyAV and sampled as the camera path does (the latest frame every ``1 / fps`` seconds,
longest edge ``max-edge``, RGB), then fed through the real app path: a :class:`~rtc_agent.worker.Worker` with the
configured vision engine (``--vlm-engine`` etc., the server's settings) and a
:class:`~rtc_agent.apps.vision_commentary.VisionCommentary` whose ``vision.*`` events are recorded with their
wall-clock times. Frames are paced at the video's own clock (``--speed 1``), faster (``--speed 4``), or in
lockstep (``--speed 0``: each frame waits for the model's decision on the previous one, which measures the most
frames per second the model sustains).

Reported:

- ``latency_ms``: frame-to-text latency of each commentary round: from pushing the frame the model had last
  seen (the first delta's ``frame_ts``) to that first delta, p50/p90/max/mean;
- ``fps``: frames pushed and dropped, and frames per second the model took in (pushed minus dropped minus
  still queued, over the run's wall time);
- ``detection``: with ``--events`` (known change times in seconds), each round's first ``frame_ts`` is a
  detection; a detection matches an unmatched event when it lies within ``[event, event + tolerance]``;
  precision = matched detections / detections, recall = matched events / events;
- ``commentary``: every round's text with its ``frame_ts`` (the first 200).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["add_arguments", "main", "match_events", "parse_events", "run", "sample_video"]


def parse_events(value: str | None) -> list[float] | None:
    """Known event times: ``"2,5.5,9"``, or a file holding such a list, one time per line, or a JSON list."""
    if value is None or value == "":
        return None
    path = Path(value)
    text = path.read_text() if path.exists() else value
    text = text.strip()
    if text.startswith("["):
        times = [float(t) for t in json.loads(text)]
    else:
        times = [float(t) for t in text.replace("\n", ",").split(",") if t.strip()]
    if any(t < 0 or not math.isfinite(t) for t in times):
        raise ValueError("event times must be finite seconds >= 0")
    return sorted(times)


def sample_video(path: str | Path, fps: float, max_edge: int, max_seconds: float | None = None
                 ) -> list[tuple[float, np.ndarray]]:
    """``(ts, rgb)`` for the latest frame at every ``1 / fps`` seconds of the video, scaled to fit ``max_edge``."""
    import av

    frames: list[tuple[float, np.ndarray]] = []
    due = 0.0
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            t = float(frame.pts * frame.time_base)
            if max_seconds is not None and t > max_seconds:
                break
            if t + 1e-6 < due:
                continue
            scale = min(1.0, max_edge / max(frame.width, frame.height))
            w = max(2, round(frame.width * scale) // 2 * 2)
            h = max(2, round(frame.height * scale) // 2 * 2)
            frames.append((round(t, 3), frame.to_ndarray(width=w, height=h, format="rgb24")))
            while due <= t + 1e-6:
                due += 1.0 / fps
    return frames


def match_events(detections: list[float], events: list[float], tolerance: float) -> dict[str, Any]:
    """Greedy one-to-one matching in time order: a detection ``d`` matches the earliest unmatched event ``e``
    with ``e <= d <= e + tolerance``."""
    used: set[int] = set()
    matched = 0
    delays: list[float] = []
    for d in sorted(detections):
        for i, e in enumerate(events):
            if i not in used and e - 1e-6 <= d <= e + tolerance + 1e-6:
                used.add(i)
                matched += 1
                delays.append(d - e)
                break
    return {
        "events": len(events),
        "detections": len(detections),
        "matched": matched,
        "precision": round(matched / len(detections), 4) if detections else None,
        "recall": round(len(used) / len(events), 4) if events else None,
        "missed": [e for i, e in enumerate(events) if i not in used],
        "mean_detection_delay_s": round(sum(delays) / len(delays), 3) if delays else None,
        "tolerance_s": tolerance,
    }


def _summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0, "p50": None, "p90": None, "max": None, "mean": None}
    ordered = sorted(values)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]

    return {"count": len(values), "p50": round(pct(50), 1), "p90": round(pct(90), 1), "max": round(ordered[-1], 1),
            "mean": round(sum(values) / len(values), 1)}


class _RecordingContext:
    """The AppContext the commentary needs, recording every event with its wall-clock time."""

    session_id = "bench"
    speech = None

    def __init__(self, worker: Any, settings: Any) -> None:
        self.worker = worker
        self.settings = settings
        self.events: list[tuple[float, Any]] = []
        self.tasks: set[asyncio.Task[Any]] = set()

    def now_ms(self) -> int:
        return 0

    def emit(self, event: Any) -> None:
        self.events.append((time.monotonic(), event))

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.add(task)
        return task


async def run(frames: list[tuple[float, np.ndarray]], settings: Any, *, events: list[float] | None,
              tolerance: float = 1.5, speed: float = 1.0, prompt: str | None = None,
              max_tokens_per_turn: int = 12, frame_queue_size: int = 8, drain_s: float = 3.0) -> dict[str, Any]:
    """Feed ``frames`` through the vision engine of ``settings`` and measure (see the module docstring)."""
    from rtc_agent.apps.vision_commentary import VisionCommentary
    from rtc_agent.engines.vlm import ENGINE_NAME, engine_spec
    from rtc_agent.protocol.events import Error, VisionFrameDropped, VisionRoundStarted, VisionTextDelta
    from rtc_agent.worker import Worker

    worker = Worker()
    worker.add(engine_spec(settings))
    ctx = _RecordingContext(worker, settings)
    config: dict[str, Any] = {"max_tokens_per_turn": max_tokens_per_turn, "frame_queue_size": frame_queue_size,
                              "silence_events": "all", "lease_wait_s": 0.0}
    if prompt:
        config["prompt"] = prompt
    commentary = VisionCommentary(ctx, worker, ENGINE_NAME, config)
    pushed_at: dict[float, float] = {}
    load_start = time.monotonic()
    try:
        await commentary.start()
        load_s = time.monotonic() - load_start
        if commentary.state != "running":
            errors = [e.error.model_dump() for _, e in ctx.events if isinstance(e, Error)]
            raise RuntimeError(f"the vision engine did not start: {errors}")
        start = time.monotonic()
        for ts, image in frames:
            if speed > 0:
                delay = start + ts / speed - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            decided = commentary.counts["silences"]
            pushed_at[ts] = time.monotonic()
            commentary.on_frame(image, round(ts * 1000))
            if speed == 0:  # lockstep: wait for the model's decision on this frame
                deadline = time.monotonic() + 60.0
                while commentary.counts["silences"] == decided and time.monotonic() < deadline:
                    await asyncio.sleep(0.002)
        fed_end = time.monotonic()
        quiet_since = time.monotonic()
        seen = len(ctx.events)
        while time.monotonic() - quiet_since < drain_s:  # let the model finish what it is saying
            await asyncio.sleep(0.05)
            if len(ctx.events) != seen:
                seen, quiet_since = len(ctx.events), time.monotonic()
        stats = commentary.stats()
        engine_info = dict(commentary.engine_info)
    finally:
        await commentary.close()
        await worker.close()

    elapsed = max(1e-9, fed_end - start)
    rounds: dict[str, dict[str, Any]] = {}
    for wall, event in ctx.events:
        if isinstance(event, VisionRoundStarted):
            rounds[event.round_id] = {"prompt": event.prompt, "text": "", "frame_ts": None, "first_delta_at": None}
        elif isinstance(event, VisionTextDelta):
            entry = rounds.setdefault(event.round_id, {"prompt": None, "text": "", "frame_ts": None,
                                                       "first_delta_at": None})
            if entry["first_delta_at"] is None:
                entry["first_delta_at"], entry["frame_ts"] = wall, event.frame_ts
            entry["text"] += event.delta
    spoken = [r for r in rounds.values() if r["first_delta_at"] is not None]
    latencies = [1000 * (r["first_delta_at"] - pushed_at[r["frame_ts"]]) for r in spoken
                 if r["frame_ts"] in pushed_at]
    dropped = sum(1 for _, e in ctx.events if isinstance(e, VisionFrameDropped))
    taken = stats["frames_in"] - dropped - stats.get("pending_frames", 0)
    detections = [r["frame_ts"] for r in spoken if r["frame_ts"] is not None and r["prompt"] is None]
    return {
        "engine": engine_info,
        "settings": {"vlm_engine": settings.vlm_engine, "vlm_url": settings.vlm_url, "vlm_model": settings.vlm_model},
        "frames": len(frames),
        "speed": speed,
        "load_s": round(load_s, 3),
        "latency_ms": _summary(latencies),
        "fps": {"pushed": stats["frames_in"], "dropped": dropped, "taken": taken,
                "sustained": round(taken / elapsed, 3), "wall_s": round(elapsed, 3),
                "video_s": frames[-1][0] if frames else 0.0},
        "decisions": stats["silences"],
        "detection": match_events(detections, events, tolerance) if events is not None else None,
        "commentary": [{"frame_ts": r["frame_ts"], "text": r["text"], "prompt": r["prompt"]} for r in spoken][:200],
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine()},
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rtc-agent bench vision``."""
    parser.add_argument("--video", required=True, help="video file to replay as the camera")
    parser.add_argument("--events", default=None, metavar="TIMES",
                        help="known change times in seconds: '2,5.5,9', or a file with one per line or a JSON list")
    parser.add_argument("--tolerance", type=float, default=1.5,
                        help="a detection counts within this many seconds after an event (default 1.5)")
    parser.add_argument("--fps", type=float, default=None, help="sampling rate (default: the video_fps setting, 1)")
    parser.add_argument("--max-edge", type=int, default=None,
                        help="longest frame edge in px (default: the video_max_edge setting, 512)")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="replay speed: 1 = real time (default), 2 = twice as fast, 0 = lockstep")
    parser.add_argument("--max-seconds", type=float, default=None, help="only the first S seconds of the video")
    parser.add_argument("--prompt", default=None, help="the standing commentary instruction")
    parser.add_argument("--max-tokens-per-turn", type=int, default=12, help="decode rate cap, tokens/s (default 12)")
    parser.add_argument("--frame-queue-size", type=int, default=8, help="frames waiting for the model (default 8)")
    parser.add_argument("--drain-s", type=float, default=3.0,
                        help="after the last frame, stop once no event arrived for this long (default 3)")
    parser.add_argument("--vlm-engine", default=None, help="vision engine (default: the vlm_engine setting)")
    parser.add_argument("--vlm-url", default=None, help="remote service URL (default: the vlm_url setting)")
    parser.add_argument("--vlm-model", default=None, help="model folder or name (default: the vlm_model setting)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON results here")


def main(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark; write the JSON to ``args.out`` when given; return the results."""
    from rtc_agent.config import load_settings

    overrides = {k: getattr(args, k) for k in ("vlm_engine", "vlm_url", "vlm_model")
                 if getattr(args, k, None) is not None}
    settings = load_settings(overrides=overrides)
    fps = args.fps if getattr(args, "fps", None) else settings.video_fps
    max_edge = args.max_edge if getattr(args, "max_edge", None) else settings.video_max_edge
    if fps <= 0 or max_edge < 16 or args.speed < 0:
        raise ValueError("--fps must be > 0, --max-edge >= 16 and --speed >= 0")
    frames = sample_video(args.video, fps, max_edge, getattr(args, "max_seconds", None))
    if not frames:
        raise ValueError(f"no video frames decoded from {args.video}")
    result = asyncio.run(run(
        frames, settings, events=parse_events(getattr(args, "events", None)),
        tolerance=getattr(args, "tolerance", 1.5), speed=args.speed, prompt=getattr(args, "prompt", None),
        max_tokens_per_turn=getattr(args, "max_tokens_per_turn", 12),
        frame_queue_size=getattr(args, "frame_queue_size", 8), drain_s=getattr(args, "drain_s", 3.0)))
    result["video"] = str(args.video)
    result["fps"]["sampling"] = fps
    out = getattr(args, "out", None)
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m rtc_agent.bench.vision", description=__doc__)
    add_arguments(_parser)
    print(json.dumps(main(_parser.parse_args()), indent=2))
