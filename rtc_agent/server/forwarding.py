"""Several nodes, one service: offers for a call room go to the node that hosts it, session requests to the node
that holds the session.

With ``node_url`` set (and a state store every node shares, ``redis://``), a browser may reach any node:

- **Offers** (``POST /v1/sessions`` of the ``call`` app, room ``R``): after the offer passed this node's checks
  (credential, rate limit, config), :func:`offer_elsewhere` asks the room leases
  (:class:`~rtc_agent.apps.call.room_lease.RoomLeases`) who hosts ``R``. If nobody does, this node takes the
  lease and answers itself; if another node does, the offer is forwarded there and its answer returned unchanged
  (:mod:`rtc_agent.server.node_link`), so the participant's media flows to the owner. Offers of the single-user
  apps stay on the node that answered.
- **Owner gone**: when the owner cannot be reached, its lease runs out within ``room_lease_ttl_s`` (nobody renews
  it): the offer waits for that (within ``node_forward_timeout_s``), takes the lease and the room re-forms here.
  Otherwise 503 ``node_unavailable`` + ``Retry-After``.
- **Session requests** (``GET``/``PATCH``/``DELETE /v1/sessions/{id}``, its exports and ICE servers, and ``POST
  /v1/realtime/calls/{id}/hangup``) for a session this node does not have: the session directory in the store
  (``session-node:<id>`` -> node_url, written when a node answers an offer or a Realtime call, kept for
  ``max_session_seconds``) names its node, and the request is forwarded there (:func:`forwarding_middleware`).
- **Presence** (``GET /v1/rooms/{room}``) of a room another node hosts: forwarded to that node, which knows who
  is in it (:func:`presence_elsewhere`).
- **Loop guard**: a forwarded request (signed, see :mod:`~rtc_agent.server.node_link`) is never forwarded again:
  an offer that reaches a node which no longer hosts its room gets 503 ``room_moved`` + ``Retry-After``.
- A room another node took while this one still hosted it (this node stalled past its lease) ends its sessions
  here with ``session.ended {reason: "room_moved"}``, so the pages reconnect to the room's one owner.

Without ``node_url`` nothing is forwarded (every room is hosted here) and requests carrying the forwarding headers
are refused (403), so no client can claim to be a node.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from rtc_agent.apps.call import RoomRegistry
from rtc_agent.apps.call.room_lease import RoomLeases
from rtc_agent.auth.access import FORWARDED_BY_NODE
from rtc_agent.auth.client_address import CLIENT_ADDRESS, ClientAddress, parse_address
from rtc_agent.config import Settings, node_id_of, replica_warnings
from rtc_agent.errors import AgentError, NotFound
from rtc_agent.server.http_errors import read_body
from rtc_agent.server.node_link import FORWARDED_BY, NODE_HEADER, NodeLink, NodeUnavailable
from rtc_agent.server.registry import SessionRegistry
from rtc_agent.state import StateStore
from rtc_agent.tasks import cancel_and_wait

log = logging.getLogger(__name__)

ROOM_APPS = frozenset({"call"})  # apps whose sessions belong to a room, hosted by the room's owner
ROOM_MOVED = "room_moved"  # session.ended reason: another node hosts the room now
DIRECTORY_PREFIX = "session-node:"
NO_LIMIT_TTL_S = 7 * 24 * 3600.0  # how long the directory keeps a session without max_session_seconds
ENDED_KEPT_S = 3600.0  # an ended session stays readable (GET, exports) for a while on its node
# where a session created here lives (its answer's Location): a /v1/sessions session or an OpenAI Realtime call
SESSION_PATH = re.compile(r"^/v1/(?:sessions|realtime/calls)/(?P<id>[^/]+)(/.*)?$")
CREATED_PATHS = frozenset({"/v1/sessions", "/v1/realtime/calls"})
LEASE_END_MARGIN_S = 0.1  # past the owner's lease end, when an offer waits for it


class RoomMoved(AgentError):
    code = "room_moved"
    status = 503


class Forwarder:
    """This node's part in a group of nodes (see the module docstring). ``enabled`` with ``node_url``."""

    def __init__(self, settings: Settings, store: StateStore, registry: SessionRegistry,
                 rooms: RoomRegistry) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry
        self.node_id = node_id_of(settings)
        self.node_url = settings.node_url.rstrip("/")
        self.enabled = bool(self.node_url)
        self.link = NodeLink(self.node_id, settings.node_secret, settings.node_forward_timeout_s)
        self.leases: RoomLeases | None = None
        if self.enabled:
            self.leases = RoomLeases(store, self.node_url, settings.room_lease_ttl_s,
                                     live=lambda: list(rooms.rooms), on_lost=self.room_lost)
            rooms.leases = self.leases
        seconds = float(settings.max_session_seconds) or NO_LIMIT_TTL_S
        self.directory_ttl_s = seconds + ENDED_KEPT_S

    # --- lifecycle -------------------------------------------------------------------------------------------

    async def running(self, _app: web.Application) -> AsyncIterator[None]:
        """``cleanup_ctx``: the node client and the lease renewal while the server runs; leases released after."""
        await self.link.start()
        task = None
        if self.leases is not None:
            task = asyncio.get_running_loop().create_task(self.leases.run(), name="room-leases")
        yield
        if task is not None:
            await cancel_and_wait(task)
        if self.leases is not None:
            await self.leases.release_all()
        await self.link.close()

    def room_lost(self, name: str) -> None:
        """Another node hosts room ``name`` now: its sessions here end (``room_moved``) and reconnect there."""
        for session in list(self.registry.active.values()):
            config = getattr(session, "config", None) or {}
            if getattr(session, "app_name", None) in ROOM_APPS and config.get("room") == name:
                session.close_soon(ROOM_MOVED)

    # --- offers ----------------------------------------------------------------------------------------------

    async def route_offer(self, request: web.Request, app_name: str, config: dict[str, Any],
                          body: bytes) -> web.Response | None:
        """None when this node answers the offer itself; else the owner's answer (see :func:`offer_elsewhere`)."""
        if self.leases is None or app_name not in ROOM_APPS or not isinstance(config.get("room"), str):
            return None
        room = config["room"]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.node_forward_timeout_s
        while True:
            owner = await self.leases.claim(room)
            if owner is None:
                return None
            if FORWARDED_BY_NODE in request:  # the loop guard: the node that sent it thought this one hosts it
                raise RoomMoved(f"room {room!r} moved to another node; offer again", retry_after=1)
            try:
                return await self.link.forward(request, owner, body)
            except NodeUnavailable:
                holder, left = await self.leases.owner(room)
                wait = left + LEASE_END_MARGIN_S if holder == owner else 0.0
                if loop.time() + wait > deadline:
                    raise
                log.warning("room %s: its node %s cannot be reached; taking the room over when its lease ends "
                            "(%.1f s)", room, owner, wait)
                await asyncio.sleep(wait)

    async def room_node(self, room: str) -> str | None:
        """The node_url of the node whose lease on ``room`` is live when it is another node, else None (nobody
        hosts it, or this node does)."""
        if self.leases is None:
            return None
        holder, left = await self.leases.owner(room)
        return holder if holder and holder != self.node_url and left > 0 else None

    # --- session requests ------------------------------------------------------------------------------------

    async def session_node(self, session_id: str) -> str | None:
        """The node_url of the node holding session ``session_id`` when it is another node, else None."""
        try:
            self.registry.get(session_id)
            return None  # here (live or recently ended)
        except NotFound:
            pass
        url = await self.store.get(DIRECTORY_PREFIX + session_id)
        return url if url and url != self.node_url else None

    async def remember(self, response: web.StreamResponse) -> None:
        """A session was created here (its answer): the directory names this node for it."""
        match = SESSION_PATH.match(response.headers.get("Location", ""))
        if match is None:
            return
        response.headers[NODE_HEADER] = self.node_id
        try:
            await self.store.put(DIRECTORY_PREFIX + match["id"], self.node_url, self.directory_ttl_s)
        except AgentError as exc:  # the session works; only requests reaching another node miss it
            log.warning("session %s: the session directory could not be written: %s", match["id"], exc)


