"""Short-lived credentials minted by the server: client tokens (``POST /v1/tokens``), OpenAI Realtime client secrets,
room join links, and page sign-ins.

A client token lets a page (or any client an API-key holder trusts) create exactly one session of one app,
optionally with a fixed config, before it expires. It also names the session id that session will get, so the
TURN username handed out with it can name the session. A page sign-in is the opaque value of the page cookie:
it authorises minting client tokens from the pages the server serves. All are kept as digests only.

Two bounds keep memory and fairness in check:

- ``limit`` live entries in all (``max_client_tokens``): past it, minting gets 503 ``too_many_tokens``;
- ``per_client`` live entries per minting credential (``max_tokens_per_credential``, at most ``limit``): the
  ``client`` a mint names (an API key, a join link, a sign-in, an IP or a network). Past it that credential gets
  429 ``token_quota_exceeded`` with ``Retry-After`` (when its first entry expires) while the others still mint,
  so one holder cannot fill the store for everyone. A mint with no client (``""``) counts in the store's bound
  only: callers name the minting credential.

Expired entries are dropped when a bound is reached and by :meth:`TokenStore.sweep`, which the access control
runs periodically (see :meth:`rtc_agent.auth.access.AccessControl.install`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rtc_agent.auth.secrets import new_secret, secret_hash
from rtc_agent.errors import AgentError, RateLimited

# The kind of entry a token value's prefix makes (the label of the rtc_agent_tokens_live gauge).
KINDS = {"ct_": "client_token", "ek_": "client_secret", "rj_": "room_link"}
SIGN_IN = "sign_in"
ALL_KINDS = (*KINDS.values(), SIGN_IN)


@dataclass
class ClientToken:
    """One client token. ``value`` exists only in the mint response; the store keeps the digest. ``client`` is
    the credential that minted it (its quota counts this token)."""

    app: str
    config: dict[str, Any]
    expires_at: float
    session_id: str
    client: str
    scope: dict[str, Any] = field(default_factory=dict)  # extra limits (e.g. a room) for later checks
    kind: str = "client_token"

    def public(self, value: str) -> dict[str, Any]:
        """The ``POST /v1/tokens`` response body."""
        return {"value": value, "expires_at": int(self.expires_at), "app": self.app, "config": self.config}


@dataclass
class SignIn:
    """One page sign-in: when it expires and the client (network) that signed in."""

    expires_at: float
    client: str
    kind: str = SIGN_IN


class TokenStore:
    """Client tokens and page sign-ins, by digest, with expiry, a bound on live entries and a quota per minter."""

    def __init__(self, limit: int, per_client: int | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.limit = limit
        self.per_client = min(limit, per_client if per_client is not None else limit)
        self._clock = clock
        self._tokens: dict[str, ClientToken] = {}
        self._pages: dict[str, SignIn] = {}
        self._owned: dict[str, set[str]] = {}  # client -> digests of its live tokens and sign-ins

    # --- bookkeeping ------------------------------------------------------------------------------------------

    def _add(self, digest: str, entry: ClientToken | SignIn) -> None:
        if isinstance(entry, SignIn):
            self._pages[digest] = entry
        else:
            self._tokens[digest] = entry
        self._owned.setdefault(entry.client, set()).add(digest)

    def _drop(self, digest: str) -> ClientToken | SignIn | None:
        entry: ClientToken | SignIn | None = self._tokens.pop(digest, None) or self._pages.pop(digest, None)
        if entry is not None:
            owned = self._owned.get(entry.client)
            if owned is not None:
                owned.discard(digest)
                if not owned:
                    del self._owned[entry.client]
        return entry

    def _entry(self, digest: str) -> ClientToken | SignIn | None:
        return self._tokens.get(digest) or self._pages.get(digest)

    def sweep(self, now: float | None = None) -> int:
        """Drop every expired entry; how many were dropped."""
        now = self._clock() if now is None else now
        expired = [d for d, t in self._tokens.items() if t.expires_at <= now]
        expired += [d for d, p in self._pages.items() if p.expires_at <= now]
        for digest in expired:
            self._drop(digest)
        return len(expired)

    def _sweep_client(self, client: str, now: float) -> None:
        for digest in list(self._owned.get(client, ())):
            entry = self._entry(digest)
            if entry is not None and entry.expires_at <= now:
                self._drop(digest)

    def _check_room(self, client: str, now: float) -> None:
        """Refuse a new entry for ``client``: 503 when the whole store is full, 429 past the client's quota."""
        if len(self) >= self.limit:
            self.sweep(now)
        if len(self) >= self.limit:
            raise AgentError("too many live tokens; retry later", code="too_many_tokens", status=503,
                             retry_after=10)
        if not client:  # unattributed: only the store's bound applies
            return
        if len(self._owned.get(client, ())) >= self.per_client:
            self._sweep_client(client, now)
        owned = self._owned.get(client, ())
        if len(owned) >= self.per_client:
            first = min(e.expires_at for e in map(self._entry, owned) if e is not None)
            raise RateLimited(f"this credential already holds {self.per_client} unexpired tokens, client secrets, "
                              "room links or sign-ins (max_tokens_per_credential); retry when one expires or is used",
                              code="token_quota_exceeded", retry_after=max(1.0, first - now))

    # --- client tokens ----------------------------------------------------------------------------------------

    def mint(self, app: str, config: dict[str, Any], ttl_s: float, *, client: str,
             scope: dict[str, Any] | None = None, prefix: str = "ct_") -> tuple[str, ClientToken]:
        """A new single-use client token ``(value, record)`` minted by ``client`` (whose quota it counts in);
        ``prefix`` starts its value (``ek_`` for OpenAI Realtime client secrets, ``rj_`` for room join links)."""
        now = self._clock()
        self._check_room(client, now)
        value = new_secret(prefix)
        token = ClientToken(app=app, config=dict(config), expires_at=now + ttl_s,
                            session_id="sess_" + secrets.token_hex(8), client=client, scope=dict(scope or {}),
                            kind=KINDS.get(prefix, "client_token"))
        self._add(secret_hash(value), token)
        return value, token

    def peek(self, value: str) -> ClientToken | None:
        """The live token with this value, left unused (ICE servers may be fetched with it first)."""
        token = self._tokens.get(secret_hash(value))
        if token is None or token.expires_at <= self._clock():
            return None
        return token

    def consume(self, value: str) -> ClientToken | None:
        """The live token with this value, used up: a second call with the same value returns None."""
        digest = secret_hash(value)
        token = self._tokens.get(digest)
        if token is None:
            return None
        self._drop(digest)
        return token if token.expires_at > self._clock() else None

    # --- page sign-ins ----------------------------------------------------------------------------------------

    def sign_in(self, ttl_s: float, *, client: str) -> str:
        """A new page sign-in (the cookie value) for ``client`` (the signing-in network, whose quota it counts in)."""
        now = self._clock()
        self._check_room(client, now)
        value = secrets.token_urlsafe(32)
        self._add(secret_hash(value), SignIn(now + ttl_s, client))
        return value

    def signed_in(self, value: str) -> bool:
        page = self._pages.get(secret_hash(value))
        return page is not None and page.expires_at > self._clock()

    def sign_out(self, value: str) -> None:
        digest = secret_hash(value)
        if digest in self._pages:
            self._drop(digest)

    # --- what /metrics shows ----------------------------------------------------------------------------------

    def live_counts(self) -> dict[str, int]:
        """Unexpired entries by kind (every kind of :data:`ALL_KINDS`, zeros included)."""
        now = self._clock()
        counts = dict.fromkeys(ALL_KINDS, 0)
        for entry in [*self._tokens.values(), *self._pages.values()]:
            if entry.expires_at > now:
                counts[entry.kind] = counts.get(entry.kind, 0) + 1
        return counts

    def most_held(self) -> int:
        """The most entries (expired ones not yet swept included) one named client holds."""
        return max((len(owned) for client, owned in self._owned.items() if client), default=0)

    def __len__(self) -> int:
        return len(self._tokens) + len(self._pages)
