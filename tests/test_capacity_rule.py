"""The capacity rule with scripted speed figures, the speed book, the probes' request shapes and per-app
admission (no real model here: the real path is tests/test_capacity_server.py)."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

from rtc_agent.config import Settings, SettingsError
from rtc_agent.config.validation import validate
from rtc_agent.engines.asr.base import TranscribeRequest, Transcript
from rtc_agent.engines.speed_probes import FINAL_BEAM, PARTIAL_BATCH, asr_probe, embedded_probes
from rtc_agent.errors import AtCapacity
from rtc_agent.worker import EngineSpec, LoadAdmission, Worker
from rtc_agent.worker.capacity import CapacityPlanner, app_capacity, app_demand, parse_overrides
from rtc_agent.worker.speed import ProbeResult, SpeedBook, SpeedProbe

# Whisper base on a fast 2-core machine, and the same machine twice as slow (the AMD EPYC of issue 19)
FAST = {"asr": {"partial_s": 0.11, "partial_batch_s": 0.06, "final_s": 0.30}}
SLOW = {"asr": {k: 2 * v for k, v in FAST["asr"].items()}}
PARALLEL = {"asr": 2, "tts": 1, "llm": 1}


def limit(app: str, figures, **kwargs) -> int | None:
    options = {"max_sessions": 16, **kwargs}
    return app_capacity(app, figures, PARALLEL, **options).sessions


def test_captions_capacity_follows_the_measured_asr_speed():
    # per second of speech: one batched partial (0.06) + a final per 3 s (0.10) = 0.16 ASR-s, over 2 decodes at once
    assert app_demand("captions", FAST)["asr"] == pytest.approx(0.16)
    fast = app_capacity("captions", FAST, PARALLEL, max_sessions=16)
    assert fast.source == "measured" and fast.share == pytest.approx(0.08)
    assert fast.sessions == 10  # floor(1 / (1.25 * 0.08))
    assert limit("captions", SLOW) == 5  # twice as slow: half the sessions
    assert limit("captions", SLOW, safety=2.0) == 3
    assert limit("call", SLOW) == 10  # a participant speaks half the time


def test_capacity_is_capped_by_max_sessions_and_never_below_one():
    assert limit("captions", FAST, max_sessions=3) == 3
    crawling = {"asr": {"partial_batch_s": 5.0, "final_s": 20.0}}
    assert limit("captions", crawling) == 1
    free = {"asr": {"partial_batch_s": 0.0, "final_s": 0.0}}
    assert limit("captions", free, max_sessions=5) == 5


def test_agent_and_interpret_add_their_engines():
    figures = {**FAST, "tts": {"rtf": 0.1}, "llm": {"prefill_s": 0.2, "prompt_tokens": 100.0, "step_s": 0.02}}
    demand = app_demand("agent", figures)
    assert demand["llm"] == pytest.approx((400 * 0.002 + 40 * 0.02) / 12)
    assert demand["tts"] == pytest.approx(5 * 0.1 / 12)
    assert set(app_demand("interpret", figures)) == {"asr", "tts"}
    agent = app_capacity("agent", figures, PARALLEL, max_sessions=16)
    assert agent.share == pytest.approx(demand["asr"] / 2 + demand["llm"] + demand["tts"])
    assert agent.sessions == int(1 / (1.25 * agent.share)) == 4
    slower_llm = {**figures, "llm": {**figures["llm"], "step_s": 0.3}}
    assert limit("agent", slower_llm) < agent.sessions
    assert limit("captions", figures) == limit("captions", FAST)  # the LLM does not limit captions


def test_unmeasured_while_an_engine_is_pending_or_nothing_was_measured():
    pending = app_capacity("agent", FAST, PARALLEL, pending={"llm"}, max_sessions=16)
    assert pending.sessions is None and pending.source == "unmeasured" and pending.waiting == ("llm",)
    assert app_capacity("captions", {}, PARALLEL, max_sessions=16).source == "unmeasured"
    # an engine that is not probed (remote) costs this machine nothing: the agent is limited by its ASR alone
    assert limit("agent", FAST) == 16
    with pytest.raises(ValueError):
        app_demand("echo", FAST)


def test_overrides_replace_the_measured_limit():
    assert parse_overrides(["captions=4,agent=2", "call=3"]) == {"captions": 4, "agent": 2, "call": 3}
    assert parse_overrides([]) == {}
    for bad in (["captions"], ["echo=2"], ["captions=0"], ["captions=x"]):
        with pytest.raises(ValueError):
            parse_overrides(bad)
    capped = app_capacity("captions", {}, PARALLEL, max_sessions=3, override=4)
    assert (capped.sessions, capped.source) == (3, "override")


def test_settings_validation_of_the_capacity_settings():
    validate(dataclasses.replace(Settings(), capacity_sessions=["captions=2", "agent=1"], capacity_safety=2.0))
    for bad in ({"capacity_sessions": ["captions=0"]}, {"capacity_sessions": ["echo=2"]},
                {"capacity_sessions": ["captions"]}, {"capacity_safety": 0.5}):
        with pytest.raises(SettingsError):
            validate(dataclasses.replace(Settings(), **bad))


def test_speed_book_blends_reprobes_and_running_figures():
    book = SpeedBook()
    book.expect(["asr"])
    assert not book.observe("asr", "final_s", 1.0)  # nothing to update before a probe
    book.record("asr", ProbeResult({"final_s": 0.4}, parallel=2, note="speech (tts)"))
    assert book.pending == set() and book.parallel() == {"asr": 2}
    book.record("asr", ProbeResult({"final_s": 0.8}, parallel=2))
    assert book.figures()["asr"]["final_s"] == pytest.approx(0.4 + 0.3 * 0.4)
    assert book.observe("asr", "final_s", 0.52)
    assert book.figures()["asr"]["final_s"] == pytest.approx(0.52)
    assert not book.observe("asr", "unknown_s", 1.0)
    snapshot = book.snapshot()
    assert snapshot["engines"]["asr"]["source"] == "running" and snapshot["engines"]["asr"]["probes"] == 2
    book.fail("tts", "not loaded")
    assert book.snapshot()["failed"] == {"tts": "not loaded"}


def test_planner_follows_the_book_and_can_be_switched_off():
    book = SpeedBook()
    book.expect(["asr"])
    planner = CapacityPlanner(book, max_sessions=16, running=lambda app: 2 if app == "captions" else 0)
    assert planner.limit("captions") is None  # still pending: admit as before
    book.record("asr", ProbeResult(FAST["asr"], parallel=2))
    assert planner.limit("captions") == 10
    assert planner.limit("echo") is None  # no model: never limited
    book.record("asr", ProbeResult(SLOW["asr"], parallel=2))  # a slower re-probe moves the limit down
    assert planner.limit("captions") == 7  # 1.3 x the fast figures
    snapshot = planner.snapshot()
    assert snapshot["apps"]["captions"] == {**snapshot["apps"]["captions"], "sessions": 7, "running": 2,
                                            "source": "measured", "enforced": True}
    off = CapacityPlanner(book, max_sessions=16, enabled=False)
    assert off.limit("captions") is None and off.snapshot()["apps"]["captions"]["enforced"] is False


class _Lag:
    def sample_count(self) -> int:
        return 0


class _Quiet:
    def recent_queue_delays_ms(self, seconds: float) -> dict[str, float]:
        return {}


def admission(limits: dict[str, int | None], running: dict[str, int]) -> LoadAdmission:
    return LoadAdmission(max_loop_lag_ms=300, max_queue_delay_ms=2500, lag_monitor=_Lag(), worker=_Quiet(),
                         running=lambda app=None: sum(running.values()) if app is None else running.get(app, 0),
                         capacity=lambda app: limits.get(app))


def test_admission_refuses_the_session_past_its_apps_capacity():
    gate = admission({"captions": 2, "agent": 1}, {"captions": 2, "agent": 0})
    gate.check()  # no app: the load signals only
    gate.check("agent")
    gate.check("echo")  # no capacity for this app
    with pytest.raises(AtCapacity) as refused:
        gate.check("captions")
    assert refused.value.code == "server_busy" and refused.value.status == 503
    assert refused.value.retry_after >= 1 and "captions" in refused.value.message
    assert gate.refused == 1
    gate.check("call")


def test_admission_without_capacity_or_unmeasured_admits():
    admission({"captions": None}, {"captions": 50}).check("captions")
    LoadAdmission(max_loop_lag_ms=0, max_queue_delay_ms=0, lag_monitor=_Lag(), worker=_Quiet()).check("captions")


class _ScriptedASR:
    """Records the requests the probe sends; answers like a recognizer that heard four words."""

    def __init__(self) -> None:
        self.batches: list[list] = []

    def load(self, progress) -> None:
        pass

    def run_batch(self, requests: list) -> list:
        self.batches.append(list(requests))
        return [Transcript(text="one two three four", audio_s=r.duration_s) for r in requests]


async def test_probe_times_the_captions_shapes_of_the_loaded_engines_only():
    engine = _ScriptedASR()
    worker = Worker()
    worker.add(EngineSpec("asr", lambda: engine, max_batch=8, concurrency=2))
    worker.add(EngineSpec("tts", lambda: engine))  # registered, never loaded
    book = SpeedBook()
    probe = SpeedProbe(worker, book, embedded_probes(Settings(), lambda name: probe.loaded_call(name)),
                       targets=["asr", "tts", "llm"])
    assert probe.targets == ["tts", "asr"]  # the LLM is not registered; the TTS speaks first when loaded
    assert book.pending == {"tts", "asr"}
    await worker.load("asr")
    await probe.probe_all()
    await worker.close()
    snapshot = book.snapshot()
    assert snapshot["failed"] == {"tts": "not loaded"} and snapshot["pending"] == []
    asr = snapshot["engines"]["asr"]
    assert set(asr["figures"]) == {"partial_s", "partial_batch_s", "final_s"}
    assert asr["parallel"] == 2 and asr["note"].startswith("noise")  # no TTS loaded: noise as the input
    shapes = sorted({(len(b), r.beam_size, round(r.duration_s)) for b in engine.batches for r in b})
    assert shapes == [(1, 1, 4), (1, FINAL_BEAM, 8), (PARTIAL_BATCH, 1, 4)]


async def test_asr_probe_decodes_tts_speech_when_the_voice_is_loaded():
    engine = _ScriptedASR()

    class Voice:
        def __init__(self) -> None:
            self.pcm = (np.sin(np.arange(22050 * 3) / 7) * 8000).astype(np.int16)
            self.sample_rate = 22050

    async def call(request):
        return engine.run_batch([request])[0]

    async def speak(request):
        return Voice()

    result = await asr_probe(call, tts_call=speak, parallel=2)
    assert result.note.startswith("speech (tts)")
    assert all(len(r.audio) in (4 * 16000, 8 * 16000) for b in engine.batches for r in b)


async def test_probe_waits_for_the_load_then_reprobes_only_while_idle():
    worker = Worker()
    worker.add(EngineSpec("asr", _ScriptedASR))
    book, idle, runs = SpeedBook(), {"now": True}, []

    async def probe_fn(call) -> ProbeResult:
        await call(TranscribeRequest(np.zeros(1600, dtype=np.float32)))
        runs.append(idle["now"])
        return ProbeResult({"final_s": 0.5}, parallel=2)

    probe = SpeedProbe(worker, book, {"asr": probe_fn}, targets=["asr"], idle=lambda: idle["now"],
                       reprobe_s=0.01, poll_s=0.01)
    probe.start()
    try:
        await asyncio.sleep(0.1)
        assert runs == [] and book.pending == {"asr"}  # not loaded yet: a probe never loads an engine itself
        await worker.load("asr")
        async with asyncio.timeout(10):
            while len(runs) < 2:  # the first probe, then re-probes while no session runs
                await asyncio.sleep(0.01)
        idle["now"] = False
        count = len(runs)
        await asyncio.sleep(0.1)
        assert len(runs) <= count + 1 and all(runs)  # (one may have started just before) none while busy
        assert book.snapshot()["engines"]["asr"]["probes"] >= 2
    finally:
        await probe.stop()
        await worker.close()
