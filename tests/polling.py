"""Waiting in tests without sleeping blindly: poll a condition or a source until done, failing after a timeout."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, period: float = 0.002) -> None:
    """Poll ``predicate`` (from a plain thread) until it is true; ``AssertionError`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(period)


def collect(poll: Callable[[float], T | None], until: Callable[[list[T]], bool], timeout: float = 5.0) -> list[T]:
    """Items from ``poll(wait_s)`` (``None``: nothing yet) until ``until(items)``; ``AssertionError`` after
    ``timeout`` s, with the items so far."""
    out: list[T] = []
    deadline = time.monotonic() + timeout
    while not until(out):
        if time.monotonic() > deadline:
            raise AssertionError(f"items so far: {out!r}")
        item = poll(0.05)
        if item is not None:
            out.append(item)
    return out
