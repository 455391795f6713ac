"""How fast this machine runs each engine: :class:`SpeedBook` keeps the figures, :class:`SpeedProbe` measures them.

The worker schedules engines but does not know what their requests are; the workloads that time them come from
the engines' side (:mod:`rtc_agent.engines.speed_probes`) as probe functions ``async probe(call) ->
ProbeResult``, ``call(request)`` being ``Worker.call`` on that engine. So every probe request runs where the
sessions' requests run: in the engine's own threads, through its queue and batching, off the event loop.

When: :class:`SpeedProbe` probes the engines it is given as targets (the server passes its ``preload`` list:
engines loaded at start-up, before sessions arrive), one engine at a time, once every target has finished
loading (a probe beside a load, or beside another probe, would time the contention, not the engine). An engine
that is not a target (loaded on demand by the first session) is not probed: its apps stay unmeasured. Afterwards,
every ``reprobe_s`` while no session runs, the probes run again and move the figures by ``REPROBE_WEIGHT``
(an exponentially weighted mean: a machine whose speed drifts, e.g. under a noisy neighbour, is followed).
:meth:`SpeedBook.observe` takes running figures from whoever measures a real request of the probe's shape (for
example a caption's final decode time), with ``RUNNING_WEIGHT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

Call = Callable[[Any], Awaitable[Any]]

REPROBE_WEIGHT = 0.3  # weight of a re-probe against the figures so far
RUNNING_WEIGHT = 0.1  # weight of one running observation
REPROBE_S = 600.0
POLL_S = 0.5
LOAD_WAIT_S = 1800.0  # the longest a probe waits for its engines to finish loading
PROBE_CALL_TIMEOUT_S = 120.0

__all__ = ["EngineSpeed", "ProbeResult", "SpeedBook", "SpeedProbe"]


@dataclass(frozen=True)
class ProbeResult:
    """What one probe measured: ``figures`` (seconds per unit, named by the probe), ``parallel`` (requests of
    that shape the engine runs at once on this machine, each as fast as alone) and a ``note`` on the workload."""

    figures: Mapping[str, float]
    parallel: int = 1
    note: str = ""


@dataclass
class EngineSpeed:
    """An engine's current figures; ``source`` is ``probe`` or ``running`` (the last update's kind)."""

    figures: dict[str, float]
    parallel: int
    note: str
    source: str = "probe"
    probes: int = 1
    observations: int = 0
    measured_at: float = field(default_factory=time.time)

    def as_dict(self) -> dict[str, Any]:
        return {"figures": {k: round(v, 4) for k, v in self.figures.items()}, "parallel": self.parallel,
                "note": self.note, "source": self.source, "probes": self.probes, "observations": self.observations,
                "measured_at": round(self.measured_at, 3)}


class SpeedBook:
    """The measured figures per engine, plus which engines are still to be probed (``pending``) and which could
    not be (``failed``: engine name -> why). Thread-safe; ``version`` grows with every change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._speeds: dict[str, EngineSpeed] = {}
        self.pending: set[str] = set()
        self.failed: dict[str, str] = {}
        self.version = 0

    def expect(self, engines: Iterable[str]) -> None:
        """Mark ``engines`` as to be probed (``pending``): their apps wait for the figures."""
        with self._lock:
            self.pending.update(engines)
            self.version += 1

    def record(self, engine: str, result: ProbeResult) -> None:
        """A probe's result: the engine's figures, or (a re-probe) blended into them by ``REPROBE_WEIGHT``."""
        with self._lock:
            current = self._speeds.get(engine)
            if current is None:
                self._speeds[engine] = EngineSpeed(dict(result.figures), max(1, result.parallel), result.note)
            else:
                for name, value in result.figures.items():
                    old = current.figures.get(name)
                    current.figures[name] = value if old is None else old + REPROBE_WEIGHT * (value - old)
                current.parallel, current.note, current.source = max(1, result.parallel), result.note, "probe"
                current.probes += 1
                current.measured_at = time.time()
            self.pending.discard(engine)
            self.failed.pop(engine, None)
            self.version += 1

    def observe(self, engine: str, figure: str, value: float, weight: float = RUNNING_WEIGHT) -> bool:
        """A running figure (a real request of the probe's shape): moves ``figure`` toward ``value`` by ``weight``.
        Only figures a probe established are updated (False otherwise): the shape must be the probe's."""
        with self._lock:
            current = self._speeds.get(engine)
            if current is None or figure not in current.figures or not value >= 0:
                return False
            current.figures[figure] += weight * (value - current.figures[figure])
            current.source, current.observations, current.measured_at = "running", current.observations + 1, \
                time.time()
            self.version += 1
            return True

    def fail(self, engine: str, reason: str) -> None:
        with self._lock:
            self.pending.discard(engine)
            if engine not in self._speeds:
                self.failed[engine] = reason
            self.version += 1

    def figures(self) -> dict[str, dict[str, float]]:
        """Engine -> figure -> seconds (a copy)."""
        with self._lock:
            return {name: dict(s.figures) for name, s in self._speeds.items()}

    def parallel(self) -> dict[str, int]:
        with self._lock:
            return {name: s.parallel for name, s in self._speeds.items()}

    def snapshot(self) -> dict[str, Any]:
        """JSON-able: ``engines`` (per engine :meth:`EngineSpeed.as_dict`), ``pending``, ``failed``."""
        with self._lock:
            return {"engines": {name: s.as_dict() for name, s in self._speeds.items()},
                    "pending": sorted(self.pending), "failed": dict(self.failed)}


