"""A client of the Janus WebRTC server's API, over its WebSocket or its HTTP (REST, long poll) transport.

One :class:`JanusClient` is one Janus session: :meth:`JanusClient.connect` reaches Janus and creates the session,
a keepalive goes every ``keepalive_s`` (Janus drops a session silent for 60 s), and :meth:`JanusClient.close`
destroys the session and ends the transport. Plugin handles (:class:`JanusHandle`, from :meth:`JanusClient.attach`)
send plugin messages and receive the plugin's asynchronous events.

The URL's scheme picks the transport (:func:`transport_class`): ``ws://`` / ``wss://`` Janus's WebSocket API
(:mod:`rtc_agent.rtc.sfu.janus_ws`, e.g. ``ws://127.0.0.1:8188``), ``http://`` / ``https://`` its REST API
(:mod:`rtc_agent.rtc.sfu.janus_http`, e.g. ``http://127.0.0.1:8088/janus``; events by a long poll bounded by
``poll_timeout_s``). Everything above this module is the same for both.

Requests are matched to replies by ``transaction``. A request is answered by ``success`` (with the plugin's
synchronous reply), ``error``, or ``ack`` followed later by an ``event`` with the same transaction (the plugin's
asynchronous reply, e.g. a VideoRoom ``join``): :meth:`JanusHandle.message` with ``wait_event=True`` waits for
that event. Events without a pending transaction (``publishers``, ``unpublished``, ``leaving``, ``webrtcup``,
``hangup``, ``media``, ``detached``) go to the handle's ``on_event`` callback, which must not block.

Every failure is one exception type, :class:`JanusError`: a Janus ``error`` reply (``janus_code`` is Janus's
numeric code), a plugin error (``error_code`` in the plugin data), a timeout, a lost connection. The API secret
(``apisecret`` in every request) is never logged nor put in an error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtc_agent.redact import redact_url
from rtc_agent.rtc.sfu.janus_http import POLL_TIMEOUT_S, HttpTransport
from rtc_agent.rtc.sfu.janus_transport import JanusError, JanusTransport
from rtc_agent.rtc.sfu.janus_ws import WebSocketTransport
from rtc_agent.tasks import cancel_and_wait

__all__ = ["JanusClient", "JanusError", "JanusHandle", "PluginReply", "transport_class"]

log = logging.getLogger(__name__)

KEEPALIVE_S = 25.0  # Janus's default session timeout is 60 s
REQUEST_TIMEOUT_S = 10.0
SCHEMES: dict[str, type[JanusTransport]] = {"ws": WebSocketTransport, "wss": WebSocketTransport,
                                            "http": HttpTransport, "https": HttpTransport}


def transport_class(url: str) -> type[JanusTransport]:
    """The transport of a Janus API ``url`` by its scheme; JanusError (``sfu_unavailable``) for any other."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise JanusError(f"the SFU URL must be a Janus API URL (ws://, wss://, http:// or https://), got "
                         f"{redact_url(url)!r}", code="sfu_unavailable")
    return SCHEMES[scheme]


EventCallback = Callable[[dict[str, Any], dict[str, Any] | None, dict[str, Any]], None]
"""``(plugin data, jsep or None, whole message)`` of one asynchronous event; must not block."""


@dataclass
class PluginReply:
    """A plugin's answer to one message: its ``data`` and, for offers/answers, the ``jsep``."""

    data: dict[str, Any]
    jsep: dict[str, Any] | None = None


def _plugin_reply(message: dict[str, Any]) -> PluginReply:
    """The plugin data of ``message``; raises :class:`JanusError` for a plugin error."""
    data = (message.get("plugindata") or {}).get("data") or {}
    if "error_code" in data or "error" in data:
        raise JanusError(f"the SFU plugin refused the request: {data.get('error', 'unknown error')}",
                         janus_code=data.get("error_code"))
    return PluginReply(data=data, jsep=message.get("jsep"))


