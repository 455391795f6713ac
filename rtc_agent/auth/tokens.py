"""Short-lived credentials minted by the server: client tokens (``POST /v1/tokens``) and page sign-ins.

A client token lets a page (or any client an API-key holder trusts) create exactly one session of one app,
optionally with a fixed config, before it expires. It also names the session id that session will get, so the
TURN username handed out with it can name the session. A page sign-in is the opaque value of the page cookie:
it authorises minting client tokens from the pages the server serves. Both are kept as digests only, and the
store is bounded: past ``limit`` live entries, minting is refused (a flood cannot grow memory).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from rtc_agent.auth.secrets import new_secret, secret_hash
from rtc_agent.errors import AgentError


@dataclass
class ClientToken:
    """One client token. ``value`` exists only in the mint response; the store keeps the digest."""

    app: str
    config: dict[str, Any]
    expires_at: float
    session_id: str
    client: str
    scope: dict[str, Any] = field(default_factory=dict)  # extra limits (e.g. a room) for later checks

    def public(self, value: str) -> dict[str, Any]:
        """The ``POST /v1/tokens`` response body."""
        return {"value": value, "expires_at": int(self.expires_at), "app": self.app, "config": self.config}


class TokenStore:
    """Client tokens and page sign-ins, by digest, with expiry and a bound on live entries."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._tokens: dict[str, ClientToken] = {}
        self._pages: dict[str, float] = {}

    def _prune(self, now: float) -> None:
        for digest in [d for d, t in self._tokens.items() if t.expires_at <= now]:
            del self._tokens[digest]
        for digest in [d for d, exp in self._pages.items() if exp <= now]:
            del self._pages[digest]

    def _check_room(self, now: float) -> None:
        if len(self._tokens) + len(self._pages) >= self.limit:
            self._prune(now)
        if len(self._tokens) + len(self._pages) >= self.limit:
            raise AgentError("too many live tokens; retry later", code="too_many_tokens", status=503,
                             retry_after=10)

    def mint(self, app: str, config: dict[str, Any], ttl_s: float, *, client: str,
             scope: dict[str, Any] | None = None, prefix: str = "ct_") -> tuple[str, ClientToken]:
        """A new single-use client token ``(value, record)``; ``prefix`` starts its value (``ek_`` for OpenAI
        Realtime client secrets)."""
        now = time.time()
        self._check_room(now)
        value = new_secret(prefix)
        token = ClientToken(app=app, config=dict(config), expires_at=now + ttl_s,
                            session_id="sess_" + secrets.token_hex(8), client=client, scope=dict(scope or {}))
        self._tokens[secret_hash(value)] = token
        return value, token

    def peek(self, value: str) -> ClientToken | None:
        """The live token with this value, left unused (ICE servers may be fetched with it first)."""
        token = self._tokens.get(secret_hash(value))
        if token is None or token.expires_at <= time.time():
            return None
        return token

    def consume(self, value: str) -> ClientToken | None:
        """The live token with this value, used up: a second call with the same value returns None."""
        token = self._tokens.pop(secret_hash(value), None)
        if token is None or token.expires_at <= time.time():
            return None
        return token

    def sign_in(self, ttl_s: float) -> str:
        """A new page sign-in (the cookie value)."""
        now = time.time()
        self._check_room(now)
        value = secrets.token_urlsafe(32)
        self._pages[secret_hash(value)] = now + ttl_s
        return value

    def signed_in(self, value: str) -> bool:
        expires = self._pages.get(secret_hash(value))
        return expires is not None and expires > time.time()

    def sign_out(self, value: str) -> None:
        self._pages.pop(secret_hash(value), None)

    def __len__(self) -> int:
        return len(self._tokens) + len(self._pages)
