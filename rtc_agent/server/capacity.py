"""Wiring of measured capacity into the server: the speed probe at start-up and the planner admission asks.

:func:`machine_capacity` builds, for one application, a :class:`~rtc_agent.worker.speed.SpeedBook`, a
:class:`~rtc_agent.worker.speed.SpeedProbe` over the engines this machine runs (probes from
:mod:`rtc_agent.engines.speed_probes`; targets: the ``preload`` engines, when ``speed_probe`` is on) and a
:class:`~rtc_agent.worker.capacity.CapacityPlanner` (``admission_capacity``, ``capacity_safety``,
``capacity_sessions``, ``max_sessions``), and (``capacity_running``) a :class:`~rtc_agent.worker.speed.RunningSpeed`
that moves the figures with the engines' measured speed while sessions run (``capacity_running_window``,
``capacity_running_recovery``; expectations from :mod:`rtc_agent.engines.speed_probes`). It starts both with the
application and stops them at shutdown. ``/health`` and the pages' capabilities publish
``app[CAPACITY].snapshot()``. The same book drives the captions' decode plan
(:class:`~rtc_agent.worker.decode_plan.DecodePlanner`: the final's beam and the partial interval, settings
``captions_final_beam``, ``captions_partial_interval_ms``, ``captions_max_partial_interval_ms``), which the apps
read through ``worker.decode_plans`` and the snapshot shows per transcribing app (``plan``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from rtc_agent.engines.speed_probes import embedded_expectations, embedded_probes
from rtc_agent.worker.capacity import CapacityPlanner, parse_overrides
from rtc_agent.worker.decode_plan import DecodePlanner
from rtc_agent.worker.speed import RUNNING_POLL_S, RunningSpeed, SpeedBook, SpeedProbe

CAPACITY = web.AppKey("capacity", CapacityPlanner)
SPEED_PROBE = web.AppKey("speed_probe", SpeedProbe)
RUNNING_SPEED = web.AppKey("running_speed", RunningSpeed)

__all__ = ["CAPACITY", "RUNNING_SPEED", "SPEED_PROBE", "capacity_summary", "machine_capacity", "running_sessions"]


def running_sessions(registry: Any, app_name: str | None = None) -> int:
    """Sessions in ``registry`` (of ``app_name``, when given) that have not ended; per app, an SFU room's
    listeners (call config ``role: "listener"``: no media to this server) do not count."""
    if app_name is None:
        return len(registry.active)
    return sum(1 for s in registry.active.values() if getattr(s, "app_name", None) == app_name
               and (getattr(s, "config", None) or {}).get("role") != "listener")


def machine_capacity(app: web.Application, settings: Any, worker: Any, registry: Any) -> CapacityPlanner:
    """The planner for ``app`` (also stored as ``app[CAPACITY]``), its probe registered to run with ``app``."""
    book = SpeedBook(window=int(settings.capacity_running_window),
                     recovery=float(settings.capacity_running_recovery))
    probe: SpeedProbe | None = None

    def loaded_call(name: str) -> Any:
        return probe.loaded_call(name) if probe is not None else None

    targets = list(settings.preload) if settings.speed_probe else []
    probe = SpeedProbe(worker, book, embedded_probes(settings, loaded_call), targets=targets,
                       idle=lambda: not registry.active)
    planner = CapacityPlanner(book, max_sessions=settings.max_sessions,
                              safety=float(settings.capacity_safety),
                              overrides=parse_overrides(settings.capacity_sessions),
                              enabled=bool(settings.admission_capacity),
                              running=lambda name: running_sessions(registry, name))
    running = RunningSpeed(worker, book, embedded_expectations(settings) if settings.capacity_running else {},
                           busy=lambda: bool(registry.active), poll_s=RUNNING_POLL_S)
    plans = DecodePlanner.from_settings(book, settings, running=lambda name: running_sessions(registry, name))
    planner.decode_plans = plans
    worker.decode_plans = plans
    app[CAPACITY] = planner
    app[SPEED_PROBE] = probe
    app[RUNNING_SPEED] = running

    async def start(_: web.Application) -> None:
        probe.start()
        running.start()

    async def stop(_: web.Application) -> None:
        await running.stop()
        await probe.stop()

    app.on_startup.append(start)
    app.on_shutdown.append(stop)
    return planner


def capacity_summary(app: web.Application) -> dict[str, Any] | None:
    """Per app what the pages show: ``{app: {sessions, running, source, enforced}}``, and for the transcribing
    apps their decode ``plan`` (None without a planner)."""
    planner = app.get(CAPACITY)
    if planner is None:
        return None
    return {name: {"sessions": entry["sessions"], "running": entry["running"], "source": entry["source"],
                   "enforced": entry["enforced"], **({"plan": entry["plan"]} if "plan" in entry else {})}
            for name, entry in planner.snapshot()["apps"].items()}
