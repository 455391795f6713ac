"""ICE servers for both peers: STUN/TURN from settings, and short-lived, per-session TURN credentials.

With ``turn_secret`` set, credentials follow the TURN REST API that coturn's ``use-auth-secret`` checks:
``username = "<expiry unix time>:<name>"`` and ``credential = base64(HMAC-SHA1(secret, username))``.

- ``name`` says whom the credential is for. Callers pass a session or client id (``user=``); without one every
  call makes a fresh random name, ``rtc-<16 hex digits>``, so no two browsers ever share a TURN username (coturn
  logs, quotas, ``user-quota`` and revocation work per name).
- ``expiry`` is now + ``turn_ttl_s`` (default 600 s, allowed 60-86400). coturn refuses a username whose expiry
  has passed when a client authenticates a new allocation; an allocation made in time keeps being refreshed
  (coturn keeps the derived key for its session). So the TTL bounds how long a copied credential can open new
  relays, not how long a call may last; a page that needs a new relay later (an ICE restart, a new mesh peer)
  fetches fresh servers first.

``GET /v1/ice-servers`` answers :func:`ice_servers_response`: the servers, the browsers' transport policy, and,
when the TURN credentials expire, ``ttl_s`` and ``expires_at`` (unix seconds) so a page knows when to refresh
(``static/js/ice-servers.js`` does at 80 % of ``ttl_s``, counted on the page's own clock). A session's holder
refreshes through ``GET /v1/sessions/{id}/ice-servers`` with its session token: its client token is used up by
then, and the credentials keep naming the session.

The secret itself never leaves the server. Who may ``GET /v1/ice-servers`` is the route's business (auth).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from typing import Any

from aiortc import RTCIceServer

from rtc_agent.config import Settings

__all__ = ["MAX_TURN_TTL_S", "MIN_TURN_TTL_S", "REFRESH_AT", "ice_servers", "ice_servers_response", "new_turn_user",
           "server_ice_servers", "turn_rest_credentials", "verify_turn_credentials"]

MIN_TURN_TTL_S = 60
MAX_TURN_TTL_S = 86400
# what may follow "<expiry>:" (no ":" so coturn's separator stays unambiguous; short enough for any log line)
TURN_USER_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
REFRESH_AT = 0.8  # share of ttl_s after which pages fetch fresh credentials (the rest covers slow fetches, skew)


def new_turn_user(prefix: str = "rtc") -> str:
    """A fresh, unguessable TURN user name: ``<prefix>-<16 hex digits>``."""
    return f"{prefix}-{secrets.token_hex(8)}"


def _check_user(user: str) -> str:
    if not isinstance(user, str) or not TURN_USER_RE.fullmatch(user):
        raise ValueError(f"TURN user name must be 1-64 characters of A-Z a-z 0-9 . _ -, got {user!r}")
    return user


def turn_rest_credentials(secret: str, ttl_s: int, user: str | None = None,
                          now: float | None = None) -> tuple[str, str]:
    """``(username, credential)`` valid for ``ttl_s`` seconds from ``now``, as coturn's ``use-auth-secret`` checks
    them. ``user`` names the session or client (see the module docstring); ``None`` makes a fresh random one.

    Raises ``ValueError`` for an empty secret, ``ttl_s < 1`` or a user name outside ``TURN_USER_RE``.
    """
    if not secret:
        raise ValueError("turn_rest_credentials needs the shared secret")
    if int(ttl_s) < 1:
        raise ValueError(f"ttl_s must be at least 1 second, got {ttl_s!r}")
    name = new_turn_user() if user is None else _check_user(user)
    expiry = int((time.time() if now is None else now) + int(ttl_s))
    username = f"{expiry}:{name}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return username, base64.b64encode(digest).decode()


def verify_turn_credentials(secret: str, username: str, credential: str, now: float | None = None) -> bool:
    """What coturn (``use-auth-secret``) decides for ``username``/``credential``: the expiry before the first
    ``:`` is still in the future and the credential is the HMAC-SHA1 of the username under the secret."""
    stamp, sep, name = username.partition(":")
    if not sep or not stamp.isdigit() or not name:
        return False
    if int(stamp) <= (time.time() if now is None else now):
        return False
    expected = base64.b64encode(hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()).decode()
    return hmac.compare_digest(expected, credential)


def ice_servers(settings: Settings, user: str | None = None, now: float | None = None) -> list[dict[str, Any]]:
    """ICE servers in the browser's ``RTCIceServer`` shape. With ``turn_secret``, each call mints its own TURN
    credential for ``user`` (a session or client id; ``None``: a fresh random name) valid ``turn_ttl_s`` seconds.
    Without it, the static ``turn_username``/``turn_credential`` (the same for everyone: avoid outside a LAN)."""
    servers: list[dict[str, Any]] = []
    if settings.stun_urls:
        servers.append({"urls": list(settings.stun_urls)})
    if settings.turn_urls:
        if settings.turn_secret:
            username, credential = turn_rest_credentials(settings.turn_secret, settings.turn_ttl_s, user, now)
        else:
            username, credential = settings.turn_username, settings.turn_credential
        turn: dict[str, Any] = {"urls": list(settings.turn_urls)}
        if username:
            turn.update(username=username, credential=credential)
        servers.append(turn)
    return servers


def ice_servers_response(settings: Settings, user: str | None = None, now: float | None = None) -> dict[str, Any]:
    """The body of ``GET /v1/ice-servers``: ``ice_servers`` (as :func:`ice_servers`), ``ice_transport_policy``,
    ``ttl_s`` and ``expires_at`` (unix seconds; both ``None`` when no credential expires, i.e. without
    ``turn_secret`` or ``turn_urls``) and ``refresh_after_s`` (when a page should fetch fresh ones)."""
    now = time.time() if now is None else now
    expiring = bool(settings.turn_secret and settings.turn_urls)
    ttl = settings.turn_ttl_s if expiring else None
    return {"ice_servers": ice_servers(settings, user=user, now=now),
            "ice_transport_policy": settings.ice_transport_policy,
            "ttl_s": ttl,
            "expires_at": int(now + ttl) if ttl else None,
            "refresh_after_s": int(ttl * REFRESH_AT) if ttl else None}


def server_ice_servers(settings: Settings, user: str | None = None) -> list[RTCIceServer]:
    """The same servers for the server's own peer connection of one session (``user``: its id; ``None``: a fresh
    ``srv-<hex>`` name). Empty means host candidates only (aiortc would otherwise fall back to a public STUN
    server)."""
    return [RTCIceServer(urls=s["urls"], username=s.get("username"), credential=s.get("credential"))
            for s in ice_servers(settings, user=user if user is not None else new_turn_user("srv"))]
