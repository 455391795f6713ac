"""``rtc-agent bench flood``: one client floods a message channel while another session runs captions.

A real server runs in its own process (:func:`~rtc_agent.bench.common.local_server`). A victim ``captions``
session streams speech (the embedded Piper voice reading :data:`SCRIPT`, repeated to ``--seconds``) through a
real peer, and a bystander ``echo`` session keeps its heartbeat, in three phases:

1. ``baseline``: no flood;
2. ``websocket``: a flooder process sends tiny ``{"type": "bogus.evt"}`` messages to ``/v1/realtime`` as fast as
   it can (reconnecting whenever the server closes it) for the length of the clip;
3. ``data_channel``: the same on the ``events`` data channel of a WebRTC session of its own.

Per phase: the victim's caption final latency (p50/p90, as the captions bench measures it), the server's
event-loop lag (p99 and the share of samples over 100 ms, from the ``/metrics`` histogram's growth during the
phase), whether any session but the flooder's ended, and what the flooder saw (messages sent, ``rate_limited``
errors, closes). The flooder runs in its own process so that its sending does not slow the victim's peer.

Targets (issue 23): flooded final latency within 0.5 s of the baseline, no other session ends, loop lag
p99 < 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import re
import sys
import time
from typing import Any

import numpy as np

from rtc_agent.bench.audio import load_audio_array
from rtc_agent.bench.captions_sessions import score_session, speech_ends, synthesize_script
from rtc_agent.bench.common import local_server, machine, write_json
from rtc_agent.config import Settings
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PcmSourceTrack

TARGETS = {"final_latency_over_baseline_s": 0.5, "loop_lag_p99_ms": 100.0, "other_sessions_ended": 0}
SCRIPT = """The meeting starts at nine in the morning.
Please send the report before Friday.
We moved the servers to the new building last week.
The weather should be clear for the rest of the day.
Call me when the train arrives at the station."""
BOGUS = json.dumps({"type": "bogus.evt"})
LAG_METRIC = "rtc_agent_event_loop_lag_seconds"
# Measured here: the channel budgets. No start-up speed probe competing with the baseline phase, no capacity rule
# refusing the flooder's reconnections (both settings of the capacity work, where this tree has them).
QUIET_SERVER = {"speed_probe": False, "admission_capacity": False}


# --- the flooder (its own process: python -m rtc_agent.bench.flood --worker KIND URL SECONDS) -----------------

async def flood_websocket(base_url: str, seconds: float) -> dict[str, Any]:
    """Send tiny bogus events to ``/v1/realtime`` at full speed for ``seconds``, reconnecting when closed."""
    import aiohttp

    url = base_url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    stats: dict[str, Any] = {"sent": 0, "errors": 0, "rate_limited": 0, "connections": 0, "close_codes": []}
    deadline = time.monotonic() + seconds

    async def read(ws: aiohttp.ClientWebSocketResponse) -> None:
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT and '"type":"error"' in message.data:
                stats["errors"] += 1
                stats["rate_limited"] += '"code":"rate_limited"' in message.data

    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                ws = await http.ws_connect(url, headers={"Authorization": "Bearer bench-flood"})
            except aiohttp.ClientError:
                await asyncio.sleep(0.2)
                continue
            stats["connections"] += 1
            reader = asyncio.create_task(read(ws))
            try:
                while not ws.closed and time.monotonic() < deadline:
                    for _ in range(256):
                        await ws.send_str(BOGUS)
                    stats["sent"] += 256
                    await asyncio.sleep(0)  # let the reader run
            except (aiohttp.ClientError, ConnectionError, RuntimeError):
                pass
            with contextlib.suppress(Exception):  # a server that stopped reading us may never answer the close
                await asyncio.wait_for(ws.close(), 2.0)
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            stats["close_codes"].append(ws.close_code)
    return stats


async def flood_data_channel(base_url: str, seconds: float) -> dict[str, Any]:
    """Send tiny bogus events on the ``events`` data channel at full speed for ``seconds``, reconnecting when
    the server ends the session."""
    stats: dict[str, Any] = {"sent": 0, "errors": 0, "rate_limited": 0, "connections": 0, "ended": [],
                             "server_received": 0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peer = ClientPeer(base_url, "echo", heartbeat_s=None, receive_audio=False)
        try:
            await peer.connect()
        except Exception:
            await peer.close(delete=False)
            await asyncio.sleep(0.2)
            continue
        stats["connections"] += 1
        while time.monotonic() < deadline and peer.channel.readyState == "open":
            if peer.channel.bufferedAmount < 256 * 1024:
                for _ in range(256):
                    peer.send_raw(BOGUS)
                stats["sent"] += 256
            await asyncio.sleep(0)
        with contextlib.suppress(Exception):  # what reached the server (the client's SCTP bounds the rate)
            stats["server_received"] += (await peer.session_info())["events"]["received"]
        errors = [e for e in peer.events if e.get("type") == "error"]
        stats["errors"] += len(errors)
        stats["rate_limited"] += sum(1 for e in errors if e["error"].get("code") == "rate_limited")
        stats["ended"] += [e.get("reason") for e in peer.events if e.get("type") == "session.ended"]
        await peer.close(delete=False)
    return stats


async def run_flooder(kind: str, base_url: str, seconds: float) -> dict[str, Any]:
    """The flooder process, started and awaited; its stats (the last line it prints)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rtc_agent.bench.flood", "--worker", kind, base_url, str(seconds),
        stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    lines = out.decode().strip().splitlines()
    return json.loads(lines[-1]) if lines else {"failed": process.returncode}


