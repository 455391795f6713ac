"""``rtc-agent bench soak``: sessions created, used and ended in a loop; does the server give everything back?

A real server runs in its own process (every engine loaded, a short ``--heartbeat-timeout-s``). Each cycle opens
a session of the next app in turn (captions, agent, interpret, echo), streams ``--stream-s`` seconds of real
speech through a real aiortc peer, and ends it in the next of three ways:

- ``delete``: the client sends ``DELETE /v1/sessions/{id}`` and closes its peer connection;
- ``vanish``: the client closes its peer connection without a word (the server sees the peer close);
- ``silent``: the client sends no heartbeat (audio still flows, the peer connection stays up); the server must close
  the session by itself after ``heartbeat_timeout_s``.

Each cycle waits until the server has dropped the session. At checkpoints (after ``--warmup`` cycles, then every
``--every`` cycles, and at the end) the server is left idle for ``--settle-s`` and its resident memory (anonymous
and file-backed), native threads (``/proc/<pid>/task``; the Python ones by name when ``py-spy`` is installed),
open file descriptors (by kind) and ``/health`` sessions are read. The result compares the warmed-up checkpoint
with the last one against the targets: RSS growth under 5 %, threads and fds back to the warmed-up values, no
session left. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from rtc_agent.bench.common import local_server, machine, write_json
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.resampler import audio_resampler
from rtc_agent.rtc.sources import PcmSourceTrack, load_audio

APPS = ("captions", "agent", "interpret", "echo")
CLOSE_MODES = ("delete", "vanish", "silent")
TARGETS = {"rss_growth_pct": 5.0, "threads_growth": 0, "fds_growth": 0, "sessions_left": 0}
PHRASE = "Turn on the kitchen lights."
CLIENT_HEARTBEAT_S = 0.5


# --- the server process, seen from /proc ---

def process_sample(pid: int) -> dict[str, Any]:
    """RSS (KiB), thread count and names, and open fds of ``pid`` (Linux ``/proc``)."""
    status: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value.strip()
    names: collections.Counter[str] = collections.Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that just ended
            names[(task / "comm").read_text().strip()] += 1
    return {
        "rss_kib": int(status["VmRSS"].split()[0]),
        "rss_anon_kib": int(status["RssAnon"].split()[0]),
        "rss_file_kib": int(status["RssFile"].split()[0]),
        "threads": int(status["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "thread_names": dict(sorted(names.items())),
    }


def python_threads(pid: int) -> list[str] | None:
    """The server's Python threads by name (``py-spy dump``, when installed and allowed to attach), else None.

    ``/proc`` names every thread of a Python 3.11 process "python"; py-spy tells the Python ones apart (worker
    pools, asyncio's default executor), so a thread that appears between checkpoints can be named."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(exe).exists():
        return None
    try:
        out = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = sorted(m.group(1) for m in re.finditer(r'^Thread \S+ \([^)]*\): "([^"]*)"', out, re.MULTILINE))
    return names or None


def fd_kinds(pid: int) -> dict[str, int]:
    """Open fds by kind (socket, pipe, anon_inode:[eventfd], file paths by folder): what grows, if anything."""
    kinds: collections.Counter[str] = collections.Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(("socket:", "pipe:")):
            target = target.split(":")[0]
        elif target.startswith("/"):
            target = str(Path(target).parent)
        kinds[target] += 1
    return dict(sorted(kinds.items()))


# --- one cycle ---

async def wait_gone(peer: ClientPeer, timeout: float) -> str | None:
    """Wait until the server has dropped the peer's session; its close reason (when seen) or None."""
    deadline = time.monotonic() + timeout
    reason = None
    while time.monotonic() < deadline:
        info = await peer.session_info()
        if "error" in info or info.get("state") == "closed":
            return reason or info.get("close_reason")
        reason = info.get("close_reason") or reason
        await asyncio.sleep(0.1)
    raise TimeoutError(f"session {peer.session_id} still open {timeout:.0f} s after its client left")


def ended_reason(peer: ClientPeer) -> str | None:
    for event in reversed(peer.events):
        if event.get("type") == "session.ended":
            return event.get("reason")
    return None


async def cycle(index: int, http: aiohttp.ClientSession, base_url: str, pcm48: np.ndarray, stream_s: float,
                heartbeat_timeout_s: float, apps: tuple[str, ...] = APPS) -> dict[str, Any]:
    app = apps[index % len(apps)]
    mode = CLOSE_MODES[index % len(CLOSE_MODES)]
    config = {"language": "en"} if app == "captions" else {}
    peer = ClientPeer(base_url, app, config=config, audio=PcmSourceTrack(pcm48, 48000, tail="silence"),
                      receive_audio=True, http=http,
                      heartbeat_s=None if mode == "silent" else CLIENT_HEARTBEAT_S)
    started = time.monotonic()
    result: dict[str, Any] = {"cycle": index + 1, "app": app, "close": mode}
    try:
        await peer.connect()
        await asyncio.sleep(stream_s)
        result["events"] = len(peer.events)
        if mode == "delete":
            result["delete_status"] = await peer.delete()
            await peer.close(delete=False)
            result["reason"] = await wait_gone(peer, 30)
        elif mode == "vanish":
            await peer.close(delete=False)
            result["reason"] = await wait_gone(peer, 30 + heartbeat_timeout_s)
        else:
            result["reason"] = await wait_gone(peer, 30 + heartbeat_timeout_s)
            await peer.close(delete=False)
        result["ended_event"] = ended_reason(peer)
    except Exception as exc:  # recorded, the soak goes on: a failure is a finding too
        result["error"] = f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception):
            await peer.close()
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


