"""Prometheus metrics of one server instance.

Each :class:`Metrics` owns its own ``CollectorRegistry`` so that several servers (tests, benchmarks) can live in one
process without clashing. Layers record into it; ``/metrics`` renders it.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


class Metrics:
    """All metrics of one server. Names are part of the operator contract: extend, don't rename."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions_active = Gauge("rtc_agent_sessions_active", "Sessions open now.", ["app"], registry=r)
        self.sessions_total = Counter("rtc_agent_sessions_total", "Sessions created.", ["app"], registry=r)
        self.sessions_ended = Counter(
            "rtc_agent_sessions_ended_total", "Sessions ended, by reason.", ["reason"], registry=r
        )
        self.event_loop_lag = Histogram(
            "rtc_agent_event_loop_lag_seconds", "How late the event loop wakes a 100 ms timer.",
            buckets=LAG_BUCKETS, registry=r,
        )
        self.event_loop_lag_last = Gauge(
            "rtc_agent_event_loop_lag_last_seconds", "The latest event-loop lag sample.", registry=r
        )
        self.stage_latency = Histogram(
            "rtc_agent_stage_latency_seconds", "Latency of one pipeline stage.", ["stage"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.errors = Counter("rtc_agent_errors_total", "Errors reported to clients, by code.", ["code"], registry=r)
        self.engine_queue_delay = Histogram(
            "rtc_agent_engine_queue_delay_seconds", "Time a request waited in an engine queue.", ["engine"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.engine_run_time = Histogram(
            "rtc_agent_engine_run_seconds", "Time an engine spent on one batch.", ["engine"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.engine_batch_size = Histogram(
            "rtc_agent_engine_batch_size", "Requests per engine batch.", ["engine"],
            buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32), registry=r,
        )
        self.engine_queue_depth = Gauge(
            "rtc_agent_engine_queue_depth", "Requests waiting per engine.", ["engine"], registry=r
        )
        self.tokens_live = Gauge(
            "rtc_agent_tokens_live", "Unexpired client tokens, client secrets, room links and sign-ins held, by kind.",
            ["kind"], registry=r,
        )
        self.tokens_limit = Gauge(
            "rtc_agent_tokens_limit", "Most live tokens and sign-ins kept at once (max_client_tokens).", registry=r
        )
        self.tokens_per_credential_limit = Gauge(
            "rtc_agent_tokens_per_credential_limit",
            "Most live tokens one minting credential may hold (max_tokens_per_credential, at most the limit).",
            registry=r,
        )
        self.tokens_most_held = Gauge(
            "rtc_agent_tokens_most_held", "The most live tokens one minting credential holds now.", registry=r
        )
        self._before_render: list[Callable[[Metrics], None]] = []

    def before_render(self, refresh: Callable[[Metrics], None]) -> None:
        """Call ``refresh(self)`` each time the metrics are rendered (gauges read from a live store)."""
        self._before_render.append(refresh)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        for refresh in self._before_render:
            refresh(self)
        return generate_latest(self.registry)
