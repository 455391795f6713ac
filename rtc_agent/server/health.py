"""``/health`` (liveness and readiness JSON) and ``/metrics`` (Prometheus text)."""

from __future__ import annotations

import time

from aiohttp import web

from rtc_agent import __version__
from rtc_agent.server.keys import LAG_MONITOR, METRICS, REGISTRY, STARTED_AT, WORKER


async def health(request: web.Request) -> web.Response:
    app = request.app
    registry = app[REGISTRY]
    return web.json_response({
        "status": "ok",
        "version": __version__,
        "uptime_s": round(time.monotonic() - app[STARTED_AT], 3),
        "sessions": {"active": len(registry.active), "max": registry.max_sessions, "total": registry.total},
        "event_loop_lag": app[LAG_MONITOR].stats(),
        "engines": app[WORKER].stats(),
    })


async def metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
