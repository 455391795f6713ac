"""``SessionRegistry``: the sessions of one server, the session cap, and recently ended sessions.

Admission (:meth:`SessionRegistry.check_capacity`), so that never-connected sessions cannot hold the server:

- ``max_sessions`` counts only sessions that are connected or still younger than ``connect_grace_s``; an offer
  that never connects stops holding a slot after the grace (its session is closed at ``connect_timeout_s``);
- at most ``2 x max_sessions`` session objects exist at once, counted or not (a hard ceiling);
- one client (the key the caller passes: API key id or IP) may hold at most ``max_pending_per_client``
  not-yet-connected sessions (429 above). Sessions with no client key (``""``) are not counted per client.

Every refusal is an :class:`AtCapacity` with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from rtc_agent.errors import AtCapacity, NotFound
from rtc_agent.metrics import Metrics

if TYPE_CHECKING:
    from rtc_agent.server.session import Session

log = logging.getLogger(__name__)

RECENT_LIMIT = 64  # ended sessions kept for GET (and exports) after they close
RETRY_AFTER_S = 5
HARD_CEILING_FACTOR = 2


class SessionRegistry:
    def __init__(self, max_sessions: int, metrics: Metrics, *, connect_grace_s: float = 5.0,
                 max_pending_per_client: int = 4) -> None:
        self.max_sessions = max_sessions
        self.metrics = metrics
        self.connect_grace_s = connect_grace_s
        self.max_pending_per_client = max_pending_per_client
        self.active: dict[str, Session] = {}
        self.recent: OrderedDict[str, Session] = OrderedDict()
        self.total = 0

    # --- admission ---

    def _holds_slot(self, session: Session, now: float) -> bool:
        """Connected, or not yet past the connect grace."""
        return session.connected_at is not None or now - session.started_at < self.connect_grace_s

    def counted(self) -> int:
        """Sessions that count against ``max_sessions`` now."""
        now = time.monotonic()
        return sum(1 for s in self.active.values() if self._holds_slot(s, now))

    def pending_for(self, client: str) -> int:
        """Not-yet-connected, not-ended sessions of one client."""
        return sum(1 for s in self.active.values()
                   if s.client == client and s.connected_at is None and s.state not in ("closing", "closed"))

    def check_capacity(self, client: str = "") -> None:
        """Raise :class:`AtCapacity` (503, or 429 for the per-client cap) when a new session may not start."""
        if len(self.active) >= HARD_CEILING_FACTOR * self.max_sessions or self.counted() >= self.max_sessions:
            raise AtCapacity(f"the server is at its limit of {self.max_sessions} sessions; retry later",
                             code="too_many_sessions", retry_after=RETRY_AFTER_S)
        if client and self.pending_for(client) >= self.max_pending_per_client:
            raise AtCapacity(f"this client already has {self.max_pending_per_client} sessions that are not "
                             "connected yet; connect or end them first", code="too_many_pending_sessions",
                             status=429, retry_after=RETRY_AFTER_S)

    def add(self, session: Session, *, client: str | None = None) -> None:
        """Register a new session (checks capacity again, so no await may come between the check and this).
        ``client`` (API key id or IP) is stored on the session for the per-client cap."""
        if client is not None:
            session.client = client
        self.check_capacity(session.client)
        self.active[session.id] = session
        self.total += 1
        self.metrics.sessions_total.labels(app=session.app_name).inc()
        self.metrics.sessions_active.labels(app=session.app_name).inc()

    async def start(self, session: Session, offer_sdp: str, *, client: str) -> str:
        """Register ``session`` for ``client`` and accept its offer; the answer SDP. A failed set-up closes the
        session (which frees its slot whatever goes wrong) and re-raises."""
        self.add(session, client=client)
        try:
            return await session.accept(offer_sdp)
        except BaseException:
            await session.close("setup_failed")
            raise

    # --- lookup and end ---

    def closed(self, session: Session) -> None:
        """Move an ended session to the recent list (the session calls this when it has closed)."""
        if self.active.pop(session.id, None) is None:
            return
        self.metrics.sessions_active.labels(app=session.app_name).dec()
        self.metrics.sessions_ended.labels(reason=session.close_reason or "unknown").inc()
        self.recent[session.id] = session
        while len(self.recent) > RECENT_LIMIT:
            self.recent.popitem(last=False)

    def get(self, session_id: str, *, include_ended: bool = True) -> Session:
        session = self.active.get(session_id)
        if session is None and include_ended:
            session = self.recent.get(session_id)
        if session is None:
            raise NotFound(f"no session {session_id!r}", code="session_not_found")
        return session

    async def close_all(self, reason: str, *, timeout: float | None = None) -> None:
        """Close every active session with ``reason``, all at once; return within ``timeout`` seconds (when
        given) even if some did not finish: those are forgotten (moved to the recent list) with a warning."""
        sessions = list(self.active.values())
        if not sessions:
            return
        tasks = [asyncio.ensure_future(s.close(reason)) for s in sessions]
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)
        for session in sessions:
            if session.id in self.active:
                log.warning("session %s did not close within %s s; forgetting it", session.id, timeout)
                session.close_reason = session.close_reason or reason
                self.closed(session)
