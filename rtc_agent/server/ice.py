"""ICE servers for both peers: STUN/TURN from settings, and time-limited TURN credentials.

With ``turn_secret`` set, credentials follow the TURN REST API that coturn's ``use-auth-secret`` expects:
``username = "<expiry unix time>:<user>"`` and ``credential = base64(HMAC-SHA1(secret, username))``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from typing import Any

from aiortc import RTCIceServer

from rtc_agent.config import Settings


def turn_rest_credentials(secret: str, ttl_s: int, user: str = "rtc-agent",
                          now: float | None = None) -> tuple[str, str]:
    """``(username, credential)`` valid for ``ttl_s`` seconds, as coturn's ``use-auth-secret`` checks them."""
    expiry = int((time.time() if now is None else now) + ttl_s)
    username = f"{expiry}:{user}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return username, base64.b64encode(digest).decode()


def ice_servers(settings: Settings, user: str = "rtc-agent") -> list[dict[str, Any]]:
    """ICE servers in the browser's ``RTCIceServer`` shape."""
    servers: list[dict[str, Any]] = []
    if settings.stun_urls:
        servers.append({"urls": list(settings.stun_urls)})
    if settings.turn_urls:
        if settings.turn_secret:
            username, credential = turn_rest_credentials(settings.turn_secret, settings.turn_ttl_s, user)
        else:
            username, credential = settings.turn_username, settings.turn_credential
        turn: dict[str, Any] = {"urls": list(settings.turn_urls)}
        if username:
            turn.update(username=username, credential=credential)
        servers.append(turn)
    return servers


def server_ice_servers(settings: Settings) -> list[RTCIceServer]:
    """The same servers for the server's own peer connections. Empty means host candidates only (aiortc would
    otherwise fall back to a public STUN server)."""
    return [RTCIceServer(urls=s["urls"], username=s.get("username"), credential=s.get("credential"))
            for s in ice_servers(settings, user="rtc-agent-server")]