# --- measuring ----------------------------------------------------------------------------------------------

async def lag_histogram(base_url: str) -> tuple[dict[float, float], float]:
    """The server's cumulative loop-lag histogram from ``/metrics``: ``({le: count}, total count)``."""
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(base_url + "/metrics") as response:
        text = await response.text()
    buckets: dict[float, float] = {}
    for match in re.finditer(LAG_METRIC + r'_bucket\{le="([^"]+)"\} ([0-9.e+]+)', text):
        buckets[float(match.group(1))] = float(match.group(2))
    total = re.search(LAG_METRIC + r"_count ([0-9.e+]+)", text)
    return buckets, float(total.group(1)) if total else 0.0


def lag_summary(before: tuple[dict[float, float], float], after: tuple[dict[float, float], float]) -> dict[str, Any]:
    """p99 (linear inside its histogram bucket, as Prometheus' histogram_quantile) and the share over 100 ms of
    the samples taken between ``before`` and ``after``."""
    count = after[1] - before[1]
    if count <= 0:
        return {"samples": 0, "p99_ms": None, "over_100ms_share": None}
    rows = sorted((le, after[0].get(le, 0.0) - before[0].get(le, 0.0)) for le in after[0])
    rank, low, low_count, p99 = 0.99 * count, 0.0, 0.0, None
    for le, cumulative in rows:
        if cumulative >= rank:
            if le == float("inf"):
                p99 = low * 1000
            else:
                share = (rank - low_count) / max(cumulative - low_count, 1e-9)
                p99 = (low + (le - low) * share) * 1000
            break
        low, low_count = le, cumulative
    within = dict(rows).get(0.1, count)
    return {"samples": int(count), "p99_ms": round(p99, 1) if p99 is not None else None,
            "over_100ms_share": round((count - within) / count, 4)}


