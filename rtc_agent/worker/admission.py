"""``LoadAdmission``: refuse new sessions while the ones already running would fall behind real time.

Two signals, each over the last few seconds: how late the event loop wakes (every session's media pacing and
heartbeats share it) and how long requests wait in an engine's queue before a batch takes them. A count cap
alone admits a session into a server whose engines are already behind; this check refuses it with 503 and
``Retry-After`` instead.

A third, before the fact: this machine's measured capacity per app (:mod:`rtc_agent.worker.capacity`). With an
app name, ``check(app)`` refuses the session that would take that app past the sessions the machine holds in
real time, so the admitted ones keep their quality. The routes call it before any engine work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rtc_agent.errors import AtCapacity

RETRY_AFTER_S = 5
CAPACITY_RETRY_AFTER_S = 10  # sessions last minutes: a slot frees later than a load spike passes
RECENT_S = 5.0
MIN_SAMPLES = 10


class LoadAdmission:
    """``check()`` raises :class:`AtCapacity` (``code="server_busy"``) when a recent figure is over its limit
    while sessions are running (a server with none admits: a slow start-up, while engines load, refuses nobody).
    ``check(app)`` also raises it when ``capacity(app)`` (sessions of that app the machine holds; None: no limit)
    is not above ``running(app)``.

    ``lag_ms()`` gives the event loop's recent lag (p90, ms); ``queue_delays_ms()`` each engine's recent queueing
    delay (ms). A limit of 0 turns its check off. ``running(None)`` counts every session, ``running(app)`` the
    sessions of one app.
    """

    def __init__(self, *, max_loop_lag_ms: float, max_queue_delay_ms: float, lag_monitor: Any, worker: Any,
                 running: Callable[..., int] = lambda app=None: 1,
                 capacity: Callable[[str], int | None] | None = None) -> None:
        self.running = running  # sessions running now: with none there is nobody to protect
        self.capacity = capacity
        self.max_loop_lag_ms = max_loop_lag_ms
        self.max_queue_delay_ms = max_queue_delay_ms
        self.lag_monitor = lag_monitor
        self.worker = worker
        self.refused = 0
        self.last_refusal: float | None = None

    def lag_ms(self) -> float:
        """The loop's recent p90 lag; 0.0 until it has sampled for a second (one spike at start-up is no trend)."""
        if self.lag_monitor.sample_count() < MIN_SAMPLES:
            return 0.0
        return float(self.lag_monitor.recent_ms(RECENT_S, 90))

    def queue_delays_ms(self) -> dict[str, float]:
        return dict(self.worker.recent_queue_delays_ms(RECENT_S))

    def check(self, app: str | None = None) -> None:
        """Raise ``AtCapacity(code="server_busy")`` with ``retry_after`` when a new session (of ``app``, when
        given) may not start now; the no-argument form checks the load signals only."""
        reason = self._reason()
        retry_after = RETRY_AFTER_S
        if reason is None and app is not None:
            reason = self._capacity_reason(app)
            retry_after = CAPACITY_RETRY_AFTER_S
        if reason is not None:
            self.refused += 1
            self.last_refusal = time.monotonic()
            raise AtCapacity(f"the server is too busy for another session ({reason}); retry later",
                             code="server_busy", retry_after=retry_after)

    def _capacity_reason(self, app: str) -> str | None:
        if self.capacity is None:
            return None
        limit = self.capacity(app)
        if limit is None:
            return None
        running = self.running(app)
        if running >= limit:
            return f"{app}: {running} of the {limit} sessions this machine holds in real time are running"
        return None

    def _reason(self) -> str | None:
        if self.running() == 0:
            return None
        if self.max_loop_lag_ms > 0:
            lag = self.lag_ms()
            if lag > self.max_loop_lag_ms:
                return f"event loop {lag:.0f} ms late"
        if self.max_queue_delay_ms > 0:
            for name, delay in self.queue_delays_ms().items():
                if delay > self.max_queue_delay_ms:
                    return f"engine {name} queue {delay:.0f} ms"
        return None
