"""``SessionRegistry``: the sessions of one server, admission, and recently ended sessions.

Admission: the ceiling protects admitted sessions, and offers that never connect cannot fill it.

- ``max_sessions`` counts *connected* sessions (a WebRTC peer connected, or a WebSocket session). A session not
  connected yet is *pending*; pending sessions live in a pool of at most ``max_pending`` and never hold a slot;
- pending sessions are limited per credential (``client``: an API key id, the minting client of a client token,
  or ``ip:...``) and per peer IP to ``max_pending_per_client``, and per network (IPv4 /24, IPv6 /64 of the peer)
  to ``max_pending_per_network``: 429 ``too_many_pending_sessions`` above;
- a new offer that finds the pool (or the hard ceiling) full makes room (:meth:`SessionRegistry.start`): one
  pending session older than ``connect_grace_s`` is closed (reason ``connect_timeout``): of those, one of the
  network or credential that holds the most pending sessions, the oldest first. Only when none is that old is
  the newcomer refused (503 ``too_many_sessions``). A peer that connects within the grace is never closed this
  way, and never refused while the pool turns over slower than the grace (``max_pending`` / the rate of offers
  that never connect > ``connect_grace_s``: 8 a second from as many networks with the defaults, 16 and 2 s;
  fewer networks meet their cap first). The session's own watchdog still closes it at ``connect_timeout_s``.
  The closed session stays closed even if ``on_admit`` then refuses the newcomer (a token used concurrently);
- at most ``max_sessions + max_pending`` session objects exist at once, closing ones included (the hard
  ceiling; ``2 x max_sessions`` with the default settings). Offers admitted while the server was below
  ``max_sessions`` may all connect: a burst can open more than ``max_sessions``, never more than the ceiling.

Every refusal is an :class:`AtCapacity` with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rtc_agent.errors import AtCapacity, NotFound
from rtc_agent.metrics import Metrics

if TYPE_CHECKING:
    from rtc_agent.server.session import Session

log = logging.getLogger(__name__)

RECENT_LIMIT = 64  # ended sessions kept for GET (and exports) after they close
RETRY_AFTER_S = 5
EVICTED_REASON = "connect_timeout"
EVICT_ATTEMPTS = 3  # sessions one offer may close to make room (others may take the room meanwhile)
EVICT_WAIT_S = 2.0  # how long an offer waits for a session it closes (a never-connected one closes in ms)


def network_of(ip: str) -> str:
    """``net:<prefix>/<len>``: the IPv4 /24 or IPv6 /64 of ``ip`` (an IPv4-mapped IPv6 address counts as IPv4);
    something that is no IP address (``unknown``) is a network of its own."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return f"net:{ip}"
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    prefix = 24 if addr.version == 4 else 64
    shift = addr.max_prefixlen - prefix
    return f"net:{type(addr)((int(addr) >> shift) << shift)}/{prefix}"


def origin_keys(client: str, peer: str | None) -> tuple[str, ...]:
    """What a pending session counts against: its credential, its IP (``ip:...``, the same key as an IP
    credential) and its network. ``peer`` defaults to the address of an ``ip:...`` credential."""
    if peer is None and client.startswith("ip:"):
        peer = client[3:]
    if peer:
        with contextlib.suppress(ValueError):
            peer = str(ipaddress.ip_address(peer))
    keys = [client] if client else []
    if peer:
        keys += [f"ip:{peer}", network_of(peer)]
    return tuple(dict.fromkeys(keys))


