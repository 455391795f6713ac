"""Draining: how a server leaves on SIGTERM without surprising anyone.

1. It stops taking new sessions but keeps answering: ``/health`` says ``"status": "draining"`` with HTTP 503 (a load
   balancer moves new traffic to other nodes; the JSON body is the usual one), and ``POST /v1/sessions``, the
   Realtime calls and WebSocket get 503 ``server_draining`` with ``Retry-After`` (client tokens, join links and
   transcripts are still served: a page gets its token here and its session on the next node).
2. Running sessions go on for up to ``shutdown_drain_s`` seconds (0: not at all) or until they have all ended, then
   every one still running ends with ``session.ended {reason: "server_shutdown"}`` (its app first finishes what it
   can, e.g. the last caption; at most ``shutdown_timeout_s``). The call page reconnects on that reason with back-off
   (``static/js/call/reconnect.js``), to this node once it is back or through the load balancer to another.
3. The process exits: aiohttp's own shutdown (listening sockets closed, ``on_shutdown``: worker and engines, the
   state store's queued writes) runs as for SIGINT, and ``rtc-agent serve`` returns 0.

:func:`drain` is steps 1-2 (tests call it on an in-process server); :func:`drain_on_sigterm` wires SIGTERM of the
``rtc-agent serve`` process to all three. A second SIGTERM during the drain exits at once (step 3).
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal

from aiohttp import web
from aiohttp.web_runner import GracefulExit

from rtc_agent.server.keys import REGISTRY, SETTINGS

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often the drain looks whether every session has ended


def retry_after_s(settings: object) -> float:
    """What ``Retry-After`` a refused client gets while draining: until this process should be gone."""
    drain = float(getattr(settings, "shutdown_drain_s", 0.0))
    return float(max(1, math.ceil(drain + float(getattr(settings, "shutdown_timeout_s", 0.0)))))


async def drain(app: web.Application) -> None:
    """Refuse new sessions from now, let running ones go on for up to ``shutdown_drain_s``, then end the rest with
    ``server_shutdown`` (within ``shutdown_timeout_s``). Returns when no session is left."""
    settings, registry = app[SETTINGS], app[REGISTRY]
    registry.start_draining(retry_after_s(settings))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, float(settings.shutdown_drain_s))
    log.info("draining: %d sessions running; new sessions are refused; ending the rest in %.1f s at most",
             len(registry.active), settings.shutdown_drain_s)
    while registry.active and loop.time() < deadline:
        await asyncio.sleep(min(POLL_S, max(0.0, deadline - loop.time())))
    if registry.active:
        log.info("draining: ending %d sessions (server_shutdown)", len(registry.active))
    await registry.close_all("server_shutdown", timeout=settings.shutdown_timeout_s)


def _exit() -> None:
    raise GracefulExit()  # what aiohttp's own SIGTERM handler raises: run_app shuts the server down and returns


def drain_on_sigterm(app: web.Application) -> None:
    """For ``rtc-agent serve`` (``web.run_app``): SIGTERM drains (:func:`drain`), then the process exits; a second
    SIGTERM exits at once. Installed at start-up, over aiohttp's handler (which would close the listening sockets
    first, so nobody could hear that this node is draining)."""
    tasks: set[asyncio.Task[None]] = set()

    async def drain_then_exit() -> None:
        try:
            await drain(app)
        except Exception:
            log.exception("draining failed; shutting down")
        asyncio.get_running_loop().call_soon(_exit)

    def on_sigterm() -> None:
        if tasks:
            log.info("second SIGTERM: shutting down now")
            _exit()
        log.info("SIGTERM: draining")
        tasks.add(asyncio.get_running_loop().create_task(drain_then_exit(), name="drain"))

    async def install(_app: web.Application) -> None:
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_sigterm)
        except (NotImplementedError, RuntimeError):  # no signals here (Windows, a thread): aiohttp's handling stays
            log.warning("SIGTERM cannot be handled on this platform: the server stops without draining")

    app.on_startup.append(install)