FORWARDER = web.AppKey("forwarder", Forwarder)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def install(app: web.Application, settings: Settings, store: StateStore, registry: SessionRegistry,
            rooms: RoomRegistry) -> Forwarder:
    """Make this server's :class:`Forwarder` (``app[FORWARDER]``, used by :func:`forwarding_middleware` and
    :func:`offer_elsewhere`), running with the app."""
    forwarder = app[FORWARDER] = Forwarder(settings, store, registry, rooms)
    app.cleanup_ctx.append(forwarder.running)
    for warning in replica_warnings(settings):
        log.warning("%s", warning)
    if forwarder.enabled:
        log.info("node %s at %s: call rooms leased in the state store for %.1f s", forwarder.node_id,
                 forwarder.node_url, settings.room_lease_ttl_s)
    return forwarder


async def offer_elsewhere(request: web.Request, app_name: str, config: dict[str, Any],
                          body: bytes) -> web.Response | None:
    """For ``POST /v1/sessions`` once the offer's credential and config are checked: None when this node hosts the
    session (a single-user app, a room this node holds or just took, or no replicas), else the answer of the node
    that hosts the room, unchanged (or a 502/503 error when that node cannot answer)."""
    forwarder = request.app.get(FORWARDER)
    if forwarder is None:
        return None
    return await forwarder.route_offer(request, app_name, config, body)


