"""Pieces every benchmark shares: percentiles, the machine description, JSON output, an in-process server, and
text scoring."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import re
import socket
import sys
import unicodedata
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


@asynccontextmanager
async def local_server(**overrides: Any) -> AsyncIterator[tuple[str, Any]]:
    """A real rtc-agent server on a free loopback port with its engines loaded: ``(base_url, app)``."""
    from aiohttp import web

    from rtc_agent.config import Settings
    from rtc_agent.server import create_app
    from rtc_agent.server.keys import WORKER

    port = free_port()
    settings = dataclasses.replace(Settings(), host="127.0.0.1", port=port, **{"preload": [], **overrides})
    app = create_app(settings)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        for name in app[WORKER].names():
            await app[WORKER].load(name)
        yield f"http://127.0.0.1:{port}", app
    finally:
        await runner.cleanup()


_PUNCT = re.compile(r"[^\w\s']|(?<!\w)'|'(?!\w)")


def normalize_text(text: str) -> str:
    """Lower case, no punctuation, single spaces: the form WER is computed on."""
    text = unicodedata.normalize("NFKC", text).lower().replace("-", " ")
    return " ".join(_PUNCT.sub(" ", text).split())


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate after :func:`normalize_text`."""
    import jiwer

    ref, hyp = normalize_text(reference), normalize_text(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    return float(jiwer.wer(ref, hyp))
