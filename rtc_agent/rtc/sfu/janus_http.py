"""Janus's HTTP (REST) transport (``http://`` / ``https://``, e.g. ``http://127.0.0.1:8088/janus``).

Requests are POSTs to the endpoint their ids name: the server root (``create``), ``<root>/<session>`` (``attach``,
``keepalive``, ``destroy``) or ``<root>/<session>/<handle>`` (``message``, ``trickle``, ``hangup``, ``detach``);
the POST's response body is the request's answer (``success``, ``error`` or ``ack``) and goes to ``deliver`` like
any message. Asynchronous events come from a long poll, started once the session exists: ``GET <root>/<session>``
(``maxev`` events at most per answer, ``apisecret`` in the query when set), which Janus holds until it has an
event or for 30 s (then it answers ``keepalive``), asked again at once.

Every wait is bounded: a POST by ``request_timeout_s``, a poll by ``poll_timeout_s`` (keep it above Janus's 30 s hold);
a body above ``MAX_MESSAGE_BYTES`` is an error. The poll stops when the transport closes, when Janus says the
session timed out, and when a poll fails (Janus unreachable, not answering in time, the session unknown: HTTP
404, any other refusal): that last case is ``lost`` with the reason, and closing then still tries to destroy the
session (Janus may hold it after a network blip). Failed POSTs raise
:class:`~rtc_agent.rtc.sfu.janus_transport.JanusError` (``janus_code`` is the HTTP status when Janus refused with
one and no Janus error body). The API secret never appears in a log or error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import aiohttp

from rtc_agent.redact import redact_url
from rtc_agent.rtc.sfu.janus_transport import MAX_MESSAGE_BYTES, JanusError, JanusTransport
from rtc_agent.tasks import cancel_and_wait

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 45.0  # Janus holds a long poll for 30 s, then answers "keepalive": keep this above that
MAX_EVENTS = 10  # events per poll answer (maxev)
ABANDON_S = 2.0  # the best-effort destroy of a session whose poll failed


async def _read_json(resp: aiohttp.ClientResponse) -> Any:
    """The body of ``resp`` as JSON (None: empty); JanusError when it is too big or not JSON."""
    body = bytearray()
    while chunk := await resp.content.read(64 * 1024):
        body += chunk
        if len(body) > MAX_MESSAGE_BYTES:
            raise JanusError(f"the SFU sent a message above {MAX_MESSAGE_BYTES} bytes")
    if not body.strip():
        return None
    try:
        return json.loads(body)
    except ValueError:
        raise JanusError("the SFU answered something that is not JSON") from None


class HttpTransport(JanusTransport):
    """The Janus REST API at ``url`` (the server root, ``.../janus``), events by long poll (see the module)."""

    def __init__(self, *args: Any, poll_timeout_s: float = POLL_TIMEOUT_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.url = self.url.rstrip("/")
        self.poll_timeout_s = poll_timeout_s
        self.session_id: int | None = None
        self.polls = 0  # long polls answered (for tests and stats)
        self._http: aiohttp.ClientSession | None = None
        self._poll: asyncio.Task | None = None
        self._closing = False
        self._lost = False

    @property
    def open_now(self) -> bool:
        return self._http is not None and not self._closing and not self._lost

    async def open(self) -> None:
        self._http = aiohttp.ClientSession()

    @property
    def polling(self) -> bool:
        """Whether the long poll runs."""
        return self._poll is not None and not self._poll.done()

    def _endpoint(self, message: dict[str, Any]) -> str:
        session, handle = message.get("session_id"), message.get("handle_id")
        if session is None:
            return self.url
        return f"{self.url}/{int(session)}" + (f"/{int(handle)}" if handle is not None else "")

    async def send(self, message: dict[str, Any]) -> None:
        if self._http is None or not self.open_now:
            raise JanusError("the connection to the SFU is closed")
        kind = message.get("janus")
        try:
            async with self._http.post(self._endpoint(message), json=message,
                                       timeout=aiohttp.ClientTimeout(total=self.request_timeout_s)) as resp:
                reply = await _read_json(resp)
                status = resp.status
        except TimeoutError:
            raise JanusError(f"the SFU did not answer {kind!r} in time", code="sfu_timeout") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise JanusError(f"cannot reach the SFU at {redact_url(self.url)}: {exc or type(exc).__name__}") from None
        if isinstance(reply, dict) and reply.get("janus"):
            self.deliver(reply)
            return
        if status != 200:
            raise JanusError(f"the SFU refused {kind!r} with HTTP {status}", janus_code=status)
        raise JanusError(f"the SFU answered {kind!r} without a Janus message")

    def session_started(self, session_id: int) -> None:
        self.session_id = session_id
        if self._poll is None and self.open_now:
            self._poll = asyncio.get_running_loop().create_task(self._long_poll(), name="janus-http-poll")

    async def _long_poll(self) -> None:
        assert self._http is not None and self.session_id is not None
        url = f"{self.url}/{self.session_id}"
        params = {"maxev": str(MAX_EVENTS), **({"apisecret": self.api_secret} if self.api_secret else {})}
        timeout = aiohttp.ClientTimeout(total=self.poll_timeout_s)
        reason = None
        while reason is None and not self._closing:
            try:
                async with self._http.get(url, params=params, timeout=timeout) as resp:
                    body = await _read_json(resp) if resp.status == 200 else None
                    status = resp.status
            except TimeoutError:
                reason = f"the SFU's event poll got no answer in {timeout.total:g} s"
                break
            except (aiohttp.ClientError, OSError) as exc:
                reason = f"the SFU's event poll failed: {exc or type(exc).__name__}"
                break
            except JanusError as exc:
                reason = f"the SFU's event poll failed: {exc.message}"
                break
            if status == 404:
                reason = "the SFU no longer knows our session (HTTP 404)"
                break
            if status != 200:
                reason = f"the SFU refused the event poll with HTTP {status}"
                break
            self.polls += 1
            for message in body if isinstance(body, list) else [body]:
                if not isinstance(message, dict) or self._closing:
                    continue
                self.deliver(message)
                if message.get("janus") == "timeout":
                    return  # the session is gone: the client hears it from the message itself
        if reason is not None and not self._closing and not self._lost:
            self._lost = True
            self.lost(reason)

    async def close(self) -> None:
        """Also, after a failed poll, a best-effort ``destroy`` of the session (bounded by ``ABANDON_S``): Janus
        may still hold it after a network blip, with its handles in their rooms until its session timeout."""
        if self._closing:
            return
        self._closing = True
        with contextlib.suppress(Exception):
            await cancel_and_wait(self._poll)
        if self._lost and self._http is not None and self.session_id is not None:
            message = {"janus": "destroy", "transaction": "abandon", "session_id": self.session_id,
                       **({"apisecret": self.api_secret} if self.api_secret else {})}
            with contextlib.suppress(Exception):
                async with self._http.post(self._endpoint(message), json=message,
                                           timeout=aiohttp.ClientTimeout(total=ABANDON_S)):
                    pass
        if self._http is not None:
            with contextlib.suppress(Exception):
                await self._http.close()
