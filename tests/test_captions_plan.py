"""The captions' decode plan (rtc_agent/worker/decode_plan.py): the final's beam and the partial interval from
scripted speed figures and session counts, the settings that pin them, the captions app reading the plan when it
starts and as the figures change, and (real models) a server whose measured speed is slow starting captions
sessions with the derived plan and publishing it in ``/health`` and the pages' capabilities."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time

import aiohttp
import pytest

from rtc_agent.apps.captions import CaptionsApp
from rtc_agent.apps.captions.transcriber_config import TranscriberConfig, apply_plan, transcriber_config
from rtc_agent.bench.common import wer
from rtc_agent.config import Settings, SettingsError
from rtc_agent.config.validation import validate
from rtc_agent.engines import speed_probes
from rtc_agent.worker import Worker
from rtc_agent.worker.decode_plan import (
    DEFAULT_BEAM,
    DEFAULT_INTERVAL_MS,
    PLAN_REFRESH_MS,
    PROBE_FINAL_BEAM,
    PROBE_FINAL_S,
    PROBE_PARTIAL_BATCH,
    PROBE_PARTIAL_S,
    DecodePlanner,
    decode_plan,
    final_seconds,
)
from rtc_agent.worker.speed import MIN_RUNNING, ProbeResult, SpeedBook
from tests.fakes.context import ScriptedAppContext

# Whisper base on an idle 2-core Xeon (README), the same machine twice and five times as slow, and the 2-core AMD
# EPYC this was written on (idle, the start-up probe)
FAST = {"partial_s": 0.11, "partial_batch_s": 0.06, "final_s": 0.30}
SLOW = {k: 2 * v for k, v in FAST.items()}
SLOWER = {k: 5 * v for k, v in FAST.items()}
EPYC = {"partial_s": 0.38, "partial_batch_s": 0.26, "final_s": 0.97}
PARALLEL = {"asr": 2}


def plan(asr: dict | None, talkers: float = 1, **kw):
    return decode_plan({"asr": asr} if asr is not None else {}, PARALLEL, talkers, **kw)


def test_the_probe_shapes_are_the_engines():
    assert (PROBE_PARTIAL_S, PROBE_PARTIAL_BATCH, PROBE_FINAL_S, PROBE_FINAL_BEAM) == (
        speed_probes.PARTIAL_AUDIO_S, speed_probes.PARTIAL_BATCH, speed_probes.FINAL_AUDIO_S,
        speed_probes.FINAL_BEAM)
    config = TranscriberConfig()
    assert (config.final_beam_size, config.decode_interval_ms) == (DEFAULT_BEAM, DEFAULT_INTERVAL_MS)


def test_a_fast_machine_keeps_beam_5_and_400_ms():
    p = plan(FAST)
    assert (p.final_beam, p.partial_interval_ms, p.source) == (5, 400, "measured")
    assert p.final_s == pytest.approx(0.30 * 3 / 8) and 0 < p.load < 0.6  # a 3 s utterance's final
    assert plan(FAST, talkers=4).partial_interval_ms == 400


def test_a_slower_machine_gets_a_longer_interval_then_a_smaller_beam():
    # twice as slow: a 3 s beam-5 final (0.23 s) still fits the 450 ms budget (the context gives way first), but
    # the partials of four talkers take more of the machine
    assert plan(SLOW).final_beam == 5
    assert plan(SLOW, talkers=4).partial_interval_ms > plan(FAST, talkers=4).partial_interval_ms == 400
    # five times as slow: beam 5 (0.56 s) misses the budget, greedy (0.41 s) fits
    slower = plan(SLOWER)
    assert slower.final_beam == 1 and slower.final_s <= 0.45 and slower.source == "measured"
    assert slower.partial_interval_ms > 400
    # this EPYC: beam 5 and 400 ms alone, longer with two; under load at 1.5x its figures, greedy
    assert (plan(EPYC).final_beam, plan(EPYC).partial_interval_ms) == (5, 400)
    assert plan(EPYC, talkers=2).partial_interval_ms > 400
    assert plan({k: 1.5 * v for k, v in EPYC.items()}).final_beam < 5
    # a beam between where the budget falls between greedy and beam 5
    between = plan(SLOW, budget_ms=200).final_beam
    assert 1 < between < 5 and final_seconds(SLOW, between) <= 0.2 < final_seconds(SLOW, between + 1)
    # where nothing fits: the largest beam within 10 % of the fastest (greedy) prediction
    nothing = plan(SLOW, budget_ms=100).final_beam
    assert final_seconds(SLOW, nothing) <= 1.1 * final_seconds(SLOW, 1) < final_seconds(SLOW, nothing + 1)
    # a probe taken under load can time greedy no faster than beam 5: then the beam stays, it would buy nothing
    loaded = {"partial_s": 0.678, "partial_batch_s": 0.359, "final_s": 1.288}  # the bench's start-up probe
    assert final_seconds(loaded, 5) > 0.45 and plan(loaded).final_beam == 5


def test_more_sessions_stretch_the_partial_interval_up_to_its_bound():
    intervals = [plan(FAST, talkers=n).partial_interval_ms for n in (1, 2, 4, 6, 8, 16)]
    assert intervals == sorted(intervals) and intervals[0] == 400 and intervals[-1] == 1200
    assert plan(FAST, talkers=8).partial_interval_ms > 400
    assert plan(FAST, talkers=32, max_interval_ms=2000).partial_interval_ms == 2000
    for n in (1, 2, 4, 6, 8):  # wherever the interval is not at its bound, the ASR stays within the target load
        p = plan(FAST, talkers=n)
        assert p.partial_interval_ms == 1200 or p.load <= 0.6 + 1e-6, p
    # the slower the machine, the longer at the same session count; the interval is in 50 ms steps
    assert plan(SLOWER, talkers=2).partial_interval_ms >= plan(SLOW, talkers=2).partial_interval_ms
    assert all(plan(SLOW, talkers=n).partial_interval_ms % 50 == 0 for n in (1, 2, 3, 5))


def test_settings_pin_and_unmeasured_keeps_the_constants():
    pinned = plan(SLOWER, talkers=8, beam=5, interval_ms=300)
    assert (pinned.final_beam, pinned.partial_interval_ms, pinned.source) == (5, 300, "setting")
    half = plan(SLOW, beam=3)
    assert (half.final_beam, half.beam_source, half.interval_source, half.source) == (3, "setting", "measured",
                                                                                      "measured")
    for unmeasured in (plan(None), plan(FAST, measured=False), plan({"rtf": 0.1})):
        assert (unmeasured.final_beam, unmeasured.partial_interval_ms, unmeasured.source) == (5, 400, "default")
    assert plan(None, interval_ms=700).as_dict()["sources"] == {"final_beam": "default",
                                                                "partial_interval_ms": "setting"}


def test_the_planner_follows_the_book_and_the_sessions_running():
    book = SpeedBook()
    running = {"captions": 0, "call": 0}
    planner = DecodePlanner(book, running=lambda app: running.get(app, 0))
    assert planner.plan().source == "default"
    book.expect(["asr"])
    assert planner.plan().source == "default"  # pending: still the constants
    book.record("asr", ProbeResult(FAST, parallel=2))
    assert (planner.plan().final_beam, planner.plan().partial_interval_ms) == (5, 400)
    running["captions"] = 16
    assert planner.plan().partial_interval_ms == 1200 and planner.plan().talkers == 16
    running["captions"], running["call"] = 4, 4  # a call participant talks half the time
    assert planner.plan().talkers == 6 and planner.plan(joining=1).talkers == 7
    running["captions"] = running["call"] = 0
    for _ in range(MIN_RUNNING):  # under load the engine runs five times as slow as the probe said
        book.observe_slowdown("asr", 5.0)
    slowed = planner.plan()
    assert slowed.final_beam < 5 and slowed.as_dict()["final_s"] <= 0.45
    assert planner.snapshot() == slowed.as_dict()


def test_settings_of_the_plan():
    settings = dataclasses.replace(Settings(), captions_final_beam=2, captions_partial_interval_ms=900,
                                   captions_max_partial_interval_ms=3000)
    validate(settings)
    config = transcriber_config(settings, "en")
    assert (config.final_beam_size, config.decode_interval_ms) == (2, 900)
    assert transcriber_config(settings, "en", decode_interval_ms=800).decode_interval_ms == 800  # interpret's own
    planner = DecodePlanner.from_settings(SpeedBook(), settings, running=lambda app: 0)
    assert (planner.beam, planner.interval_ms, planner.max_interval_ms) == (2, 900, 3000)
    default = transcriber_config(Settings(), "en")
    assert (default.final_beam_size, default.decode_interval_ms) == (5, 400)
    for bad in ({"captions_final_beam": 11}, {"captions_partial_interval_ms": 50},
                {"captions_max_partial_interval_ms": 300}):
        with pytest.raises(SettingsError):
            validate(dataclasses.replace(Settings(), **bad))
    apply_plan(default, plan(SLOW, talkers=4))
    assert (default.final_beam_size, default.decode_interval_ms) == (5, 550)


async def test_the_captions_app_reads_the_plan_at_start_and_as_figures_change():
    book = SpeedBook()
    book.record("asr", ProbeResult(FAST, parallel=2))
    running = {"captions": 0}
    worker = Worker()
    worker.decode_plans = DecodePlanner(book, running=lambda app: running.get(app, 0))
    ctx = ScriptedAppContext(worker)
    app = CaptionsApp(ctx, CaptionsApp.validate_config({"vision": False, "language": "en"}, ctx.settings))
    try:
        assert app.stats()["plan"]["source"] == "measured" and app.stats()["plan"]["talkers"] == 1
        assert (app.stats()["final_beam"], app.stats()["partial_interval_ms"]) == (5, 400)
        for _ in range(MIN_RUNNING):  # the machine turned five times as slow under load
            book.observe_slowdown("asr", 5.0)
        running["captions"] = 4
        app._on_window(0.0, 0, 32)
        assert app.transcriber.config.final_beam_size == 5  # not re-read within PLAN_REFRESH_MS
        app._on_window(0.0, PLAN_REFRESH_MS, PLAN_REFRESH_MS + 32)
        assert app.transcriber.config.final_beam_size == 1
        assert app.transcriber.config.decode_interval_ms == app.stats()["partial_interval_ms"] > 400
        assert app.stats()["plan"]["talkers"] == 4
    finally:
        await worker.close()
    plain = CaptionsApp(ScriptedAppContext(Worker()), CaptionsApp.validate_config({"vision": False}, Settings()))
    assert plain.stats()["plan"] is None and plain.stats()["final_beam"] == 5  # no planner: the settings


def test_the_interpretation_source_captions_follow_the_plan_but_keep_their_longer_interval():
    from rtc_agent.apps.interpret.source_captions import DECODE_INTERVAL_MS, SourceCaptions

    book = SpeedBook()
    book.record("asr", ProbeResult(FAST, parallel=2))
    running = {"captions": 0}
    worker = Worker()
    worker.decode_plans = DecodePlanner(book, running=lambda app: running.get(app, 0))
    source = SourceCaptions(worker, lambda event: None, lambda coro: None, lambda: 0, source="en")
    config = source.transcriber.config
    assert (config.final_beam_size, config.decode_interval_ms) == (5, DECODE_INTERVAL_MS)  # 800 over the plan's 400
    for _ in range(MIN_RUNNING):
        book.observe_slowdown("asr", 5.0)
    running["captions"] = 16
    source.on_window(0.0, PLAN_REFRESH_MS, PLAN_REFRESH_MS + 32)
    assert config.final_beam_size == 1 and config.decode_interval_ms == 1200  # the plan's, past interpret's own


# ---- through the real server, real models ----

SENTENCES = ["The weather today is sunny with a light breeze from the west.",
             "Please remember to bring your umbrella tomorrow morning."]


async def _health(server) -> dict:
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/health") as resp:
        return await resp.json()


async def _until(check, timeout: float = 30.0, period: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s")
        await asyncio.sleep(period)


@pytest.mark.real_model
async def test_a_slow_server_starts_captions_with_the_derived_plan_and_publishes_it(start_server):
    """The book is scripted with figures five times slower than a fast Xeon (no probe, no running figures: the
    plan does not move under the test's feet): greedy finals and a longer partial interval, stretched again
    when a second session starts; the captions still come, and ``/health``, the pages and the session agree."""
    from rtc_agent.rtc.client import ClientPeer
    from rtc_agent.rtc.sources import PcmSourceTrack
    from rtc_agent.server.capacity import CAPACITY
    from tests.speech import speech_clip

    server = await start_server(speed_probe=False, capacity_running=False, max_sessions=8)
    server.app[CAPACITY].book.record("asr", ProbeResult(SLOWER, parallel=2, note="scripted"))
    captions = (await _health(server))["capacity"]["apps"]["captions"]
    idle = captions["plan"]
    assert idle["source"] == "measured" and idle["final_beam"] == 1 and idle["partial_interval_ms"] > 400
    assert (await _health(server))["capacity"]["apps"]["call"]["plan"] == idle
    clip, spans = speech_clip(SENTENCES, gap_s=1.0, sample_rate=48000)
    first = ClientPeer(server.url, "captions", config={"language": "en"},
                       audio=PcmSourceTrack(clip, 48000, tail="silence"), receive_audio=False)
    await first.connect()
    second = None
    try:
        stats = (await first.session_info())["app_stats"]
        assert (stats["final_beam"], stats["partial_interval_ms"]) == (1, idle["partial_interval_ms"])
        assert stats["plan"]["source"] == "measured"
        await first.wait_for("caption.final", lambda e: e["audio_end_ms"] / 1000 > spans[-1][0], timeout=60)
        finals = [e["text"] for e in first.events if e["type"] == "caption.final" and e["text"].strip()]
        assert wer(" ".join(SENTENCES), " ".join(finals)) <= 0.3, finals  # greedy finals are still captions

        second = ClientPeer(server.url, "captions", config={"language": "en"}, receive_audio=False)
        await second.connect()
        busy = await _until(lambda: _plan_when(server, lambda p: p["talkers"] >= 2))
        assert busy["partial_interval_ms"] > idle["partial_interval_ms"] and busy["final_beam"] == 1
        stats = await _until(lambda: _stats_when(first, busy["partial_interval_ms"]))  # re-read within seconds
        assert stats["plan"]["talkers"] >= 2
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/captions") as resp:
            page = await resp.text()
        config = json.loads(re.search(r'<script type="application/json" id="client-config">(.*?)</script>',
                                      page, re.S).group(1))
        assert config["capabilities"]["capacity"]["captions"]["plan"]["partial_interval_ms"] == \
            busy["partial_interval_ms"]
    finally:
        await first.close()
        if second is not None:
            await second.close()

    pinned = await start_server(speed_probe=False, capacity_running=False, captions_final_beam=3,
                                captions_partial_interval_ms=700)
    pinned.app[CAPACITY].book.record("asr", ProbeResult(SLOWER, parallel=2, note="scripted"))
    plan_now = (await _health(pinned))["capacity"]["apps"]["captions"]["plan"]
    assert (plan_now["final_beam"], plan_now["partial_interval_ms"], plan_now["source"]) == (3, 700, "setting")
    async with ClientPeer(pinned.url, "captions", config={"language": "en"}, receive_audio=False) as peer:
        stats = (await peer.session_info())["app_stats"]
        assert (stats["final_beam"], stats["partial_interval_ms"]) == (3, 700)


async def _plan_when(server, predicate) -> dict | None:
    plan_now = (await _health(server))["capacity"]["apps"]["captions"]["plan"]
    return plan_now if predicate(plan_now) else None


async def _stats_when(peer, interval_ms: int) -> dict | None:
    stats = (await peer.session_info())["app_stats"]
    return stats if stats["partial_interval_ms"] == interval_ms else None
