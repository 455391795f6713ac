"""How a session ends: the words of ``session.ended``, and teardown steps that always finish in bounded time.

A task may ignore cancellation (the peer connection's own bounded close is :mod:`rtc_agent.rtc.peer_close`). Each
helper here has a deadline, logs what went wrong and never raises (except ``CancelledError`` of the caller itself),
so ``Session.close`` always ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from rtc_agent.protocol.events import SessionEnded
from rtc_agent.rtc.event_channel import EventChannel

log = logging.getLogger(__name__)

ENDED_MESSAGES = {
    "heartbeat_lost": "No message arrived from the client for too long (heartbeat lost); the session was closed.",
    "max_duration": "The session reached its maximum duration.",
    "server_shutdown": "The server is shutting down.",
    "connect_timeout": "The connection was not established in time.",
    "deleted": "The session was ended on request.",
    "internal_error": "The session ended because of an internal server error.",
    "peer_closed": "The peer closed the connection.",
    "ice_failed": "The network connection failed (ICE).",
    "setup_failed": "The session could not be set up.",
    "rate_limited": "The client kept sending more messages than its budget allows; the session was closed.",
    "room_moved": "Another server hosts this call room now; join again to reach it.",
}

#: Reasons whose ``session.ended`` the client may still read (the others mean the channel is gone or going).
ANNOUNCED = frozenset({"heartbeat_lost", "max_duration", "server_shutdown", "connect_timeout", "deleted",
                       "internal_error", "rate_limited", "room_moved"})


def ended_message(reason: str) -> str:
    """The human message of ``session.ended`` for ``reason``."""
    return ENDED_MESSAGES.get(reason, f"The session ended ({reason}).")


async def announce_end(channel: EventChannel, reason: str, drain_s: float, *, name: str = "") -> None:
    """Send ``session.ended`` while the channel is open, then wait up to ``drain_s`` seconds for it to leave."""
    if not channel.is_open:
        if reason in ANNOUNCED:
            log.debug("session %s: no open channel to announce %s", name, reason)
        return
    try:
        channel.send(SessionEnded(reason=reason, message=ended_message(reason)))
        channel.seal()
        await channel.drain(drain_s)
    except Exception:
        log.exception("session %s: sending session.ended failed", name)


class ClosingSession:
    """The close sequence every kind of session shares (WebRTC :class:`~rtc_agent.server.session.Session`, the
    Realtime WebSocket session): safe to call more than once and from anywhere, never raises, each step bounded.

    The app's close (it can read ``close_reason``), then :meth:`_end_transport` with the session's other tasks (the
    subclass cancels them and closes its transport), then state ``closed`` and ``on_closed``. A second caller waits
    for the first (at most ``close_wait_s``). Subclasses set ``id``, ``app``, ``app_name``, ``state``, ``_tasks``,
    ``_closed`` and ``_on_closed``.
    """

    app_close_timeout_s = 5.0  # the app's close (captions finish their final caption within final_drain_s)
    close_wait_s = 20.0
    transport_name = ""

    id: str
    app: Any
    app_name: str
    state: str
    close_reason: str | None
    _tasks: set[asyncio.Task]
    _closed: asyncio.Event
    _on_closed: Callable[[Any], None]

    async def _end_transport(self, reason: str, tasks: list[asyncio.Task]) -> None:
        raise NotImplementedError

    @property
    def task_count(self) -> int:
        """The session's tasks still running."""
        return sum(1 for t in self._tasks if not t.done())

    async def close(self, reason: str = "deleted") -> None:
        """End the session and everything it owns (see the class docstring)."""
        if self.state in ("closing", "closed"):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), self.close_wait_s)
            return
        self.state = "closing"
        self.close_reason = reason
        log.info("session %s (%s%s) closing: %s", self.id, self.app_name, self.transport_name, reason)
        current = asyncio.current_task()
        try:
            try:
                await asyncio.wait_for(self.app.close(), self.app_close_timeout_s)
            except Exception:
                log.exception("session %s: app close failed", self.id)
            await self._end_transport(reason, [t for t in self._tasks if t is not current])
        except Exception:
            log.exception("session %s: closing failed", self.id)
        finally:
            for task in [t for t in self._tasks if t is not current]:
                task.cancel()
            self.state = "closed"
            self._closed.set()
            try:
                self._on_closed(self)
            except Exception:
                log.exception("session %s: on_closed failed", self.id)
