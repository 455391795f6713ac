"""Scripted engines in a real worker, and the one stand-in for the worker itself.

Tests register the scripted engines of :mod:`tests.fakes` into a real :class:`~rtc_agent.worker.Worker`
(:func:`register`), so queues, batching, threads and error wrapping are the real ones. Only a
test about what the server reads from a worker's state (``stats()``: readiness, capabilities) fakes the worker:
:class:`ScriptedWorker`.
"""

from __future__ import annotations

from typing import Any, TypeVar

from rtc_agent.worker import Engine, EngineSpec, Worker

__all__ = ["ScriptedWorker", "register"]

E = TypeVar("E", bound=Engine)


def register(worker: Worker, name: str, engine: E, **spec: Any) -> E:
    """Add ``engine`` (this very instance, loaded on first use) to ``worker`` as ``name``; ``spec`` are the other
    :class:`EngineSpec` fields (``max_queue``, ``max_batch``, ``concurrency``, ``capacity``, ...). Returns
    ``engine``, so a test keeps it to read what it was asked."""
    worker.add(EngineSpec(name=name, factory=lambda: engine, **spec))
    return engine


class ScriptedWorker:
    """A worker whose state is scripted: ``stats()`` answers ``engine_stats`` (as :meth:`Worker.stats` would,
    engine name to its figures) and ``names()`` their keys. It runs nothing: for code that only reads a worker."""

    def __init__(self, engine_stats: dict[str, dict[str, Any]]) -> None:
        self.engine_stats = engine_stats

    def stats(self) -> dict[str, dict[str, Any]]:
        """The scripted figures (the dict itself: a test may change it between reads)."""
        return self.engine_stats

    def names(self) -> list[str]:
        """The scripted engine names, in order."""
        return list(self.engine_stats)
