"""VisionCommentary with a fake app context and a real Worker: events, capacity, drops, failures, shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np
import pytest

from rtc_agent.apps.vision_commentary import COMMENTARY_DEFAULTS, VisionCommentary, validate_commentary_config
from rtc_agent.config import Settings
from rtc_agent.engines.vlm import ENGINE_NAME, VLMEngine, engine_spec
from rtc_agent.errors import InvalidRequest
from rtc_agent.protocol.events import (
    Error,
    VisionFrameDropped,
    VisionRoundEnded,
    VisionRoundStarted,
    VisionSilence,
    VisionTextDelta,
)
from rtc_agent.worker import EngineSpec, Worker
from tests.fakes import ScriptedAppContext, ScriptedVLM
from tests.test_vision_session import SIL, ScriptedSource, ids_of


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


def scripted_worker(make_source: Callable[[], ScriptedSource]) -> tuple[Worker, ScriptedVLM]:
    engine = ScriptedVLM(make_source)
    worker = Worker()
    worker.add(EngineSpec(name=ENGINE_NAME, factory=lambda: engine, capacity=1))
    return worker, engine


FAST = {"max_tokens_per_turn": 1000}


def frame(tint: tuple[int, int, int]) -> np.ndarray:
    return np.full((96, 128, 3), tint, np.uint8)


@pytest.mark.real_model
async def test_scene_engine_commentary_becomes_vision_events() -> None:
    worker = Worker()
    worker.add(engine_spec(Settings()))  # the embedded default: the scene describer
    ctx = ScriptedAppContext(worker)
    commentary = VisionCommentary(ctx, worker, ENGINE_NAME, {**FAST, "silence_events": "all"})
    try:
        await commentary.start()
        assert commentary.state == "running"
        assert commentary.engine_info["backend"] == "scene"
        commentary.on_frame(frame((40, 160, 60)), 1000)
        await wait_for(lambda: bool(ctx.of(VisionRoundEnded)))
        started, = ctx.of(VisionRoundStarted)
        assert started.prompt is None  # spontaneous commentary
        deltas = ctx.of(VisionTextDelta)
        assert "".join(d.delta for d in deltas) == "I can see a mostly green view."
        assert {d.round_id for d in deltas} == {started.round_id}
        assert all(d.frame_ts == 1.0 for d in deltas)
        assert ctx.of(VisionSilence)[0].frame_ts == 1.0
        assert ctx.of(VisionRoundEnded)[0].round_id == started.round_id

        commentary.on_frame(frame((40, 160, 60)), 2000)  # nothing changed: silence only
        await wait_for(lambda: len(ctx.of(VisionSilence)) == 2)
        assert len(ctx.of(VisionRoundStarted)) == 1

        await commentary.prompt("What do you see?")
        await wait_for(lambda: len(ctx.of(VisionRoundEnded)) == 2)
        second = ctx.of(VisionRoundStarted)[1]
        assert second.prompt == "What do you see?" and second.round_id != started.round_id
        answer = "".join(d.delta for d in ctx.of(VisionTextDelta) if d.round_id == second.round_id)
        assert answer.startswith("I see") and "green" in answer
        stats = commentary.stats()
        assert stats["state"] == "running" and stats["frames_in"] == 2 and stats["rounds"] == 2
    finally:
        await commentary.close()
        await worker.close()
    assert commentary.state == "closed"
    assert all(t.done() for t in ctx.tasks)


async def test_silence_events_change_mode_reports_only_transitions() -> None:
    worker, _ = scripted_worker(lambda: ScriptedSource(
        react=lambda seg: [[i] for i in ids_of("hi")] + [[SIL]] if seg.timestamps[0] == 3.0 else [[SIL]]))
    ctx = ScriptedAppContext(worker)
    commentary = VisionCommentary(ctx, worker, ENGINE_NAME, FAST)  # silence_events defaults to "change"
    try:
        await commentary.start()
        for ts_ms in (1000, 2000, 3000, 4000, 5000):
            commentary.on_frame(frame((0, 0, 0)), ts_ms)
            await wait_for(lambda n=ts_ms: commentary.counts["silences"] >= n // 1000 + 1)
        # the first silence, then the one after "hi" (frame 3.0); the others are repeats
        assert [s.frame_ts for s in ctx.of(VisionSilence)] == [None, 3.0]
        assert "".join(d.delta for d in ctx.of(VisionTextDelta)) == "hi"
    finally:
        await commentary.close()
        await worker.close()


async def test_a_busy_engine_reports_engine_capacity_and_the_session_goes_on() -> None:
    worker, _ = scripted_worker(ScriptedSource)
    first_ctx, second_ctx = ScriptedAppContext(worker), ScriptedAppContext(worker)
    first = VisionCommentary(first_ctx, worker, ENGINE_NAME, FAST)
    second = VisionCommentary(second_ctx, worker, ENGINE_NAME, FAST)
    try:
        await first.start()
        assert first.state == "running"
        await second.start()
        assert second.state == "unavailable"
        error, = second_ctx.of(Error)
        assert error.error.code == "engine_capacity"
        assert error.error.type == "capacity_error"
        second.on_frame(frame((1, 2, 3)), 1000)  # ignored, no exception
        assert second.counts["frames_ignored"] == 1
        with pytest.raises(InvalidRequest) as info:
            await second.prompt("hello?")
        assert info.value.code == "vision_unavailable"
        assert second.stats()["error"]["code"] == "engine_capacity"

        await first.close()
        third = VisionCommentary(ScriptedAppContext(worker), worker, ENGINE_NAME, FAST)
        await third.start()
        assert third.state == "running"
        await third.close()
    finally:
        await first.close()
        await second.close()
        await worker.close()
    assert worker.stats()[ENGINE_NAME]["leases"] == 0


async def test_a_full_frame_queue_emits_frame_dropped() -> None:
    gate = threading.Event()

    def gated() -> ScriptedSource:
        source = ScriptedSource()
        source.gate = gate
        return source

    worker, _ = scripted_worker(gated)
    ctx = ScriptedAppContext(worker)
    commentary = VisionCommentary(ctx, worker, ENGINE_NAME, {**FAST, "frame_queue_size": 1})
    try:
        await commentary.start()
        commentary.on_frame(frame((0, 0, 0)), 1000)
        commentary.on_frame(frame((0, 0, 0)), 2000)  # the model is busy: 1.0 is dropped for 2.0
        dropped, = ctx.of(VisionFrameDropped)
        assert dropped.frame_ts == 2.0 and dropped.dropped == 1
        commentary.on_frame(frame((0, 0, 0)), 1500)  # going back in time: rejected, not queued
        assert commentary.counts["frames_rejected"] == 1
        assert commentary.stats()["pending_frames"] == 1
    finally:
        gate.set()
        await commentary.close()
        await worker.close()


async def test_a_model_failure_is_reported_and_the_lease_returned() -> None:
    worker, _ = scripted_worker(lambda: ScriptedSource(answer="abc", fail_after=2))
    ctx = ScriptedAppContext(worker)
    commentary = VisionCommentary(ctx, worker, ENGINE_NAME, FAST)
    try:
        await commentary.start()
        await commentary.prompt("go")
        await wait_for(lambda: commentary.state == "failed")
        error, = ctx.of(Error)
        assert error.error.code == "vision_failed"
        assert "model exploded" in error.error.message
        assert ctx.of(VisionRoundEnded)  # the open round was ended by the error
        with pytest.raises(InvalidRequest):
            await commentary.prompt("again")
    finally:
        await commentary.close()
        await worker.close()
    assert commentary.state == "closed"
    assert worker.stats()[ENGINE_NAME]["leases"] == 0


async def test_close_ends_the_open_round_stops_tasks_and_is_idempotent() -> None:
    worker, engine = scripted_worker(lambda: ScriptedSource(answer="x" * 2000))
    ctx = ScriptedAppContext(worker)
    commentary = VisionCommentary(ctx, worker, ENGINE_NAME, {"max_tokens_per_turn": 200})
    await commentary.start()
    await commentary.prompt("talk forever")
    await wait_for(lambda: len(ctx.of(VisionTextDelta)) >= 3)
    await commentary.close()
    await commentary.close()
    started = ctx.of(VisionRoundStarted)[-1]
    assert ctx.of(VisionRoundEnded)[-1].round_id == started.round_id
    assert all(t.done() for t in ctx.tasks)
    assert engine.sources[0].closed
    assert not engine.slot.busy
    assert worker.stats()[ENGINE_NAME]["leases"] == 0
    await worker.close()


async def test_an_engine_that_fails_to_load_makes_commentary_unavailable() -> None:
    class Broken(VLMEngine):
        def load(self, progress: Callable[[str], None]) -> None:
            raise OSError("no such model folder")

    worker = Worker()
    worker.add(EngineSpec(name=ENGINE_NAME, factory=Broken, capacity=1))
    ctx = ScriptedAppContext(worker)
    commentary = VisionCommentary(ctx, worker, ENGINE_NAME)
    await commentary.start()
    assert commentary.state == "unavailable"
    error, = ctx.of(Error)
    assert error.error.code == "engine_load_failed"
    assert worker.stats()[ENGINE_NAME]["leases"] == 0
    await commentary.close()
    await worker.close()


def test_config_defaults_and_validation() -> None:
    assert validate_commentary_config(None) == COMMENTARY_DEFAULTS
    assert validate_commentary_config({"frame_queue_size": 2})["frame_queue_size"] == 2
    for bad in ({"nope": 1}, {"max_tokens_per_turn": 0}, {"max_tokens_per_turn": 2.5}, {"frame_queue_size": True},
                {"silence_events": "sometimes"}, {"prompt": 3}, {"lease_wait_s": -1}):
        with pytest.raises(InvalidRequest) as info:
            validate_commentary_config(bad)
        assert info.value.code == "invalid_config"