class SpeedProbe:
    """Runs ``probes`` (engine name -> probe function) for the loaded ``targets`` of ``worker`` into ``book``
    (see the module docstring). ``idle()`` says whether no session runs (re-probes wait for it). ``start`` on the
    worker's loop; ``stop`` cancels it (a probe call in flight is cancelled like any caller)."""

    def __init__(self, worker: Any, book: SpeedBook, probes: Mapping[str, Callable[[Call], Awaitable[ProbeResult]]],
                 *, targets: Iterable[str], idle: Callable[[], bool] = lambda: True, reprobe_s: float = REPROBE_S,
                 poll_s: float = POLL_S, load_wait_s: float = LOAD_WAIT_S) -> None:
        self.worker = worker
        self.book = book
        wanted = set(targets)
        self.targets = [name for name in probes if name in wanted and name in worker.names()]
        self.probes = dict(probes)
        self.idle = idle
        self.reprobe_s = reprobe_s
        self.poll_s = poll_s
        self.load_wait_s = load_wait_s
        self._task: asyncio.Task[None] | None = None
        book.expect(self.targets)

    def loaded_call(self, name: str) -> Call | None:
        """``Worker.call`` on engine ``name`` when it is registered and loaded, else None (a probe never loads an
        engine that the server did not)."""
        if name not in self.worker.names() or not self.worker.stats()[name]["loaded"]:
            return None

        def call(request: Any) -> Awaitable[Any]:
            return self.worker.call(name, request, timeout=PROBE_CALL_TIMEOUT_S)

        return call

    def start(self) -> None:
        if self._task is None and self.targets:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="rtc_agent.worker.speed_probe")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _settled(self, name: str) -> bool:
        stats = self.worker.stats()[name]
        return bool(stats["loaded"]) or str(stats.get("progress") or "").startswith("load failed")

    async def _run(self) -> None:
        deadline = time.monotonic() + self.load_wait_s
        while not all(self._settled(n) for n in self.targets) and time.monotonic() < deadline:
            await asyncio.sleep(self.poll_s)
        await self.probe_all()
        while True:
            await asyncio.sleep(self.reprobe_s)
            if self.idle():
                await self.probe_all()

    async def probe_all(self) -> None:
        """Probe every loaded target, one after the other; an engine that is not loaded or whose probe fails is
        recorded as failed and has no figures (the capacity rule leaves it out)."""
        for name in self.targets:
            call = self.loaded_call(name)
            if call is None:
                self.book.fail(name, "not loaded")
                continue
            start = time.monotonic()
            try:
                result = await self.probes[name](call)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("speed probe of engine %s failed: %r", name, exc)
                self.book.fail(name, f"probe failed: {type(exc).__name__}: {exc}")
                continue
            self.book.record(name, result)
            log.info("speed probe: engine %s %s (%s; %.1f s)", name,
                     ", ".join(f"{k} {v:.3f}" for k, v in result.figures.items()), result.note,
                     time.monotonic() - start)
