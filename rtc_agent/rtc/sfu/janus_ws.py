"""Janus's WebSocket transport (``ws://`` / ``wss://``, subprotocol ``janus-protocol``): one socket, one session.

Every message both ways is one JSON text frame; a reader task hands each one from Janus to ``deliver``. The socket
closing by itself (Janus stopped, the network went) is ``lost``. Frames above ``MAX_MESSAGE_BYTES`` end the
connection (aiohttp's limit); frames that are not JSON objects are logged and ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aiohttp

from rtc_agent.redact import redact_url
from rtc_agent.rtc.sfu.janus_transport import MAX_MESSAGE_BYTES, JanusError, JanusTransport
from rtc_agent.tasks import cancel_and_wait

log = logging.getLogger(__name__)

SUBPROTOCOL = "janus-protocol"
READER_STOP_S = 2.0


class WebSocketTransport(JanusTransport):
    """The Janus API over one WebSocket at ``url``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task | None = None
        self._closing = False

    @property
    def open_now(self) -> bool:
        return self._ws is not None and not self._ws.closed and not self._closing

    async def open(self) -> None:
        self._http = aiohttp.ClientSession()
        try:
            self._ws = await asyncio.wait_for(
                self._http.ws_connect(self.url, protocols=(SUBPROTOCOL,), max_msg_size=MAX_MESSAGE_BYTES,
                                      autoping=True),
                self.request_timeout_s)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            await self._http.close()
            self._http = None
            raise JanusError(f"cannot reach the SFU at {redact_url(self.url)}: {exc or type(exc).__name__}") from None
        self._reader = asyncio.get_running_loop().create_task(self._read(), name="janus-ws-reader")

    async def send(self, message: dict[str, Any]) -> None:
        if self._ws is None or not self.open_now:
            raise JanusError("the connection to the SFU is closed")
        try:
            await self._ws.send_json(message)
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
            raise JanusError(f"the connection to the SFU failed: {exc}") from None

    def session_started(self, session_id: int) -> None:
        """Nothing to start: the reader delivers every message of the socket already."""

    async def _read(self) -> None:
        ws = self._ws
        assert ws is not None
        try:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                try:
                    message = msg.json()
                except ValueError:
                    log.warning("janus: a message that is not JSON was ignored")
                    continue
                if isinstance(message, dict):
                    self.deliver(message)
        finally:
            if not self._closing:
                self.lost("the connection to the SFU closed")

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._reader), READER_STOP_S)
            await cancel_and_wait(self._reader)
        if self._http is not None:
            await self._http.close()
