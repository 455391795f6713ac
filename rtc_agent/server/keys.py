"""Typed keys of the objects one server shares between its routes, and the app lookup by name."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from rtc_agent.apps.call import RoomRegistry
from rtc_agent.config import Settings
from rtc_agent.errors import InvalidRequest
from rtc_agent.metrics import Metrics
from rtc_agent.server.registry import SessionRegistry

SETTINGS = web.AppKey("settings", Settings)
REGISTRY = web.AppKey("registry", SessionRegistry)
METRICS = web.AppKey("metrics", Metrics)
WORKER = web.AppKey("worker", Any)  # rtc_agent.worker.Worker
LAG_MONITOR = web.AppKey("lag_monitor", Any)  # rtc_agent.worker.LoopLagMonitor
STARTED_AT = web.AppKey("started_at", float)
PRELOADS = web.AppKey("preloads", set)  # background engine loads started at start-up
ADMISSION = web.AppKey("admission", Any)  # rtc_agent.worker.LoadAdmission
APP_CLASSES = web.AppKey("app_classes", dict)  # app name -> App class: the apps a session or token may name
ROOMS = web.AppKey("rooms", RoomRegistry)  # the call rooms and meetings of this server


def app_class(app: web.Application, name: Any) -> type:
    """The class of the app named ``name`` on this server (400 ``missing_app`` / ``unknown_app`` otherwise)."""
    classes = app[APP_CLASSES]
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"'app' must name one of: {', '.join(sorted(classes))}", code="missing_app")
    cls = classes.get(name)
    if cls is None:
        raise InvalidRequest(f"unknown app {name!r}; available: {', '.join(sorted(classes))}", code="unknown_app")
    return cls
