"""The CPU this process may use: :func:`usable_cores`, which engines size their threads and voices by."""

from __future__ import annotations

import os

__all__ = ["usable_cores"]


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask on Linux; elsewhere the machine's count, 2 if unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 2