class JanusHandle:
    """One attached plugin handle of a :class:`JanusClient` session. ``on_event`` gets its async events."""

    def __init__(self, client: JanusClient, handle_id: int, plugin: str) -> None:
        self.client = client
        self.id = handle_id
        self.plugin = plugin
        self.on_event: EventCallback | None = None
        self.detached = False

    async def message(self, body: dict[str, Any], jsep: dict[str, Any] | None = None, *,
                      wait_event: bool = False, timeout: float | None = None) -> PluginReply:
        """Send a plugin message; the synchronous reply, or with ``wait_event`` the asynchronous event that
        answers it. Raises :class:`JanusError`."""
        request: dict[str, Any] = {"janus": "message", "handle_id": self.id, "body": body}
        if jsep is not None:
            request["jsep"] = jsep
        reply = await self.client.request(request, wait_event=wait_event, timeout=timeout)
        return _plugin_reply(reply)

    async def trickle(self, candidate: dict[str, Any] | None) -> None:
        """One ICE candidate (``None``: gathering completed)."""
        body = {"candidate": candidate} if candidate is not None else {"candidate": {"completed": True}}
        await self.client.request({"janus": "trickle", "handle_id": self.id, **body})

    async def hangup(self) -> None:
        """Close this handle's PeerConnection on the Janus side (the handle stays attached)."""
        await self.client.request({"janus": "hangup", "handle_id": self.id})

    async def detach(self) -> None:
        """Detach the handle (idempotent; never raises once the connection is gone)."""
        if self.detached:
            return
        self.detached = True
        self.client.handles.pop(self.id, None)
        if self.client.connected:
            with contextlib.suppress(JanusError):
                await self.client.request({"janus": "detach", "handle_id": self.id})

    def deliver(self, message: dict[str, Any]) -> None:
        if self.on_event is None:
            return
        data = (message.get("plugindata") or {}).get("data") or {}
        try:
            self.on_event(data, message.get("jsep"), message)
        except Exception:
            log.exception("janus handle %s: event callback failed", self.id)


