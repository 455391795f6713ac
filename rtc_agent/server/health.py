"""``/health`` (liveness and readiness JSON) and ``/metrics`` (Prometheus text).

``/health`` passes through :func:`rtc_agent.redact.redact_data`: engine progress lines and descriptions name
remote servers, and those names never carry user-info, query tokens or registered secrets.

Readiness (:func:`readiness`): ``status`` is ``"loading"`` (still HTTP 200: the process is alive) while an engine
that is preloaded at start (``--preload``) is not ready yet, else ``"ok"``; ``"draining"`` with HTTP 503 (and the
same body) once the server is shutting down and refuses new sessions (:mod:`rtc_agent.server.draining`), so a load
balancer moves new traffic away. ``readiness`` says per engine
``state`` (``ready``, ``loading``, ``failed``, or ``on_demand``: not preloaded, loads with the first session that
needs it), ``progress`` (the engine's last load message) and ``percent`` (0-100 when the message tells it, e.g.
"part 3/6", else null), and per app whether all the engines it needs are ready (``apps``). The pages show the
same object before Connect and poll ``/health`` until their app is ready.

``engines`` is :meth:`~rtc_agent.worker.Worker.stats`: per engine its queue and counters, and for a loaded engine
that measures itself its ``runtime`` (the embedded LLM: ``row_cache`` and ``step_threads``).

``capacity`` is this machine's measured speed and what it holds (:mod:`rtc_agent.server.capacity`): per engine
the probe's ``figures`` (seconds per unit; ``note`` says what the probe ran, e.g. speech or noise as the ASR
input), the ``slowdown`` measured under load and the ``running_figures`` the rule uses (``source`` ``running``
once enough batches were measured, else ``probe``), ``pending`` and ``failed`` engines, and per app ``sessions``
(the limit; null while unmeasured), ``probe_sessions`` (what the start-up probe alone gives), ``running``,
``source`` (``measured``, ``override`` or ``unmeasured``), ``enforced``, ``share`` and ``demand``; ``captions`` and
``call`` also ``plan``, the decode plan their transcribers use now (:mod:`rtc_agent.worker.decode_plan`:
``final_beam``, ``partial_interval_ms``, ``source`` ``measured``, ``setting`` or ``default``, per value ``sources``,
and the ``talkers``, predicted ``final_s`` and ASR ``load`` behind them).

``state`` is the state store: ``store`` (its kind) and ``url`` (secrets masked), and ``meetings``, how the writes of
meetings and transcripts to it fare (:meth:`~rtc_agent.apps.call.store_journal.StoreJournal.stats`: ``ok`` false
once one failed or was dropped, then the server holds what the store lacks in memory only; ``failed``,
``dropped``, ``queued``, ``last_error``); null when meetings are not kept in a store.

``node`` (only when ``node_url`` is set: one of several replicas, :mod:`rtc_agent.server.forwarding`) is this
node's ``id`` and ``url`` (never its secret), and ``rooms_held`` how many call room leases it holds now (the rooms it
hosts or has just claimed for an offer); both are left out on a single node.
"""

from __future__ import annotations

import re
import time
from typing import Any

from aiohttp import web

from rtc_agent import __version__
from rtc_agent.redact import redact_data
from rtc_agent.server.capacity import CAPACITY
from rtc_agent.server.forwarding import FORWARDER
from rtc_agent.server.keys import LAG_MONITOR, METRICS, REGISTRY, ROOMS, SETTINGS, STARTED_AT, WORKER

#: The engines each app needs before its first turn (an engine the server does not have is left out).
APP_ENGINES: dict[str, tuple[str, ...]] = {
    "captions": ("vad", "asr"),
    "interpret": ("vad", "asr", "st", "tts"),
    "agent": ("vad", "asr", "llm", "tts"),
    "echo": (),
    "call": ("vad", "asr"),
}
#: What the pages call each engine in "Loading the language model... 60 %".
ENGINE_LABELS = {"vad": "voice detector", "asr": "speech recognizer", "st": "translator", "llm": "language model",
                 "tts": "voice", "vlm": "vision model"}
_FRACTION = re.compile(r"(\d+)\s*/\s*(\d+)")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%")


def _state(stats: dict[str, Any], preloaded: bool) -> str:
    if stats.get("loaded"):
        return "ready"
    if str(stats.get("progress") or "").startswith("load failed"):
        return "failed"
    if stats.get("loading") or preloaded:
        return "loading"
    return "on_demand"


def _percent(progress: str, state: str) -> int | None:
    if state == "ready":
        return 100
    match = _PERCENT.search(progress)
    if match:
        return max(0, min(99, int(float(match.group(1)))))
    match = _FRACTION.search(progress)
    if match and int(match.group(2)) > 0:
        return max(0, min(99, int(100 * int(match.group(1)) / int(match.group(2)))))
    return None


def readiness(app: web.Application) -> dict[str, Any]:
    """``{"status", "engines": {name: {state, progress, percent, label}}, "apps": {app: {ready, waiting}}}``."""
    stats = app[WORKER].stats()
    preload = set(app[SETTINGS].preload)
    engines: dict[str, Any] = {}
    for name, s in stats.items():
        state = _state(s, name in preload)
        progress = str(s.get("progress") or "")
        engines[name] = {"state": state, "progress": progress, "percent": _percent(progress, state),
                         "label": ENGINE_LABELS.get(name, name)}
    apps = {}
    for app_name, needed in APP_ENGINES.items():
        waiting = [n for n in needed if n in engines and engines[n]["state"] in ("loading", "failed")]
        apps[app_name] = {"ready": not waiting, "waiting": waiting}
    loading = any(e["state"] == "loading" for e in engines.values())
    return {"status": "loading" if loading else "ok", "engines": engines, "apps": apps}


async def health(request: web.Request) -> web.Response:
    app = request.app
    registry = app[REGISTRY]
    ready = readiness(app)
    persist = app[ROOMS].meetings.persist if ROOMS in app else None
    return web.json_response(redact_data({
        "status": "draining" if registry.draining else ready["status"],
        "readiness": {"engines": ready["engines"], "apps": ready["apps"]},
        "version": __version__,
        "uptime_s": round(time.monotonic() - app[STARTED_AT], 3),
        "sessions": {"active": len(registry.active), "max": registry.max_sessions, "total": registry.total},
        "event_loop_lag": app[LAG_MONITOR].stats(),
        "engines": app[WORKER].stats(),
        "capacity": app[CAPACITY].snapshot() if CAPACITY in app else None,
        "state": {"store": persist.store.kind, "url": persist.store.url, "meetings": persist.journal.stats()}
        if persist is not None else None,
        **node_status(app),
    }), status=503 if registry.draining else 200)


def node_status(app: web.Application) -> dict[str, Any]:
    """``{"node": {"id", "url"}, "rooms_held"}`` for a node with ``node_url`` (a replica), else ``{}``."""
    forwarder = app.get(FORWARDER)
    if forwarder is None or not forwarder.enabled:
        return {}
    held = len(forwarder.leases.held) if forwarder.leases is not None else 0
    return {"node": {"id": forwarder.node_id, "url": forwarder.node_url}, "rooms_held": held}


async def metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
