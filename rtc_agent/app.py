"""The composition root: the aiohttp application with every layer wired in (routes, shared objects, start-up
and shutdown). Nothing imports it but the CLI, tests and benchmarks."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

from aiohttp import web

from rtc_agent import realtime
from rtc_agent.apps import APPS
from rtc_agent.apps.call import RoomRegistry
from rtc_agent.apps.call.sfu import SfuRooms
from rtc_agent.auth import AUTH, AccessControl, access_middleware, add_cors_headers, check_exposure
from rtc_agent.config import Settings
from rtc_agent.engines import register_engines
from rtc_agent.metrics import Metrics
from rtc_agent.redact import install_log_redaction, register_settings_secrets
from rtc_agent.server import (
    captions_export,
    credentials,
    forwarding,
    health,
    pages,
    room_links,
    signaling,
    translate_stream,
)
from rtc_agent.server.capacity import machine_capacity, running_sessions
from rtc_agent.server.forwarding import forwarding_middleware
from rtc_agent.server.http_errors import error_middleware
from rtc_agent.server.keys import (
    ADMISSION,
    APP_CLASSES,
    LAG_MONITOR,
    METRICS,
    PRELOADS,
    REGISTRY,
    ROOMS,
    SETTINGS,
    STARTED_AT,
    WORKER,
)
from rtc_agent.server.registry import SessionRegistry
from rtc_agent.state import open_store
from rtc_agent.worker import LoadAdmission, LoopLagMonitor, Worker
from rtc_agent.worker.blas_threads import limit_blas_threads
from rtc_agent.worker.default_executor import prestart_default_executor

log = logging.getLogger(__name__)

MIN_WORKER_GRACE_S = 0.5  # the least the worker gets, per step, to finish running calls and close its engines


def create_app(settings: Settings | None = None, *, worker: Worker | None = None) -> web.Application:
    """A ready-to-run server. ``worker`` lets a caller share engines between apps (tests, benchmarks)."""
    settings = settings or Settings()
    exposure = check_exposure(settings)  # refuses an open server on a non-loopback address
    register_settings_secrets(settings)  # masked wherever text leaves: logs, events, /health
    install_log_redaction()
    metrics = Metrics()
    app = web.Application(middlewares=[error_middleware(metrics), forwarding_middleware, access_middleware],
                          client_max_size=max(settings.max_body_bytes, 1024 * 1024))
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[APP_CLASSES] = APPS
    app[ROOMS] = RoomRegistry(settings)
    app[ROOMS].sfu = SfuRooms(settings) if settings.sfu_url else None  # rooms through Janus (apps.call.sfu)
    app[REGISTRY] = SessionRegistry(settings.max_sessions, metrics, connect_grace_s=settings.connect_grace_s,
                                    max_pending_per_client=settings.max_pending_sessions_per_client,
                                    max_pending_per_network=settings.max_pending_sessions_per_network,
                                    max_pending=settings.max_pending_sessions)
    if worker is None:
        worker = Worker(metrics)
        register_engines(worker, settings)
    app[WORKER] = worker
    app[LAG_MONITOR] = LoopLagMonitor(metrics)
    app[ADMISSION] = LoadAdmission(max_loop_lag_ms=settings.admission_max_loop_lag_ms,
                                   max_queue_delay_ms=settings.admission_max_queue_delay_ms,
                                   lag_monitor=app[LAG_MONITOR], worker=worker,
                                   running=lambda name=None: running_sessions(app[REGISTRY], name),
                                   capacity=machine_capacity(app, settings, worker, app[REGISTRY]).limit)
    app[ROOMS].pair_capacity = lambda: app[ADMISSION].capacity("interpret")  # speech-route interpretation pairs
    store = open_store(settings)  # tokens, sign-ins, join links, rate limits: outlive a restart (rtc_agent.state)
    app[AUTH] = AccessControl(settings, find_session=app[REGISTRY].get, metrics=metrics, store=store).install(app)
    app[ROOMS].meetings.attach_store(store)  # meetings and transcripts: outlive a restart, shared by nodes
    forwarding.install(app, settings, store, app[REGISTRY], app[ROOMS])  # replicas: room leases, forwarded offers
    app.on_cleanup.append(lambda _app: store.close())
    app.on_response_prepare.append(add_cors_headers)
    log.info("access: %s; state: %s", exposure, store.url)
    app[STARTED_AT] = time.monotonic()
    app[PRELOADS] = set()
    health.add_routes(app)
    signaling.add_routes(app)
    credentials.add_routes(app)
    captions_export.add_routes(app)
    room_links.add_routes(app)
    translate_stream.add_routes(app)
    pages.add_routes(app, settings.templates_dir, settings.static_dir)
    realtime.add_routes(app)
    app.on_startup.append(_start)
    app.on_shutdown.append(_shutdown)
    app.on_shutdown.append(lambda _app: _app[ROOMS].meetings.close_store())  # after the sessions' last lines
    return app


async def _start(app: web.Application) -> None:
    await prestart_default_executor()  # a fixed thread count from the start (see the module)
    limit_blas_threads(app[SETTINGS].blas_threads)  # no spinning BLAS helper beside the engines (see the module)
    app[LAG_MONITOR].start()
    worker = app[WORKER]
    for name in app[SETTINGS].preload:
        if name not in worker.names():
            log.warning("preload: no engine named %r (have %s)", name, ", ".join(worker.names()))
            continue
        task = asyncio.get_running_loop().create_task(_preload(worker, name), name=f"preload-{name}")
        app[PRELOADS].add(task)
        task.add_done_callback(app[PRELOADS].discard)


async def _preload(worker: Worker, name: str) -> None:
    try:
        await worker.load(name)
    except Exception as exc:  # the first session that needs it will report the error
        log.error("preloading engine %s failed: %s", name, exc)
        return
    # A loaded model leaves millions of long-lived objects; moved out of the collector's view, the full
    # collections that would rescan them (50-150 ms pauses of the event loop, measured) stop.
    gc.freeze()


async def _shutdown(app: web.Application) -> None:
    """Drain within ``shutdown_timeout_s`` (the listening sockets are already closed): every session hears
    ``session.ended {reason: "server_shutdown"}`` after its app finished what it could (final captions), then
    the worker stops. Sessions still closing at the deadline are cancelled, so the process exits in time.

    The worker gets what is left of the same budget (at least ``MIN_WORKER_GRACE_S`` for each of its two steps):
    an engine call or load that hangs on a remote server must not hold the shutdown for the worker's default
    grace on top of ``shutdown_timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + app[SETTINGS].shutdown_timeout_s
    for task in list(app[PRELOADS]):
        task.cancel()
    await app[REGISTRY].close_all("server_shutdown", timeout=app[SETTINGS].shutdown_timeout_s)
    await app[LAG_MONITOR].stop()
    # Worker.close waits up to ``grace`` for running calls, then up to ``grace`` for the engines' close
    if app[ROOMS].sfu is not None:  # Janus rooms whose sessions did not close in time
        await app[ROOMS].sfu.close()
    await app[WORKER].close(grace=max(MIN_WORKER_GRACE_S, (deadline - loop.time()) / 2))
