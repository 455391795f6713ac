"""Measured capacity through the real server: a machine that measures slow at start-up holds one captions
session; the next one gets 503 ``server_busy`` with ``Retry-After`` before any engine work, the admitted one
keeps its captions, and ``/health`` and the pages publish the figures."""

from __future__ import annotations

import asyncio
import json
import re
import time

import aiohttp
import pytest

from rtc_agent.rtc.client import ClientPeer, SessionRefused
from rtc_agent.rtc.sources import PcmSourceTrack
from rtc_agent.server.keys import ADMISSION
from tests.conftest import SharedEngine
from tests.speech import speech_clip

# added to every engine batch while the server measures: a machine far slower than this one (with no compute at
# all, a batch of 4 partials 0.375 s each and a final 1.5 s make one captions session 0.44 of the machine)
SLOW_S = 1.5


async def _health(server) -> dict:
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/health") as resp:
        return await resp.json()


async def _measured(server, app: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        capacity = (await _health(server))["capacity"]
        if capacity["apps"][app]["source"] == "measured":
            return capacity
        await asyncio.sleep(0.25)
    raise AssertionError(f"{app} capacity not measured within {timeout} s")


@pytest.fixture
def slow_machine(monkeypatch):
    """Every shared engine's batch takes ``SLOW_S`` longer while ``state["slow"]`` holds."""
    state = {"slow": True}
    run_batch = SharedEngine.run_batch

    def slowed(self, requests):
        if state["slow"]:
            time.sleep(SLOW_S)
        return run_batch(self, requests)

    monkeypatch.setattr(SharedEngine, "run_batch", slowed)
    return state


async def test_the_session_past_the_measured_capacity_is_refused_before_any_engine_work(start_server,
                                                                                         slow_machine):
    server = await start_server(preload=["vad", "asr"])
    capacity = await _measured(server, "captions")
    slow_machine["slow"] = False
    asr = capacity["engines"]["asr"]
    assert set(asr["figures"]) >= {"partial_s", "partial_batch_s", "final_s"} and asr["parallel"] >= 1
    assert asr["note"].startswith("noise")  # the TTS was not preloaded: the probe heard noise
    captions = capacity["apps"]["captions"]
    assert captions["sessions"] == 1 and captions["enforced"] and captions["running"] == 0
    # the agent's LLM and TTS were not preloaded, so not probed: its capacity counts the ASR alone
    assert capacity["apps"]["agent"]["source"] == "measured" and capacity["apps"]["agent"]["sessions"] > 1

    clip, _ = speech_clip(["Please remember to bring your umbrella tomorrow morning."], gap_s=0.5,
                              sample_rate=48000)
    first = ClientPeer(server.url, "captions", config={"language": "en"},
                       audio=PcmSourceTrack(clip, 48000, tail="silence"), receive_audio=False)
    await first.connect()
    try:
        total_before, refused_before = server.registry.total, server.app[ADMISSION].refused
        second = ClientPeer(server.url, "captions", config={"language": "en"}, receive_audio=False)
        with pytest.raises(SessionRefused) as refused:
            await second.connect()
        await second.close(delete=False)
        assert refused.value.status == 503 and refused.value.body["error"]["code"] == "server_busy"
        async with aiohttp.ClientSession() as http, http.post(
            f"{server.url}/v1/sessions", json={"app": "captions", "sdp": "v=0"}
        ) as resp:  # refused before the offer is even read as SDP
            body = await resp.json()
            assert resp.status == 503 and body["error"]["code"] == "server_busy"
            assert int(resp.headers["Retry-After"]) >= 1
        # refused before any engine work: no session was made for either (so no peer, no app, no engine call)
        assert server.registry.total == total_before
        assert server.app[ADMISSION].refused == refused_before + 2
        async with ClientPeer(server.url, "echo") as echo:  # another app is not held by the captions' capacity
            assert echo.session_id
        final = await first.wait_for("caption.final", timeout=30)  # the admitted session keeps its captions
        assert len(final["text"].split()) >= 3  # (which words depends on the CPU's kernels: not pinned here)
        assert (await _health(server))["capacity"]["apps"]["captions"]["running"] == 1

        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/captions") as resp:
            page = await resp.text()
        config = json.loads(re.search(r'<script type="application/json" id="client-config">(.*?)</script>',
                                      page, re.S).group(1))
        assert config["capabilities"]["capacity"]["captions"]["sessions"] == 1
    finally:
        await first.close()


async def test_capacity_override_and_switch(start_server):
    server = await start_server(capacity_sessions=["captions=1"], admission_capacity=True)
    apps = (await _health(server))["capacity"]["apps"]
    assert apps["captions"]["sessions"] == 1 and apps["captions"]["source"] == "override"
    assert apps["agent"]["source"] == "unmeasured" and apps["agent"]["sessions"] is None  # nothing preloaded
    off = await start_server(capacity_sessions=["captions=1"], admission_capacity=False)
    assert (await _health(off))["capacity"]["apps"]["captions"]["enforced"] is False


async def test_capacity_follows_the_running_speed_and_refuses_past_the_lowered_limit(start_server):
    """No start-up probe here: the figures are scripted into the book, and the engine's service log gets the
    batches of a machine that turns slow under load (the running speed is polled by hand, not on its timer)."""
    from rtc_agent.server.capacity import CAPACITY, RUNNING_SPEED
    from rtc_agent.server.keys import WORKER
    from rtc_agent.worker.speed import MIN_RUNNING, ProbeResult, ServiceSample

    server = await start_server(speed_probe=False, max_sessions=8)
    planner, running, worker = server.app[CAPACITY], server.app[RUNNING_SPEED], server.app[WORKER]
    fast = {"partial_s": 0.11, "partial_batch_s": 0.06, "final_s": 0.30}
    planner.book.record("asr", ProbeResult(fast, parallel=2, note="scripted"))
    captions = (await _health(server))["capacity"]["apps"]["captions"]
    assert captions["sessions"] == captions["probe_sessions"] == 8 and captions["source"] == "measured"

    engine = await worker.load("asr")
    await running.poll()  # (its timer may have done so already) from here on the engine's batches count
    async with ClientPeer(server.url, "captions", config={"language": "en"}, receive_audio=False) as first:
        assert first.session_id
        for _ in range(2 * MIN_RUNNING):  # finals under load take 10 x what the probe predicts
            engine.service_log.add(ServiceSample((("final", 8.0),), 10 * fast["final_s"]))
        assert await running.poll() >= 2 * MIN_RUNNING
        capacity = (await _health(server))["capacity"]
        asr = capacity["engines"]["asr"]
        assert asr["source"] == "running" and asr["slowdown"] >= 5.0
        assert asr["figures"]["final_s"] == pytest.approx(0.30)  # the probe's figure, shown beside the running one
        assert asr["running_figures"]["final_s"] >= 5 * 0.30
        captions = capacity["apps"]["captions"]
        assert captions["probe_sessions"] == 8 and captions["sessions"] == 1 and captions["running"] == 1

        async with aiohttp.ClientSession() as http, http.post(
            f"{server.url}/v1/sessions", json={"app": "captions", "sdp": "v=0"}
        ) as resp:
            body = await resp.json()
            assert resp.status == 503 and body["error"]["code"] == "server_busy"
        second = ClientPeer(server.url, "captions", config={"language": "en"}, receive_audio=False)
        with pytest.raises(SessionRefused) as refused:
            await second.connect()
        await second.close(delete=False)
        assert refused.value.status == 503 and refused.value.body["error"]["code"] == "server_busy"
