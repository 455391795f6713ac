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
from rtc_agent.engines.speed_probes import (
    FINAL_BEAM,
    PARTIAL_BATCH,
    asr_expected_s,
    asr_probe,
    embedded_expectations,
    embedded_probes,
)
from rtc_agent.errors import AtCapacity
from rtc_agent.worker import EngineSpec, LoadAdmission, Worker
from rtc_agent.worker.capacity import CapacityPlanner, app_capacity, app_demand, parse_overrides
from rtc_agent.worker.speed import (
    MIN_RUNNING,
    ProbeResult,
    RunningSpeed,
    ServiceLog,
    ServiceSample,
    SpeedBook,
    SpeedProbe,
)
from tests.fakes import ScriptedASR

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
    validate(dataclasses.replace(Settings(), capacity_running_window=3, capacity_running_recovery=1.0))
    for bad in ({"capacity_sessions": ["captions=0"]}, {"capacity_sessions": ["echo=2"]},
                {"capacity_sessions": ["captions"]}, {"capacity_safety": 0.5}, {"capacity_running_window": 2},
                {"capacity_running_recovery": 0.0}, {"capacity_running_recovery": 1.5}):
        with pytest.raises(SettingsError):
            validate(dataclasses.replace(Settings(), **bad))


def test_speed_book_blends_reprobes_and_keeps_the_probe_figures_apart_from_the_running_ones():
    book = SpeedBook()
    book.expect(["asr"])
    assert not book.observe_slowdown("asr", 2.0)  # nothing to slow down before a probe
    book.record("asr", ProbeResult({"final_s": 0.4}, parallel=2, note="speech (tts)"))
    assert book.pending == set() and book.parallel() == {"asr": 2}
    book.record("asr", ProbeResult({"final_s": 0.8}, parallel=2))
    assert book.figures()["asr"]["final_s"] == pytest.approx(0.4 + 0.3 * 0.4)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        assert not book.observe_slowdown("asr", bad)
    snapshot = book.snapshot()["engines"]["asr"]
    assert snapshot["source"] == "probe" and snapshot["probes"] == 2 and snapshot["slowdown"] == 1.0
    book.fail("tts", "not loaded")
    assert book.snapshot()["failed"] == {"tts": "not loaded"}


@pytest.mark.parametrize("slow", [1.5, 2.0, 3.0])
def test_the_running_slowdown_drops_capacity_at_once_and_raises_it_slowly(slow):
    book = SpeedBook(window=10, recovery=0.05)
    book.record("asr", ProbeResult(FAST["asr"], parallel=2))
    planner = CapacityPlanner(book, max_sessions=16)
    assert planner.limit("captions") == 10
    for _ in range(MIN_RUNNING):  # batches take ``slow`` times what the probe predicts
        assert book.observe_slowdown("asr", slow * 1.02)
    assert book.figures()["asr"]["final_s"] == pytest.approx(FAST["asr"]["final_s"] * slow * 1.02)
    assert book.probe_figures() == FAST  # the probe's figures stay as measured
    lowered = planner.limit("captions")
    assert lowered == limit("captions", {"asr": {k: v * slow * 1.02 for k, v in FAST["asr"].items()}}) < 10
    snapshot = planner.snapshot()
    assert snapshot["apps"]["captions"]["probe_sessions"] == 10 and snapshot["apps"]["captions"]["sessions"] == lowered
    assert snapshot["engines"]["asr"]["source"] == "running"
    assert snapshot["engines"]["asr"]["slowdown"] == pytest.approx(slow * 1.02, rel=1e-3)
    # the machine is fast again: after a few batches the limit has not jumped back...
    for _ in range(8):
        book.observe_slowdown("asr", 1.0)
    assert lowered <= planner.limit("captions") < 10
    for _ in range(200):  # ...but it comes back over many
        book.observe_slowdown("asr", 1.0)
    assert planner.limit("captions") == 10
    # a noisy batch (a stall) moves the median, not the limit, on its own; a clamped outlier stays bounded
    book.observe_slowdown("asr", 1e6)
    assert planner.limit("captions") == 10


