"""The aiohttp application factory: routes, shared objects, start-up and shutdown."""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from rtc_agent.config import Settings
from rtc_agent.engines import register_engines
from rtc_agent.metrics import Metrics
from rtc_agent.server import captions_export, health, pages, signaling, translate_stream
from rtc_agent.server.http_errors import error_middleware
from rtc_agent.server.keys import LAG_MONITOR, METRICS, PRELOADS, REGISTRY, SETTINGS, STARTED_AT, WORKER
from rtc_agent.server.registry import SessionRegistry
from rtc_agent.worker import LoopLagMonitor, Worker

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, *, worker: Worker | None = None) -> web.Application:
    """A ready-to-run server. ``worker`` lets a caller share engines between apps (tests, benchmarks)."""
    settings = settings or Settings()
    metrics = Metrics()
    app = web.Application(middlewares=[error_middleware(metrics)],
                          client_max_size=max(settings.max_body_bytes, 1024 * 1024))
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[REGISTRY] = SessionRegistry(settings.max_sessions, metrics)
    if worker is None:
        worker = Worker(metrics)
        register_engines(worker, settings)
    app[WORKER] = worker
    app[LAG_MONITOR] = LoopLagMonitor(metrics)
    app[STARTED_AT] = time.monotonic()
    app[PRELOADS] = set()
    health.add_routes(app)
    signaling.add_routes(app)
    captions_export.add_routes(app)
    translate_stream.add_routes(app)
    pages.add_routes(app, settings.templates_dir, settings.static_dir)
    app.on_startup.append(_start)
    app.on_shutdown.append(_shutdown)
    return app


async def _start(app: web.Application) -> None:
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


async def _shutdown(app: web.Application) -> None:
    for task in list(app[PRELOADS]):
        task.cancel()
    await app[REGISTRY].close_all("server_shutdown")
    await app[LAG_MONITOR].stop()
    await app[WORKER].close()
