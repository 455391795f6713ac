"""The thread count of numpy's BLAS library (OpenBLAS in numpy's wheels) in this process.

Every speech recognition decode first computes a log-mel spectrogram with numpy (faster-whisper's feature
extractor: a matrix product of the mel filters with the spectrum). OpenBLAS splits it over one thread per core and
then keeps its helper threads spinning, waiting for the next product: an 8 s window took 6 ms of wall time and
110 ms of CPU time on a 2-core AMD EPYC, against 6.7 ms of CPU on one thread at the same wall time. On a small
machine that spinning thread takes the core the other engines need: two-thread torch products (as the embedded
LLM's steps) ran 2.2-2.5x slower than idle beside a thread computing an 8 s spectrogram every 0.15 s, 1.0-1.3x with
one BLAS thread. The server's own products are small, so one BLAS thread loses nothing; the engines keep their own
thread pools (torch, CTranslate2, ONNX Runtime).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["blas_threads", "limit_blas_threads"]

log = logging.getLogger("rtc_agent.worker")


def blas_threads() -> list[dict[str, Any]]:
    """The BLAS libraries loaded in this process: ``library`` (e.g. ``openblas``) and ``threads`` each; empty where
    none is found (or ``threadpoolctl`` is missing)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [{"library": info["internal_api"], "threads": info["num_threads"]}
            for info in threadpool_info() if info.get("user_api") == "blas"]


def limit_blas_threads(threads: int) -> list[dict[str, Any]]:
    """Set every loaded BLAS library to ``threads`` threads (0: leave them as they are) and return
    :func:`blas_threads`. Imports numpy first, so its BLAS is loaded and found. Process-wide and lasting (not a
    context)."""
    if threads < 0:
        raise ValueError(f"threads must be >= 0, got {threads!r}")
    import numpy  # noqa: F401  (loads its BLAS library)

    before = blas_threads()
    if threads and before:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads, user_api="blas")
        after = blas_threads()
        pairs = zip(before, after, strict=False)
        log.info("numpy's BLAS: %s", ", ".join(f"{b['library']} {a['threads']} thread(s) (was {b['threads']})"
                                               for b, a in pairs))
        return after
    return before
