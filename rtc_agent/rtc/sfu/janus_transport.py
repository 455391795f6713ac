"""What a Janus API transport does for :class:`~rtc_agent.rtc.sfu.janus_client.JanusClient`, and its one error type.

A transport carries Janus API messages (JSON objects) both ways for one Janus session and knows nothing of
transactions, handles or plugins. The client gives it two callbacks: ``deliver(message)`` for every message that
comes from Janus (a request's ``success`` / ``error`` / ``ack`` as much as an asynchronous ``event``), and
``lost(reason)``, called at most once when the transport stops for a reason other than :meth:`JanusTransport.close`
(Janus went away, the session is gone). Its lifecycle: :meth:`JanusTransport.open` (reach Janus; no session yet),
any number of :meth:`JanusTransport.send`, :meth:`JanusTransport.session_started` once the ``create`` request
succeeded (the HTTP transport starts its long poll then), :meth:`JanusTransport.close` (idempotent, never raises).

The two transports: :class:`~rtc_agent.rtc.sfu.janus_ws.WebSocketTransport` (``ws://`` / ``wss://``) and
:class:`~rtc_agent.rtc.sfu.janus_http.HttpTransport` (``http://`` / ``https://``, Janus's REST API with a long
poll for events).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from rtc_agent.errors import AgentError

MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # SDPs and participant lists; a bigger message ends the connection

Deliver = Callable[[dict[str, Any]], None]
"""Called with every message from Janus; must not block."""
Lost = Callable[[str], None]
"""Called once with the reason when the transport stops by itself."""


class JanusError(AgentError):
    """The SFU refused a request, did not answer in time, or the connection to it is gone (HTTP 502)."""

    type = "server_error"
    code = "sfu_error"
    status = 502

    def __init__(self, message: str, *, janus_code: int | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.janus_code = janus_code


class JanusTransport(abc.ABC):
    """One Janus session's way to Janus at ``url`` (see the module). ``request_timeout_s`` bounds reaching Janus
    and each request's delivery."""

    def __init__(self, url: str, *, api_secret: str, request_timeout_s: float, deliver: Deliver,
                 lost: Lost) -> None:
        self.url = url
        self.api_secret = api_secret
        self.request_timeout_s = request_timeout_s
        self.deliver = deliver
        self.lost = lost

    @property
    @abc.abstractmethod
    def open_now(self) -> bool:
        """Whether messages can be sent now (opened, not closed, not lost)."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Reach Janus; raises :class:`JanusError` (the transport is then closed)."""

    @abc.abstractmethod
    async def send(self, message: dict[str, Any]) -> None:
        """Send one complete request (``transaction``, ``session_id``, ``handle_id`` and ``apisecret`` already in
        it); its answer comes through ``deliver``. Raises :class:`JanusError` when it cannot be sent."""

    @abc.abstractmethod
    def session_started(self, session_id: int) -> None:
        """The session ``session_id`` exists (``create`` succeeded): events for it may come from now on."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop: nothing more is delivered, ``lost`` is not called. Idempotent, never raises."""