async def settle(http: aiohttp.ClientSession, base_url: str, seconds: float, timeout: float = 60.0) -> int:
    """Wait for no active session (up to ``timeout``), then ``seconds`` more; the active count seen last."""
    deadline = time.monotonic() + timeout
    active = -1
    while time.monotonic() < deadline:
        async with http.get(base_url + "/health") as resp:
            active = (await resp.json())["sessions"]["active"]
        if active == 0:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(seconds)
    async with http.get(base_url + "/health") as resp:
        return (await resp.json())["sessions"]["active"]


# --- the run ---

def speech_clip(audio: str | None) -> tuple[np.ndarray, str]:
    """48 kHz mono int16: ``audio`` if given, else a phrase spoken by the embedded Piper voice."""
    if audio:
        return load_audio(audio, 48000), audio
    import av

    from rtc_agent.engines.tts.base import SynthesisRequest
    from rtc_agent.engines.tts.piper import PiperEngine

    engine = PiperEngine(noise=False)
    engine.load(lambda msg: None)
    result = engine.synthesize(SynthesisRequest(text=PHRASE))
    engine.close()
    frame = av.AudioFrame.from_ndarray(result.pcm.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = result.sample_rate
    resampler = audio_resampler(48000)
    pcm = np.concatenate([f.to_ndarray().reshape(-1) for f in [*resampler.resample(frame),
                                                                 *resampler.resample(None)]])
    return np.concatenate([np.zeros(4800, dtype=np.int16), pcm]), f"Piper joe: {PHRASE!r}"


def summarize(checkpoints: list[dict[str, Any]], cycles: list[dict[str, Any]]) -> dict[str, Any]:
    warm, final = checkpoints[0], checkpoints[-1]

    def growth(key: str) -> dict[str, Any]:
        w, f = warm[key], final[key]
        return {"warm": w, "final": f, "growth": f - w, "growth_pct": round(100 * (f - w) / w, 2) if w else None,
                "max": max(c[key] for c in checkpoints)}

    rss = growth("rss_kib")
    threads = growth("threads")
    fds = growth("fds")
    sessions = {"warm": warm["sessions_active"], "final": final["sessions_active"],
                "max": max(c["sessions_active"] for c in checkpoints)}
    thread_delta = {name: final["thread_names"].get(name, 0) - warm["thread_names"].get(name, 0)
                    for name in set(warm["thread_names"]) | set(final["thread_names"])}
    py_warm, py_final = warm.get("python_threads"), final.get("python_threads")
    py_delta = None
    if py_warm is not None and py_final is not None:
        counts = collections.Counter(py_final)
        counts.subtract(collections.Counter(py_warm))
        py_delta = {k: v for k, v in sorted(counts.items()) if v}
    failures = [c for c in cycles if "error" in c]
    passes = {
        "rss": rss["growth_pct"] is not None and rss["growth_pct"] < TARGETS["rss_growth_pct"],
        "threads": threads["growth"] <= TARGETS["threads_growth"],
        "fds": fds["growth"] <= TARGETS["fds_growth"],
        "sessions": sessions["final"] == TARGETS["sessions_left"],
        "cycles": not failures,
    }
    return {
        "rss_kib": rss, "threads": threads, "fds": fds, "sessions_active": sessions,
        "thread_names_delta": {k: v for k, v in sorted(thread_delta.items()) if v},
        "python_threads_delta": py_delta,
        "failed_cycles": len(failures),
        "pass": passes, "passed": all(passes.values()),
    }


async def run(cycles: int, concurrency: int, stream_s: float, heartbeat_timeout_s: float, warmup: int, every: int,
              settle_s: float, audio: str | None, apps: tuple[str, ...] = APPS) -> dict[str, Any]:
    pcm48, source = speech_clip(audio)
    warmup = min(warmup, cycles)
    marks = sorted({warmup, *range(warmup + every, cycles, every), cycles} - {0})
    results: list[dict[str, Any]] = []
    checkpoints: list[dict[str, Any]] = []
    per_cycle: list[dict[str, int]] = []
    started = time.monotonic()
    overrides = {"heartbeat_timeout_s": heartbeat_timeout_s, "max_sessions": max(16, concurrency)}
    async with local_server(**overrides) as server, aiohttp.ClientSession() as http:
        pid = server.process.pid
        base = server.base_url
        start_sample = {**process_sample(pid), "sessions_active": 0}
        done = 0
        while done < cycles:
            batch = min(concurrency, cycles - done, next(m for m in marks if m > done) - done)
            results += await asyncio.gather(*(cycle(done + i, http, base, pcm48, stream_s, heartbeat_timeout_s, apps)
                                              for i in range(batch)))
            done += batch
            sample = process_sample(pid)
            for c in results[-batch:]:
                keys = ("cycle", "app", "close", "reason", "ended_event", "seconds")
                per_cycle.append({**{k: c.get(k) for k in keys},
                                  "rss_kib": sample["rss_kib"], "threads": sample["threads"], "fds": sample["fds"]})
            if done in marks:
                active = await settle(http, base, settle_s)
                point = {"cycle": done, **process_sample(pid), "fd_kinds": fd_kinds(pid),
                         "python_threads": python_threads(pid),
                         "sessions_active": active, "elapsed_s": round(time.monotonic() - started, 1)}
                checkpoints.append(point)
                print(f"soak: cycle {done}/{cycles}: rss {point['rss_kib'] / 1024:.1f} MiB, "
                      f"threads {point['threads']}, fds {point['fds']}, sessions {active}", flush=True)
        health = await server.health()
    reasons = collections.Counter(f"{c['close']}->{c.get('reason')}" for c in results)
    return {
        "benchmark": "soak",
        "cycles": cycles,
        "concurrency": concurrency,
        "stream_s": stream_s,
        "heartbeat_timeout_s": heartbeat_timeout_s,
        "client_heartbeat_s": CLIENT_HEARTBEAT_S,
        "apps": list(apps),
        "close_modes": list(CLOSE_MODES),
        "source": source,
        "warmup_cycles": warmup,
        "settle_s": settle_s,
        "summary": summarize(checkpoints, results),
        "targets": TARGETS,
        "close_reasons": dict(sorted(reasons.items())),
        "errors": [c for c in results if "error" in c],
        "sessions_total": health["sessions"]["total"],
        "server_start": start_sample,
        "checkpoints": checkpoints,
        "per_cycle": per_cycle,
        "wall_s": round(time.monotonic() - started, 1),
        "machine": machine(),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cycles", type=int, default=200, help="sessions to create and end (default 200)")
    parser.add_argument("--concurrency", type=int, default=1, help="sessions open at once (default 1)")
    parser.add_argument("--stream-s", type=float, default=2.0,
                        help="seconds each session streams: the phrase, then silence (default 2)")
    parser.add_argument("--heartbeat-timeout-s", type=float, default=2.0,
                        help="the served process's heartbeat timeout: how soon a silent client's session is "
                             "closed (default 2)")
    parser.add_argument("--warmup", type=int, default=10, help="cycles before the warmed-up checkpoint (default 10)")
    parser.add_argument("--every", type=int, default=20, help="cycles between checkpoints (default 20)")
    parser.add_argument("--settle-s", type=float, default=3.0,
                        help="idle seconds before each checkpoint is read (default 3)")
    parser.add_argument("--apps", type=lambda v: [a.strip() for a in v.split(",") if a.strip()],
                        default=list(APPS), help=f"apps to rotate through (default {','.join(APPS)})")
    parser.add_argument("--audio", help="audio file to stream (default: a phrase spoken by the embedded voice)")
    parser.add_argument("--out", help="write the JSON results here")


def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.cycles < 1 or args.concurrency < 1 or args.every < 1:
        raise SystemExit("--cycles, --concurrency and --every must be at least 1")
    result = asyncio.run(run(args.cycles, args.concurrency, args.stream_s, args.heartbeat_timeout_s, args.warmup,
                             args.every, args.settle_s, args.audio, tuple(args.apps)))
    result["command"] = " ".join(["rtc-agent", *sys.argv[1:]])
    return write_json(result, args.out)
