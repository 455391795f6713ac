"""Pieces every benchmark shares: percentiles, the machine description, JSON output, a server process, and text
scoring."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import platform
import re
import socket
import sys
import time
import unicodedata
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np


def percentile_ms(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, in ms, of values in seconds (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return round(1000 * ordered[min(rank, len(ordered)) - 1], 3)


def machine() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "gil_switch_interval_ms": sys.getswitchinterval() * 1000,
    }


def write_json(result: dict[str, Any], out: str | os.PathLike | None) -> dict[str, Any]:
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_udp_block(size: int) -> int:
    """The first of ``size`` loopback UDP ports starting at a free ephemeral one (a media or relay range for a
    daemon, which skips any port in it that is taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        return min(udp.getsockname()[1], 65535 - size)


class ServerProcess:
    """A running ``rtc-agent serve`` child process: its URL, its ``/health`` and the CPU time it used."""

    def __init__(self, process: asyncio.subprocess.Process, base_url: str) -> None:
        self.process = process
        self.base_url = base_url

    async def health(self) -> dict[str, Any]:
        import aiohttp

        async with aiohttp.ClientSession() as http, http.get(self.base_url + "/health") as response:
            response.raise_for_status()
            return await response.json()

    async def engine_stats(self, name: str) -> dict[str, Any]:
        return (await self.health())["engines"][name]

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the server process so far (Linux ``/proc``; 0.0 elsewhere)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The benchmark's peers stand for many callers but all come from one loopback address: the per-client limits
# (meant for one caller each) are raised so that they do not refuse the benchmark's own sessions.
PEER_CLIENT_LIMITS: dict[str, Any] = {"max_pending_sessions_per_client": 256, "max_pending_sessions_per_network": 256,
                                      "max_pending_sessions": 256, "rate_sessions_per_minute": 6000,
                                      "rate_uploads_per_minute": 6000, "rate_tokens_per_minute": 6000}


# Engines that only some benchmarks use (the text translator: a second LLM copy only when its model differs from the
# LLM's; the multilingual voice): the server loads them at first use, as it does by default, instead of every
# benchmark paying their load and memory (``local_server(also_load=...)`` preloads them).
ON_DEMAND_ENGINES = frozenset({"mt", "tts-kokoro"})


@asynccontextmanager
async def local_server(*, load_timeout_s: float = 600.0, peer_nice: int = 0, also_load: tuple[str, ...] = (),
                       **overrides: Any) -> AsyncIterator[ServerProcess]:
    """A real rtc-agent server in its own process on a free loopback port, every engine loaded (but
    ``ON_DEMAND_ENGINES``, except those named in ``also_load``).

    The server runs apart from the benchmark's peers, as it does in deployment: the peers' media work does not
    share the server's interpreter lock. With ``peer_nice`` > 0 this process (the peers: in deployment the
    callers' own machines) runs that much lower in CPU priority while the server is up, so the peers still
    share the cores but the server comes first when both are ready to run (for one latency-critical peer;
    many peers at lower priority may fall behind real time themselves); restored afterwards where the system
    allows. ``overrides`` are settings (passed as ``RTC_AGENT_*`` variables); the server's log goes to this
    process's stderr.
    """
    from rtc_agent.config import ENV_PREFIX, Settings
    from rtc_agent.engines import engine_specs

    overrides = {**PEER_CLIENT_LIMITS, **overrides}
    port = free_port()
    settings = dataclasses.replace(Settings(), **overrides)
    names = [spec.name for spec in engine_specs(settings)
             if spec.name not in ON_DEMAND_ENGINES or spec.name in also_load]
    env = {**os.environ, **{ENV_PREFIX + k.upper(): ",".join(v) if isinstance(v, list) else str(v)
                            for k, v in overrides.items()}}
    env[ENV_PREFIX + "PRELOAD"] = ",".join(names)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rtc_agent", "serve", "--host", "127.0.0.1", "--port", str(port), env=env)
    server = ServerProcess(process, f"http://127.0.0.1:{port}")
    priority = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        await _wait_loaded(server, names, load_timeout_s)
        if peer_nice > 0:
            os.setpriority(os.PRIO_PROCESS, 0, min(19, priority + peer_nice))
        yield server
    finally:
        with contextlib.suppress(OSError):  # raising the priority back needs privileges
            os.setpriority(os.PRIO_PROCESS, 0, priority)
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()


async def _wait_loaded(server: ServerProcess, names: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if server.process.returncode is not None:
            raise RuntimeError(f"the server exited with status {server.process.returncode} while starting")
        try:
            health = await server.health()
            engines = health["engines"]
            failed = [f"{n} ({engines[n]['progress']})" for n in names
                      if str(engines.get(n, {}).get("progress", "")).startswith("load failed")]
            if failed:
                raise RuntimeError(f"engines failed to load: {'; '.join(failed)}")
            # and the start-up speed probes done: a probe that shares the cores with the first session measures
            # the session too, and the capacity and decode plan would start from those slower figures
            if all(engines.get(n, {}).get("loaded") for n in names) and not (health.get("capacity") or {}).get(
                    "pending"):
                return
        except OSError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise TimeoutError(f"the server did not load its engines within {timeout_s:.0f} s")
        await asyncio.sleep(0.25)


_PUNCT = re.compile(r"[^\w\s']|(?<!\w)'|'(?!\w)")


def normalize_text(text: str) -> str:
    """Lower case, no punctuation, single spaces: the form WER is computed on."""
    text = unicodedata.normalize("NFKC", text).lower().replace("-", " ")
    return " ".join(_PUNCT.sub(" ", text).split())


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate after :func:`rtc_agent.words.scoring_words` (numbers, contractions, spellings and
    compounds folded alike on both sides: :mod:`rtc_agent.words.scoring`)."""
    from rtc_agent.words import wer as scored_wer

    return scored_wer(reference, hypothesis)


def speech_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What one listener's interpreter voice did, from its events: translations it was sent, texts it started
    speaking and finished, texts skipped to catch up (``translation.speech.catchup`` ``skip``), spoken by the
    catch-up voice instead (``fallback``) or dropped untranslated (``drop``), the largest lag a catch-up reported
    (s), and the texts each voice engine started (``engines``)."""
    catchups = [e for e in events if e["type"] == "translation.speech.catchup"]
    started = [e for e in events if e["type"] == "translation.speech.started"]
    return {"translations": sum(1 for e in events if e["type"] == "caption.translation"),
            "started": len(started), "engines": dict(Counter(str(e.get("engine")) for e in started)),
            "done": sum(1 for e in events if e["type"] == "translation.speech.done" and not e.get("cleared")),
            "skipped": sum(1 for e in catchups if e.get("action") == "skip"),
            "fallback": sum(1 for e in catchups if e.get("action") == "fallback"),
            "dropped": sum(1 for e in catchups if e.get("action") == "drop"),
            "max_catchup_lag_s": round(max((e.get("lag_ms") or 0 for e in catchups), default=0) / 1000, 2)}
