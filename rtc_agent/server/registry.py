"""``SessionRegistry``: the sessions of one server, the session cap, and recently ended sessions."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import TYPE_CHECKING

from rtc_agent.errors import AtCapacity, NotFound
from rtc_agent.metrics import Metrics

if TYPE_CHECKING:
    from rtc_agent.server.session import Session

RECENT_LIMIT = 64  # ended sessions kept for GET (and exports) after they close
RETRY_AFTER_S = 5


class SessionRegistry:
    def __init__(self, max_sessions: int, metrics: Metrics) -> None:
        self.max_sessions = max_sessions
        self.metrics = metrics
        self.active: dict[str, Session] = {}
        self.recent: OrderedDict[str, Session] = OrderedDict()
        self.total = 0

    def check_capacity(self) -> None:
        if len(self.active) >= self.max_sessions:
            raise AtCapacity(f"the server is at its limit of {self.max_sessions} sessions; retry later",
                             code="too_many_sessions", retry_after=RETRY_AFTER_S)

    def add(self, session: Session) -> None:
        """Register a new session (call :meth:`check_capacity` first, with no await in between)."""
        self.check_capacity()
        self.active[session.id] = session
        self.total += 1
        self.metrics.sessions_total.labels(app=session.app_name).inc()
        self.metrics.sessions_active.labels(app=session.app_name).inc()

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

    async def close_all(self, reason: str) -> None:
        await asyncio.gather(*(s.close(reason) for s in list(self.active.values())), return_exceptions=True)