async def presence_elsewhere(request: web.Request, room: str) -> web.Response | None:
    """For ``GET /v1/rooms/{room}`` of a room not live here: the answer of the node that hosts it (503
    ``node_unavailable`` when it cannot be reached), or None when no other node does (or the request was forwarded
    here already)."""
    forwarder = request.app.get(FORWARDER)
    if forwarder is None or FORWARDED_BY_NODE in request:
        return None
    owner = await forwarder.room_node(room)
    return None if owner is None else await forwarder.link.forward(request, owner, b"")


@web.middleware
async def forwarding_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Before the access checks: a signed request from another node is checked (403 otherwise) and carries the
    client's address on; a request for a session another node holds is forwarded there; a session created here
    is written to the directory."""
    forwarder = request.app.get(FORWARDER)
    if forwarder is None:
        return await handler(request)
    if FORWARDED_BY in request.headers:
        node_id, ip = forwarder.link.verify(request)
        request = request.clone(remote=ip)
        request[FORWARDED_BY_NODE] = node_id
        # the address the forwarding node derived (through its trusted_proxies), never re-derived from the client's
        # forwarding headers; that node applied the open-mode rule to the client itself
        address = parse_address(ip)
        request[CLIENT_ADDRESS] = ClientAddress(str(address) if address is not None else ip, ip)
    elif forwarder.enabled and (held := _held_session(request)) is not None:
        owner = await forwarder.session_node(held)
        if owner is not None:
            body = await read_body(request, forwarder.settings.max_body_bytes)
            return await forwarder.link.forward(request, owner, body)
    response = await handler(request)
    if forwarder.enabled and request.method == "POST" and request.path in CREATED_PATHS \
            and response.status == 201 and NODE_HEADER not in response.headers:
        await forwarder.remember(response)
    return response


def _held_session(request: web.Request) -> str | None:
    """The id of the session a request is about (one a node may hold), else None: ``GET``/``PATCH``/``DELETE``
    of a ``/v1/sessions/{session_id}`` route, or the hangup of a Realtime call."""
    info = request.match_info
    if info.http_exception is not None:
        return None
    if request.method in ("GET", "PATCH", "DELETE") and "session_id" in info:
        return info["session_id"]
    if request.method == "POST" and "call_id" in info and request.path.endswith("/hangup"):
        return info["call_id"]
    return None