class JanusClient:
    """One Janus session at ``url`` (``ws://``, ``wss://``, ``http://`` or ``https://``: see the module).

    ``api_secret`` goes into every request when set. ``on_lost`` is called once if the connection or the session
    ends without :meth:`close` (Janus restarted, network gone); every pending request then fails.
    """

    def __init__(self, url: str, *, api_secret: str = "", keepalive_s: float = KEEPALIVE_S,
                 request_timeout_s: float = REQUEST_TIMEOUT_S, poll_timeout_s: float = POLL_TIMEOUT_S,
                 on_lost: Callable[[str], None] | None = None) -> None:
        kind = transport_class(url)
        self.url = url
        self.api_secret = api_secret
        self.keepalive_s = keepalive_s
        self.request_timeout_s = request_timeout_s
        self.on_lost = on_lost
        self.session_id: int | None = None
        self.handles: dict[int, JanusHandle] = {}
        extra = {"poll_timeout_s": poll_timeout_s} if kind is HttpTransport else {}
        self.transport: JanusTransport = kind(url, api_secret=api_secret, request_timeout_s=request_timeout_s,
                                              deliver=self._dispatch, lost=self._lose, **extra)
        self._pending: dict[str, tuple[asyncio.Future[dict[str, Any]], bool]] = {}
        self._txn = itertools.count(1)
        self._prefix = secrets.token_hex(4)
        self._keepalive: asyncio.Task | None = None
        self._closing = False
        self.lost_reason: str | None = None

    @property
    def connected(self) -> bool:
        return self.transport.open_now and self.lost_reason is None

    async def connect(self) -> JanusClient:
        """Reach Janus and create the Janus session. Raises :class:`JanusError` (the client is then closed)."""
        try:
            await self.transport.open()
            reply = await self.request({"janus": "create"}, in_session=False)
        except JanusError:
            await self.close()
            raise
        self.session_id = int(reply["data"]["id"])
        self.transport.session_started(self.session_id)
        self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive(), name="janus-keepalive")
        return self

    async def attach(self, plugin: str) -> JanusHandle:
        """A new handle on ``plugin`` (e.g. ``janus.plugin.videoroom``)."""
        reply = await self.request({"janus": "attach", "plugin": plugin})
        handle = JanusHandle(self, int(reply["data"]["id"]), plugin)
        self.handles[handle.id] = handle
        return handle

    async def request(self, message: dict[str, Any], *, wait_event: bool = False, in_session: bool = True,
                      timeout: float | None = None) -> dict[str, Any]:
        """Send ``message`` and return Janus's answer (``success``, ``ack`` or, with ``wait_event``, the
        ``event`` with the same transaction). Raises :class:`JanusError` on an ``error`` reply, a timeout or a
        lost connection."""
        if not self.connected:
            raise JanusError(f"not connected to the SFU ({self.lost_reason or 'closed'})")
        transaction = f"{self._prefix}-{next(self._txn)}"
        out = {**message, "transaction": transaction}
        if in_session:
            out["session_id"] = self.session_id
        if self.api_secret:
            out["apisecret"] = self.api_secret
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[transaction] = (future, wait_event)
        try:
            await self.transport.send(out)
            reply = await asyncio.wait_for(future, timeout or self.request_timeout_s)
        except TimeoutError:
            raise JanusError(f"the SFU did not answer {message.get('janus')!r} in time", code="sfu_timeout") from None
        finally:
            self._pending.pop(transaction, None)
        if reply.get("janus") == "error":
            error = reply.get("error") or {}
            raise JanusError(f"the SFU refused {message.get('janus')!r}: {error.get('reason', 'unknown error')}",
                             janus_code=error.get("code"))
        return reply

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("janus")
        pending = self._pending.get(str(message.get("transaction", "")))
        if pending is not None and not pending[0].done():
            future, wait_event = pending
            if kind == "ack" and wait_event:
                return  # the plugin's answer comes as an event with this transaction
            if kind in ("ack", "success", "error", "event"):
                future.set_result(message)
                return
        if kind == "timeout" and message.get("session_id") == self.session_id:
            self._lose("the SFU timed our session out")
            return
        handle = self.handles.get(int(message.get("sender") or 0))
        if handle is not None:
            if kind == "detached":
                handle.detached = True
                self.handles.pop(handle.id, None)
            handle.deliver(message)

    async def _keep_alive(self) -> None:
        while self.connected:
            await asyncio.sleep(self.keepalive_s)
            try:
                await self.request({"janus": "keepalive"})
            except JanusError as exc:
                log.warning("janus keepalive failed: %s", exc)

    def _lose(self, reason: str) -> None:
        if self.lost_reason is not None:
            return
        self.lost_reason = reason
        for future, _ in list(self._pending.values()):
            if not future.done():
                future.set_exception(JanusError(reason))
        if not self._closing:
            log.warning("janus: %s", reason)
            if self.on_lost is not None:
                try:
                    self.on_lost(reason)
                except Exception:
                    log.exception("janus on_lost callback failed")

    async def close(self) -> None:
        """Destroy the Janus session (its handles with it) and close the connection; idempotent, never raises."""
        if self._closing:
            return
        self._closing = True
        if self.connected and self.session_id is not None:
            with contextlib.suppress(JanusError):
                await self.request({"janus": "destroy"}, timeout=min(self.request_timeout_s, 3.0))
        self.lost_reason = self.lost_reason or "closed"
        await cancel_and_wait(self._keepalive)
        await self.transport.close()
        for future, _ in list(self._pending.values()):
            if not future.done():
                future.set_exception(JanusError("the SFU client closed"))
        self.handles.clear()
