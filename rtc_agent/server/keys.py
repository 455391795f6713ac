"""Typed keys of the objects one server shares between its routes."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from rtc_agent.config import Settings
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
