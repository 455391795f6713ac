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

The probe runs on an idle machine, and sessions make it slower than that (two decodes side by side on two cores
each take longer than alone; the event loop, the VAD and the media take their share): on the EPYC of issue 19 the
probe said 3 captions sessions while 3 were not real time. So the figures also follow the engines' measured speed
under load. An engine that keeps a :class:`ServiceLog` (attribute ``service_log``) writes one
:class:`ServiceSample` per batch it runs: the shape and audio length of each request and the batch's seconds.
While sessions run, :class:`RunningSpeed` reads the new samples every ``RUNNING_POLL_S``, asks the engine's
*expectation* (:mod:`rtc_agent.engines.speed_probes`: what the probe's figures predict for that batch) and feeds
``seconds / expected`` into :meth:`SpeedBook.observe_slowdown`. The book keeps the median of the last ``window``
such ratios and the engine's *slowdown*: it rises to a higher median at once and falls toward a lower one by
``recovery`` per sample (from 1.0, the probe's own speed), so capacity drops within seconds of the machine
slowing and comes back over minutes.
The capacity rule uses the probe's figures times the slowdown (:meth:`SpeedBook.figures`) once ``MIN_RUNNING``
ratios were seen; ``/health`` shows both.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rtc_agent.tasks import cancel_and_wait

log = logging.getLogger(__name__)

Call = Callable[[Any], Awaitable[Any]]

REPROBE_WEIGHT = 0.3  # weight of a re-probe against the figures so far
RUNNING_WINDOW = 20  # running ratios whose median counts (setting capacity_running_window)
RUNNING_RECOVERY = 0.05  # how far the slowdown falls toward a lower median per ratio (capacity_running_recovery)
MIN_RUNNING = 5  # ratios before the running figures replace the probe's
SLOWDOWN_RANGE = (0.5, 20.0)  # one ratio (and the slowdown) is clamped to this: a stalled batch is not 100x
RUNNING_POLL_S = 2.0
SERVICE_LOG_SIZE = 512
REPROBE_S = 600.0
POLL_S = 0.5
LOAD_WAIT_S = 1800.0  # the longest a probe waits for its engines to finish loading
PROBE_CALL_TIMEOUT_S = 120.0

__all__ = ["EngineSpeed", "ProbeResult", "RunningSpeed", "ServiceLog", "ServiceSample", "SpeedBook", "SpeedProbe"]


@dataclass(frozen=True)
class ProbeResult:
    """What one probe measured: ``figures`` (seconds per unit, named by the probe), ``parallel`` (requests of
    that shape the engine runs at once on this machine, each as fast as alone) and a ``note`` on the workload."""

    figures: Mapping[str, float]
    parallel: int = 1
    note: str = ""


@dataclass(frozen=True)
class ServiceSample:
    """One batch an engine ran: per request its ``shape`` (a name the engine's expectation knows, e.g.
    ``partial`` or ``final``) and ``size`` (seconds of audio, or another unit of the shape), and the batch's
    wall ``seconds`` in the engine."""

    items: tuple[tuple[str, float], ...]
    seconds: float


class ServiceLog:
    """The last ``SERVICE_LOG_SIZE`` samples an engine wrote; thread-safe (engines write from their threads)."""

    def __init__(self, size: int = SERVICE_LOG_SIZE) -> None:
        self._lock = threading.Lock()
        self._samples: deque[ServiceSample] = deque(maxlen=size)
        self.written = 0  # samples ever added: the cursor of :meth:`since`

    def add(self, sample: ServiceSample) -> None:
        with self._lock:
            self._samples.append(sample)
            self.written += 1

    def since(self, cursor: int) -> tuple[list[ServiceSample], int]:
        """The samples added after ``cursor`` (those still kept) and the new cursor."""
        with self._lock:
            new = min(len(self._samples), max(0, self.written - cursor))
            return list(self._samples)[len(self._samples) - new:], self.written


@dataclass
class EngineSpeed:
    """An engine's probe figures and its running slowdown; ``source`` is ``probe`` or ``running`` (whether the
    capacity rule uses the running figures: after ``MIN_RUNNING`` ratios)."""

    figures: dict[str, float]
    parallel: int
    note: str
    probes: int = 1
    observations: int = 0
    slowdown: float = 1.0
    ratios: deque[float] = field(default_factory=lambda: deque(maxlen=RUNNING_WINDOW))
    measured_at: float = field(default_factory=time.time)

    @property
    def source(self) -> str:
        return "running" if self.observations >= MIN_RUNNING else "probe"

    def effective(self) -> dict[str, float]:
        """The figures the capacity rule uses: the probe's, times the slowdown once it counts."""
        factor = self.slowdown if self.source == "running" else 1.0
        return {name: value * factor for name, value in self.figures.items()}

    def as_dict(self) -> dict[str, Any]:
        return {"figures": {k: round(v, 4) for k, v in self.figures.items()}, "parallel": self.parallel,
                "note": self.note, "source": self.source, "probes": self.probes, "observations": self.observations,
                "slowdown": round(self.slowdown, 3),
                "running_figures": {k: round(v, 4) for k, v in self.effective().items()},
                "measured_at": round(self.measured_at, 3)}


class SpeedBook:
    """The measured figures per engine, plus which engines are still to be probed (``pending``) and which could
    not be (``failed``: engine name -> why). Thread-safe; ``version`` grows with every change."""

    def __init__(self, *, window: int = RUNNING_WINDOW, recovery: float = RUNNING_RECOVERY) -> None:
        self._lock = threading.Lock()
        self.window = max(1, window)
        self.recovery = min(1.0, max(0.0, recovery))
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
                self._speeds[engine] = EngineSpeed(dict(result.figures), max(1, result.parallel), result.note,
                                                   ratios=deque(maxlen=self.window))
            else:
                for name, value in result.figures.items():
                    old = current.figures.get(name)
                    current.figures[name] = value if old is None else old + REPROBE_WEIGHT * (value - old)
                current.parallel, current.note = max(1, result.parallel), result.note
                current.probes += 1
                current.measured_at = time.time()
            self.pending.discard(engine)
            self.failed.pop(engine, None)
            self.version += 1

    def observe_slowdown(self, engine: str, ratio: float) -> bool:
        """One running ratio (a batch's seconds over what the probe's figures predict for it): updates the
        engine's slowdown (see the module docstring). False (nothing changed) before the engine's first probe
        or for a ratio that is not a positive number."""
        if not ratio > 0 or ratio == float("inf"):
            return False
        low, high = SLOWDOWN_RANGE
        with self._lock:
            current = self._speeds.get(engine)
            if current is None:
                return False
            current.ratios.append(min(high, max(low, ratio)))
            current.observations += 1
            if len(current.ratios) >= MIN_RUNNING:  # the median of fewer would follow one odd batch
                median = statistics.median(current.ratios)
                if median > current.slowdown:
                    current.slowdown = median
                else:
                    current.slowdown += self.recovery * (median - current.slowdown)
                    if current.slowdown - median < 1e-3:  # arrived: the median's figures again, exactly
                        current.slowdown = median
            current.measured_at = time.time()
            self.version += 1
            return True

    def fail(self, engine: str, reason: str) -> None:
        with self._lock:
            self.pending.discard(engine)
            if engine not in self._speeds:
                self.failed[engine] = reason
            self.version += 1

    def figures(self) -> dict[str, dict[str, float]]:
        """Engine -> figure -> seconds as the capacity rule uses them: the running figures where they count,
        else the probe's (a copy)."""
        with self._lock:
            return {name: s.effective() for name, s in self._speeds.items()}

    def probe_figures(self) -> dict[str, dict[str, float]]:
        """Engine -> figure -> seconds as the probes measured them (a copy)."""
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
        await cancel_and_wait(task)

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


Expectation = Callable[[Mapping[str, float], ServiceSample], "float | None"]


class RunningSpeed:
    """Feeds ``book`` the engines' running ratios (see the module docstring): every ``poll_s``, for each engine
    of ``expectations`` (name -> ``expect(probe_figures, sample) -> seconds or None``) that is loaded, probed and
    keeps a ``service_log``. Samples taken while ``busy()`` is False (no session: the probe's own runs, warm-ups)
    are skipped. ``start`` on the worker's loop; ``stop`` cancels it."""

    def __init__(self, worker: Any, book: SpeedBook, expectations: Mapping[str, Expectation], *,
                 busy: Callable[[], bool], poll_s: float = RUNNING_POLL_S) -> None:
        self.worker = worker
        self.book = book
        self.expectations = dict(expectations)
        self.busy = busy
        self.poll_s = poll_s
        self._cursors: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None and self.expectations:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="rtc_agent.worker.running_speed")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bad sample or expectation must not end the running figures
                log.warning("running speed: %r", exc)

    async def poll(self) -> int:
        """Read every engine's new samples once; returns how many ratios went into the book."""
        fed = 0
        for name, expect in self.expectations.items():
            if name not in self.worker.names() or not self.worker.stats()[name]["loaded"]:
                continue
            service_log = getattr(await self.worker.load(name), "service_log", None)  # loaded: returns at once
            if not isinstance(service_log, ServiceLog):
                continue
            if name not in self._cursors:  # what came before (load, warm-up) is not the running speed
                self._cursors[name] = service_log.written
            samples, self._cursors[name] = service_log.since(self._cursors[name])
            probe = self.book.probe_figures().get(name)
            if not samples or not probe or not self.busy():
                continue
            for sample in samples:
                expected = expect(probe, sample)
                if expected is not None and expected > 0 and self.book.observe_slowdown(name,
                                                                                        sample.seconds / expected):
                    fed += 1
        return fed