class SessionRegistry:
    def __init__(self, max_sessions: int, metrics: Metrics, *, connect_grace_s: float = 5.0,
                 max_pending_per_client: int = 4, max_pending_per_network: int = 8, max_pending: int = 16,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock`` is the clock of the sessions' ``started_at`` (``time.monotonic``)."""
        self.max_sessions = max_sessions
        self.metrics = metrics
        self.connect_grace_s = connect_grace_s
        self.max_pending_per_client = max_pending_per_client
        self.max_pending_per_network = max_pending_per_network
        self.max_pending = max_pending
        self.clock = clock
        self.active: dict[str, Session] = {}
        self.recent: OrderedDict[str, Session] = OrderedDict()
        self.total = 0
        self.evicted = 0  # pending sessions closed to make room
        self._origins: dict[str, tuple[str, ...]] = {}  # session id -> what it counts against while pending
        self._evicting: set[str] = set()
        self._closing: set[asyncio.Task] = set()
        self.drain_retry_after_s: float | None = None  # set while draining (rtc_agent.server.draining)

    # --- draining ---

    @property
    def draining(self) -> bool:
        """The server is draining: every new session is refused (503 ``server_draining``)."""
        return self.drain_retry_after_s is not None

    def start_draining(self, retry_after_s: float) -> None:
        """Refuse every new session from now on (their clients retry after ``retry_after_s``, elsewhere)."""
        self.drain_retry_after_s = max(1.0, float(retry_after_s))

    def _refuse_while_draining(self) -> None:
        if self.drain_retry_after_s is not None:
            raise AtCapacity("this server is shutting down and takes no new sessions; retry on another server or "
                             "once it is back", code="server_draining", retry_after=self.drain_retry_after_s)

    # --- admission ---

    @property
    def hard_ceiling(self) -> int:
        """Session objects at most, whatever their state: every slot and a full pending pool."""
        return self.max_sessions + self.max_pending

    def counted(self) -> int:
        """Sessions that count against ``max_sessions`` now: the connected ones that are not ending."""
        return sum(1 for s in self.active.values()
                   if s.connected_at is not None and s.state not in ("closing", "closed"))

    def pending(self) -> list[Session]:
        """Not-yet-connected sessions that are not ending (the pending pool)."""
        return [s for s in self.active.values() if s.connected_at is None and s.state not in ("closing", "closed")
                and s.id not in self._evicting]

    def _counts(self, sessions: Iterable[Session]) -> Counter[str]:
        counts: Counter[str] = Counter()
        for session in sessions:
            counts.update(self._origins.get(session.id) or origin_keys(session.client, None))
        return counts

    def pending_for(self, client: str) -> int:
        """Pending sessions that count against ``client`` (a credential, ``ip:...`` or ``net:...``)."""
        return self._counts(self.pending())[client] if client else 0

    def _busy(self, message: str) -> AtCapacity:
        return AtCapacity(message, code="too_many_sessions", retry_after=RETRY_AFTER_S)

    def _admit(self, client: str, peer: str | None, *, pending: bool) -> Session | None:
        """Raise :class:`AtCapacity` when a new session may not start; else the pending session to close first
        to make room for it (``None``: there is room)."""
        if self.counted() >= self.max_sessions or (len(self.active) >= self.hard_ceiling and not pending):
            raise self._busy(f"the server is at its limit of {self.max_sessions} sessions; retry later")
        if not pending:
            return None
        waiting = self.pending()
        counts = self._counts(waiting)
        for key in origin_keys(client, peer):
            network = key.startswith("net:")
            limit = self.max_pending_per_network if network else self.max_pending_per_client
            if counts[key] >= limit:
                who = "this network" if network else ("this address" if key.startswith("ip:") and key != client
                                                      else "this client")
                raise AtCapacity(f"{who} already has {limit} sessions that are not connected yet; connect or end "
                                 "them first", code="too_many_pending_sessions", status=429,
                                 retry_after=RETRY_AFTER_S)
        if len(waiting) < self.max_pending and len(self.active) < self.hard_ceiling:
            return None
        victim = self._victim(waiting, counts)
        if victim is None:
            raise self._busy(f"{len(waiting)} sessions are waiting to connect, none for longer than "
                             f"{self.connect_grace_s:g} s; retry later")
        return victim

    def _victim(self, waiting: list[Session], counts: Counter[str]) -> Session | None:
        """The pending session to close to make room: past the grace, of the network or credential holding the
        most pending sessions, the oldest."""
        now = self.clock()
        old = [s for s in waiting if now - s.started_at >= self.connect_grace_s]
        if not old:
            return None

        def rank(session: Session) -> tuple[int, float]:
            keys = self._origins.get(session.id) or origin_keys(session.client, None)
            return max((counts[k] for k in keys), default=0), now - session.started_at

        return max(old, key=rank)

    def check_capacity(self, client: str = "", *, peer: str | None = None, pending: bool = True) -> None:
        """Raise :class:`AtCapacity` (503, or 429 for the pending caps) when a new session of ``client`` from
        ``peer`` (its IP; the address of an ``ip:...`` client by default) may not start. ``pending``: it starts
        not connected (a WebRTC offer); ``False`` for one connected at once (a WebSocket), which needs a slot
        but no room in the pending pool. Closes nothing: where :meth:`start` would make room, this passes.
        While draining: 503 ``server_draining``."""
        self._refuse_while_draining()
        self._admit(client, peer, pending=pending)

    def add(self, session: Session, *, client: str | None = None, peer: str | None = None,
            on_admit: Callable[[], None] | None = None) -> None:
        """Register a new session (checks capacity again, so no await may come between the check and this).
        ``client`` (see the module docstring) is stored on the session; ``peer`` is its IP. ``on_admit`` runs
        once the session is admitted, before it is registered (raising there refuses it). Unlike :meth:`start`,
        this makes no room: a full pending pool refuses a pending session."""
        if client is not None:
            session.client = client
        if self._admit(session.client, peer, pending=session.connected_at is None) is not None:
            raise self._busy(f"{self.max_pending} sessions are waiting to connect; retry later")
        self._register(session, peer, on_admit)

    def _register(self, session: Session, peer: str | None, on_admit: Callable[[], None] | None) -> None:
        if on_admit is not None:
            on_admit()
        self.active[session.id] = session
        self._origins[session.id] = origin_keys(session.client, peer)
        self.total += 1
        self.metrics.sessions_total.labels(app=session.app_name).inc()
        self.metrics.sessions_active.labels(app=session.app_name).inc()

    async def start(self, session: Session, offer_sdp: str, *, client: str, peer: str | None = None,
                    on_admit: Callable[[], None] | None = None) -> str:
        """Admit ``session`` for ``client`` from ``peer`` (closing a pending session to make room where the
        module docstring says so), run ``on_admit`` (e.g. use the client token: no await between the final
        check, ``on_admit`` and the registration), and accept its offer; the answer SDP. A failed set-up
        closes the session (which frees its slot whatever goes wrong) and re-raises."""
        session.client = client
        self._refuse_while_draining()
        for _ in range(EVICT_ATTEMPTS):
            victim = self._admit(client, peer, pending=True)
            if victim is None:
                break
            await self._evict(victim)
        else:
            if self._admit(client, peer, pending=True) is not None:
                raise self._busy("no room could be made for this session; retry later")
        self._register(session, peer, on_admit)
        try:
            return await session.accept(offer_sdp)
        except BaseException:
            await session.close("setup_failed")
            raise

    async def _evict(self, victim: Session) -> None:
        """Close a pending session to make room, and wait (briefly) until it is gone."""
        self._evicting.add(victim.id)
        self.evicted += 1
        log.info("session %s (%s) closed to make room: not connected after %.1f s", victim.id,
                 victim.client or "-", self.clock() - victim.started_at)
        task = asyncio.ensure_future(victim.close(EVICTED_REASON))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        await asyncio.wait({task}, timeout=EVICT_WAIT_S)  # the close goes on if this request is cancelled

    # --- lookup and end ---

    def closed(self, session: Session) -> None:
        """Move an ended session to the recent list (the session calls this when it has closed)."""
        self._evicting.discard(session.id)
        self._origins.pop(session.id, None)
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