async def phase(base_url: str, pcm48: np.ndarray, ends: list[float], kind: str | None, seconds: float,
                bystander: ClientPeer) -> dict[str, Any]:
    """Stream the clip on a victim captions session while ``kind`` floods (None: nobody)."""
    lag0 = await lag_histogram(base_url)
    victim = ClientPeer(base_url, "captions", config={"language": "en"},
                        audio=PcmSourceTrack(pcm48, 48000, tail="silence"), receive_audio=False)
    await victim.connect()
    flooder = asyncio.create_task(run_flooder(kind, base_url, seconds + 1.0)) if kind else None
    try:
        await asyncio.sleep(len(pcm48) / 48000 + 3.0)
        info = await victim.session_info()
        ended = [e.get("reason") for peer in (victim, bystander) for e in peer.events
                 if e.get("type") == "session.ended"]  # before the victim's own DELETE
    finally:
        flood = await flooder if flooder is not None else None
        lag1 = await lag_histogram(base_url)
        await victim.close()
    run = {"events": list(zip(victim.events, victim.event_times, strict=True)),
           "sent_at": victim.audio.pacer.started_at, "info": info}
    score = score_session(run, ends, None)
    return {"flood": kind, "final_latency_ms": score["final_latency_ms"], "finals": score["finals"],
            "text": score["text"], "loop_lag": lag_summary(lag0, lag1), "other_sessions_ended": ended,
            "victim_state": info.get("state"), "flooder": flood}


async def run(seconds: float) -> dict[str, Any]:
    one = synthesize_script(SCRIPT)
    pcm48 = np.tile(one, max(1, int(np.ceil(seconds * 48000 / len(one)))))[:max(len(one), int(seconds * 48000))]
    ends = speech_ends(load_audio_array(pcm48))
    seconds = len(pcm48) / 48000  # each flood covers the whole speech
    phases: dict[str, Any] = {}
    known = {f.name for f in dataclasses.fields(Settings)}
    async with local_server(**{k: v for k, v in QUIET_SERVER.items() if k in known}) as server:
        bystander = ClientPeer(server.base_url, "echo", receive_audio=False)
        await bystander.connect()
        try:
            for name, kind in (("baseline", None), ("websocket", "ws"), ("data_channel", "dc")):
                phases[name] = await phase(server.base_url, pcm48, ends, kind, seconds, bystander)
            bystander_state = (await bystander.session_info()).get("state")
        finally:
            await bystander.close()
    base = phases["baseline"]["final_latency_ms"]["p50"]
    for name in ("websocket", "data_channel"):
        p50 = phases[name]["final_latency_ms"]["p50"]
        phases[name]["final_latency_p50_over_baseline_ms"] = (
            round(p50 - base, 1) if p50 is not None and base is not None else None)
    limit_ms = 1000 * TARGETS["final_latency_over_baseline_s"]
    checks = {}
    for name in ("websocket", "data_channel"):
        p = phases[name]
        over, lag = p["final_latency_p50_over_baseline_ms"], p["loop_lag"]["p99_ms"]
        checks[name] = {"latency_ok": over is not None and over <= limit_ms,
                        "no_other_session_ended": not p["other_sessions_ended"] and p["victim_state"] == "connected",
                        "loop_lag_ok": lag is not None and lag < TARGETS["loop_lag_p99_ms"]}
    return {"benchmark": "flood", "seconds": round(seconds, 2), "audio_s": round(len(pcm48) / 48000, 2),
            "utterances": len(ends), "phases": phases, "bystander_state": bystander_state,
            "checks": checks, "targets": TARGETS, "machine": machine()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="length of the victim's speech and of each flood, in seconds (default 30; at least "
                             "one reading of the script, about 18 s)")
    parser.add_argument("--out", help="write the JSON results here (e.g. docs/benchmarks/flood.json)")


def main(args: argparse.Namespace) -> dict[str, Any]:
    return write_json(asyncio.run(run(args.seconds)), args.out)


def _worker(argv: list[str]) -> None:
    kind, url, seconds = argv[1], argv[2], float(argv[3])
    flood = flood_websocket if kind == "ws" else flood_data_channel
    print(json.dumps(asyncio.run(flood(url, seconds))), flush=True)


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--worker":
    _worker(sys.argv[1:])