def test_asr_expectation_follows_the_probe_shapes():
    figures = FAST["asr"]
    one = ServiceSample((("partial", 4.0),), 0.2)
    assert asr_expected_s(figures, one) == pytest.approx(figures["partial_s"])
    four = ServiceSample((("partial", 4.0),) * 4, 0.5)
    assert asr_expected_s(figures, four) == pytest.approx(4 * figures["partial_batch_s"])
    two = asr_expected_s(figures, ServiceSample((("partial", 4.0),) * 2, 0.3))
    assert 2 * figures["partial_batch_s"] < two < 2 * figures["partial_s"]
    final = ServiceSample((("final", 16.0),), 1.0)
    assert asr_expected_s(figures, final) == pytest.approx(2 * figures["final_s"])
    # a smaller beam (the decode plan's) is predicted between the greedy and the beam-5 cost
    greedy_8s = min(figures["final_s"], 2 * figures["partial_s"])
    beam3 = asr_expected_s(figures, ServiceSample((("final:3", 8.0),), 1.0))
    assert beam3 == pytest.approx((greedy_8s + figures["final_s"]) / 2) and greedy_8s < beam3 < figures["final_s"]
    mixed = ServiceSample((("final", 8.0), ("partial", 4.0)), 1.0)
    assert asr_expected_s(figures, mixed) == pytest.approx(figures["final_s"] + figures["partial_s"])
    for odd in ((("partial", 0.4),), (("final", 28.0),), (("speech", 4.0),), ()):
        assert asr_expected_s(figures, ServiceSample(odd, 1.0)) is None  # says nothing reliable
    assert asr_expected_s({"final_s": 0.3}, one) is None
    assert set(embedded_expectations(Settings())) == {"asr"}
    assert embedded_expectations(dataclasses.replace(Settings(), asr_engine="openai")) == {}


async def test_running_speed_feeds_the_book_only_while_sessions_run():
    class Logged:
        def __init__(self) -> None:
            self.service_log = ServiceLog(size=8)

        def load(self, progress) -> None:
            self.service_log.add(ServiceSample((("final", 8.0),), 30.0))  # a warm-up: not the running speed

        def run_batch(self, requests):
            return [None for _ in requests]

    engine = Logged()
    worker = Worker()
    worker.add(EngineSpec("asr", lambda: engine))
    book = SpeedBook(window=5)
    busy = {"now": False}
    running = RunningSpeed(worker, book, {"asr": asr_expected_s, "llm": asr_expected_s},
                           busy=lambda: busy["now"], poll_s=0.01)
    try:
        assert await running.poll() == 0  # not loaded: never loaded by the running speed
        await worker.load("asr")
        book.record("asr", ProbeResult(FAST["asr"], parallel=2))
        assert await running.poll() == 0  # the warm-up before: skipped
        final = FAST["asr"]["final_s"]
        engine.service_log.add(ServiceSample((("final", 8.0),), 3 * final))
        assert await running.poll() == 0  # no session runs: the probe's own batches look like this
        busy["now"] = True
        for _ in range(MIN_RUNNING):
            engine.service_log.add(ServiceSample((("final", 8.0),), 3 * final))
        engine.service_log.add(ServiceSample((("partial", 0.4),), 9.0))  # outside the probe's shapes: left out
        assert await running.poll() == MIN_RUNNING
        assert book.snapshot()["engines"]["asr"]["slowdown"] == pytest.approx(3.0)
        assert book.figures()["asr"]["final_s"] == pytest.approx(3 * final)
        running.start()
        for _ in range(3):
            engine.service_log.add(ServiceSample((("final", 8.0),), 6 * final))
        async with asyncio.timeout(5):
            while book.snapshot()["engines"]["asr"]["slowdown"] < 5.9:
                await asyncio.sleep(0.01)
    finally:
        await running.stop()
        await worker.close()


def test_service_log_cursor_returns_each_sample_once_and_drops_the_oldest():
    log = ServiceLog(size=3)
    samples = [ServiceSample((("partial", 4.0),), float(i)) for i in range(5)]
    got, cursor = log.since(0)
    assert got == [] and cursor == 0
    for s in samples[:2]:
        log.add(s)
    got, cursor = log.since(cursor)
    assert got == samples[:2] and cursor == 2
    for s in samples[2:]:
        log.add(s)
    got, cursor = log.since(cursor)
    assert got == samples[2:] and cursor == 5
    assert log.since(0)[0] == samples[2:]  # only the last ``size`` are kept


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


def four_word_asr() -> ScriptedASR:
    """A scripted recognizer that records the requests the probe sends and answers like one that heard four
    words."""
    return ScriptedASR(lambda r: Transcript(text="one two three four", audio_s=r.duration_s))


async def test_probe_times_the_captions_shapes_of_the_loaded_engines_only():
    engine = four_word_asr()
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
    engine = four_word_asr()

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
    worker.add(EngineSpec("asr", four_word_asr))
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


def test_a_machine_faster_than_its_probe_gains_capacity_only_slowly_and_one_odd_batch_does_not_count():
    book = SpeedBook(window=20, recovery=0.05)
    book.record("asr", ProbeResult(FAST["asr"], parallel=2))
    planner = CapacityPlanner(book, max_sessions=16)
    book.observe_slowdown("asr", 20.0)  # one stalled batch first: fewer than MIN_RUNNING ratios count for nothing
    assert planner.limit("captions") == 10
    for _ in range(MIN_RUNNING + 4):
        book.observe_slowdown("asr", 0.6)
    assert 10 <= planner.limit("captions") <= 12  # not at once to what 0.6 x the figures would give
    for _ in range(300):
        book.observe_slowdown("asr", 0.6)
    assert planner.limit("captions") == 16  # floor(10 / 0.6) capped by max_sessions
