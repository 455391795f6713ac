"""The soak benchmark's bookkeeping (the benchmark itself runs a server for minutes: ``rtc-agent bench soak``)."""

from __future__ import annotations

import os
import sys

import pytest

from rtc_agent.bench.soak import fd_kinds, process_sample, summarize

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_process_sample_reads_this_process():
    sample = process_sample(os.getpid())
    assert sample["rss_kib"] > 0 and sample["rss_anon_kib"] > 0
    assert sample["threads"] >= 1 and sum(sample["thread_names"].values()) >= 1
    assert sample["fds"] >= 3 and sum(fd_kinds(os.getpid()).values()) >= 3


def point(cycle: int, rss: int, threads: int, fds: int, sessions: int = 0) -> dict:
    return {"cycle": cycle, "rss_kib": rss, "threads": threads, "fds": fds, "sessions_active": sessions,
            "thread_names": {"python": threads}, "python_threads": None}


def test_summary_passes_flat_and_fails_growth():
    flat = summarize([point(10, 1000, 20, 11), point(30, 1030, 21, 11), point(50, 1040, 20, 11)], [{"cycle": 1}])
    assert flat["passed"] and flat["rss_kib"]["growth_pct"] == 4.0 and flat["threads"]["max"] == 21
    grown = summarize([point(10, 1000, 20, 11), point(50, 1060, 23, 12, sessions=1)], [{"cycle": 1, "error": "x"}])
    assert grown["pass"] == {"rss": False, "threads": False, "fds": False, "sessions": False, "cycles": False}
    assert grown["thread_names_delta"] == {"python": 3} and grown["failed_cycles"] == 1
