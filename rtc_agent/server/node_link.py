"""Requests from one rtc-agent node to another: signed on the way out, checked on the way in, answered unchanged.

A node forwards a client's request (an offer for a room another node hosts, or a request for a session that lives
there; :mod:`rtc_agent.server.forwarding`) as it came: method, path and query, body, and the client's headers
(``Host``, ``Origin``, ``Authorization``, cookies), so the owner checks the client's credential itself against the
shared state store. It adds four headers:

- ``X-RTC-Agent-Forwarded-By``: the forwarding node's id (the loop guard: a forwarded request is never forwarded
  again);
- ``X-RTC-Agent-Client-IP``: the client's address, as the forwarding node saw it;
- ``X-RTC-Agent-Forwarded-At``: Unix seconds;
- ``X-RTC-Agent-Signature``: HMAC-SHA256 with ``node_secret`` over those three, the method and the path with
  its query.

The receiving node trusts the client address and the rate budget the forwarding node spent only when the
signature checks and the time is within :data:`SIGNATURE_WINDOW_S` of its own clock; anything else carrying
these headers gets 403 ``invalid_node_signature``. The secret itself never travels and is never logged.

The owner's answer is returned as it is (status, body, headers such as ``Location``, ``X-Session-Token``,
``Retry-After``), less the hop-by-hop headers. An owner that cannot be reached is 503 ``node_unavailable``
(+ ``Retry-After``); one that does not answer within ``node_forward_timeout_s`` is 502 ``node_timeout``; a broken
answer is 502 ``node_failed``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Iterable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from rtc_agent.auth.access import client_ip
from rtc_agent.errors import AgentError, Forbidden

log = logging.getLogger(__name__)

FORWARDED_BY = "X-RTC-Agent-Forwarded-By"
FORWARDED_AT = "X-RTC-Agent-Forwarded-At"
CLIENT_IP = "X-RTC-Agent-Client-IP"
SIGNATURE = "X-RTC-Agent-Signature"
NODE_HEADER = "X-RTC-Agent-Node"  # on a created session's answer: the id of the node that hosts it
OWN_HEADERS = frozenset(h.lower() for h in (FORWARDED_BY, FORWARDED_AT, CLIENT_IP, SIGNATURE))
SIGNATURE_WINDOW_S = 30.0  # a signed request older (or newer) than this, by the receiver's clock, is refused
MAX_ANSWER_BYTES = 1024 * 1024  # the most of another node's answer relayed (an SDP answer is a few kB)
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "content-length"})
NOT_SENT = HOP_BY_HOP | OWN_HEADERS | {"accept-encoding"}
NOT_RETURNED = HOP_BY_HOP | {"date", "server", "content-encoding"}


class NodeSignatureError(Forbidden):
    code = "invalid_node_signature"


class NodeUnavailable(AgentError):
    code = "node_unavailable"
    status = 503


class NodeTimeout(AgentError):
    code = "node_timeout"
    status = 502


class NodeFailed(AgentError):
    code = "node_failed"
    status = 502


def signature(secret: str, node_id: str, at: str, method: str, target: str, ip: str) -> str:
    """The hex HMAC-SHA256 of one forwarded request (see the module docstring)."""
    message = "\n".join((node_id, at, method.upper(), target, ip)).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _kept(headers: Iterable[tuple[str, str]], dropped: frozenset[str]) -> CIMultiDict[str]:
    return CIMultiDict((k, v) for k, v in headers if k.lower() not in dropped)


class NodeLink:
    """This node's side of node-to-node requests: ``node_id`` and ``secret`` (``node_secret``) sign and check
    them; ``timeout_s`` bounds one forwarded request. :meth:`start` / :meth:`close` open and close its client."""

    def __init__(self, node_id: str, secret: str, timeout_s: float, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.node_id = node_id
        self._secret = secret
        self.timeout_s = timeout_s
        self._clock = clock
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._http is None:
            self._http = aiohttp.ClientSession(auto_decompress=False,
                                               timeout=aiohttp.ClientTimeout(total=self.timeout_s))

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    # --- the receiving side ---------------------------------------------------------------------------------

    def verify(self, request: web.Request) -> tuple[str, str]:
        """``(forwarding node id, client address)`` of a request carrying :data:`FORWARDED_BY`; raises
        :class:`NodeSignatureError` (403) unless its signature checks with this node's secret, in time."""
        headers = request.headers
        node_id, at, ip = headers.get(FORWARDED_BY, ""), headers.get(FORWARDED_AT, ""), headers.get(CLIENT_IP, "")
        if not self._secret:
            raise NodeSignatureError("this node takes no forwarded requests (no node_secret is set)")
        try:
            age = abs(self._clock() - float(at))
        except ValueError:
            age = float("inf")
        expected = signature(self._secret, node_id, at, request.method, request.path_qs, ip)
        if not (node_id and ip and hmac.compare_digest(expected, headers.get(SIGNATURE, ""))):
            raise NodeSignatureError("the forwarded request's signature does not check (node_secret differs?)")
        if age > SIGNATURE_WINDOW_S:
            raise NodeSignatureError(f"the forwarded request is {age:.0f} s off this node's clock (at most "
                                     f"{SIGNATURE_WINDOW_S:.0f} s; are the nodes' clocks set?)")
        return node_id, ip

    # --- the forwarding side --------------------------------------------------------------------------------

    async def forward(self, request: web.Request, base_url: str, body: bytes) -> web.Response:
        """Send ``request`` (with ``body``, already read) to the node at ``base_url``, signed, and return its
        answer unchanged (see the module docstring for the errors)."""
        if self._http is None:
            raise NodeUnavailable("node-to-node requests are not running (the server is stopping)", retry_after=1)
        target = request.path_qs
        ip = client_ip(request)
        at = str(int(self._clock()))
        headers = _kept(request.headers.items(), NOT_SENT)
        headers.update({FORWARDED_BY: self.node_id, FORWARDED_AT: at, CLIENT_IP: ip, "Accept-Encoding": "identity",
                        SIGNATURE: signature(self._secret, self.node_id, at, request.method, target, ip)})
        url = base_url.rstrip("/") + target
        try:
            async with self._http.request(request.method, url, headers=headers, data=body or None,
                                          allow_redirects=False) as answer:
                data = bytearray()
                async for chunk in answer.content.iter_chunked(64 * 1024):
                    data += chunk
                    if len(data) > MAX_ANSWER_BYTES:
                        raise NodeFailed(f"the node at {base_url} answered more than {MAX_ANSWER_BYTES} bytes")
                return web.Response(status=answer.status, body=bytes(data),
                                    headers=_kept(answer.headers.items(), NOT_RETURNED))
        except aiohttp.ClientConnectorError as exc:
            raise NodeUnavailable(f"the node at {base_url} that hosts this cannot be reached ({exc.os_error}); "
                                  "try again", retry_after=1) from None
        except TimeoutError:
            raise NodeTimeout(f"the node at {base_url} did not answer within {self.timeout_s:g} s "
                              "(node_forward_timeout_s)") from None
        except aiohttp.ClientError as exc:
            raise NodeFailed(f"the node at {base_url} failed to answer: {type(exc).__name__}") from None
