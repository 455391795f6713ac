"""Short-lived credentials minted by the server: client tokens (``POST /v1/tokens``), OpenAI Realtime client secrets,
room join links, and page sign-ins.

A client token lets a page (or any client an API-key holder trusts) create exactly one session of one app,
optionally with a fixed config, before it expires. It also names the session id that session will get, so the
TURN username handed out with it can name the session. A page sign-in is the opaque value of the page cookie:
it authorises minting client tokens from the pages the server serves. All are kept as digests only, in the
server's state store (:mod:`rtc_agent.state`): with the embedded SQLite store they outlive a restart, with Redis
every server sharing it honours them.

Two bounds keep the store and fairness in check, both as leases of the state store (a slot per live entry, held
until the entry expires or is used):

- ``limit`` live entries in all (``max_client_tokens``): past it, minting gets 503 ``too_many_tokens``;
- ``per_client`` live entries per minting credential (``max_tokens_per_credential``, at most ``limit``): the
  ``client`` a mint names (an API key, a join link, a sign-in, an IP or a network). Past it that credential gets
  429 ``token_quota_exceeded`` with ``Retry-After`` (when its first entry expires) while the others still mint,
  so one holder cannot fill the store for everyone. A mint with no client (``""``) counts in the store's bound
  only: callers name the minting credential.

Expired entries are gone for every read at once; :meth:`TokenStore.sweep`, which the access control runs
periodically (see :meth:`rtc_agent.auth.access.AccessControl.install`), frees their space.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rtc_agent.auth.secrets import new_secret, secret_hash
from rtc_agent.errors import AgentError, RateLimited
from rtc_agent.state import MemoryStore, StateStore

# The kind of entry a token value's prefix makes (the label of the rtc_agent_tokens_live gauge).
KINDS = {"ct_": "client_token", "ek_": "client_secret", "rj_": "room_link"}
SIGN_IN = "sign_in"
ALL_KINDS = (*KINDS.values(), SIGN_IN)
TOKEN_KEY, PAGE_KEY = "tok:", "page:"  # + digest: the entry
ALL_SLOTS, CLIENT_SLOTS = "tokens:live", "tokens:by:"  # leases: every live entry; + client: its entries


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


def _slot(kind: str, digest: str, client: str) -> str:
    """The owner name of an entry's slot in :data:`ALL_SLOTS` (what the gauges count by kind and client)."""
    return f"{kind} {digest} {client}"


class TokenStore:
    """Client tokens and page sign-ins, by digest, with expiry, a bound on live entries and a quota per minter,
    kept in a :class:`~rtc_agent.state.StateStore` (by default one in memory with ``clock``)."""

    def __init__(self, limit: int, per_client: int | None = None, *, store: StateStore | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.limit = limit
        self.per_client = min(limit, per_client if per_client is not None else limit)
        self.store = store if store is not None else MemoryStore(clock=clock or time.time)
        self._clock = clock or getattr(self.store, "clock", time.time)

    # --- bookkeeping ------------------------------------------------------------------------------------------

    async def _claim(self, kind: str, digest: str, client: str, ttl_s: float) -> None:
        """Hold the entry's slots: 503 when the whole store is full, 429 past the client's quota."""
        if await self.store.acquire(ALL_SLOTS, _slot(kind, digest, client), ttl_s, slots=self.limit):
            raise AgentError("too many live tokens; retry later", code="too_many_tokens", status=503,
                             retry_after=10)
        if not client:  # unattributed: only the store's bound applies
            return
        wait = await self.store.acquire(CLIENT_SLOTS + client, digest, ttl_s, slots=self.per_client)
        if wait:
            await self.store.release(ALL_SLOTS, _slot(kind, digest, client))
            raise RateLimited(f"this credential already holds {self.per_client} unexpired tokens, client secrets, "
                              "room links or sign-ins (max_tokens_per_credential); retry when one expires or is used",
                              code="token_quota_exceeded", retry_after=max(1.0, wait))

    async def _free(self, kind: str, digest: str, client: str) -> None:
        await self.store.release(ALL_SLOTS, _slot(kind, digest, client))
        if client:
            await self.store.release(CLIENT_SLOTS + client, digest)

    async def _keep(self, key: str, digest: str, entry: ClientToken | SignIn, ttl_s: float) -> None:
        await self._claim(entry.kind, digest, entry.client, ttl_s)
        try:
            await self.store.put(key + digest, json.dumps(dataclasses.asdict(entry)), ttl_s)
        except BaseException:
            await self._free(entry.kind, digest, entry.client)
            raise

    async def sweep(self) -> int:
        """Free the space of every expired entry (and whatever else in the store expired); how many went."""
        return await self.store.sweep()

    # --- client tokens ----------------------------------------------------------------------------------------

    async def mint(self, app: str, config: dict[str, Any], ttl_s: float, *, client: str,
                   scope: dict[str, Any] | None = None, prefix: str = "ct_") -> tuple[str, ClientToken]:
        """A new single-use client token ``(value, record)`` minted by ``client`` (whose quota it counts in);
        ``prefix`` starts its value (``ek_`` for OpenAI Realtime client secrets, ``rj_`` for room join links)."""
        now = self._clock()
        value = new_secret(prefix)
        token = ClientToken(app=app, config=dict(config), expires_at=now + ttl_s,
                            session_id="sess_" + secrets.token_hex(8), client=client, scope=dict(scope or {}),
                            kind=KINDS.get(prefix, "client_token"))
        await self._keep(TOKEN_KEY, secret_hash(value), token, ttl_s)
        return value, token

    async def peek(self, value: str) -> ClientToken | None:
        """The live token with this value, left unused (ICE servers may be fetched with it first)."""
        if not value:
            return None
        stored = await self.store.get(TOKEN_KEY + secret_hash(value))
        return ClientToken(**json.loads(stored)) if stored is not None else None

    async def consume(self, value: str) -> ClientToken | None:
        """The live token with this value, used up: of any number of calls with one value (on any server sharing
        the store) exactly one gets it, the others None."""
        if not value:
            return None
        digest = secret_hash(value)
        stored = await self.store.consume(TOKEN_KEY + digest)
        if stored is None:
            return None
        token = ClientToken(**json.loads(stored))
        await self._free(token.kind, digest, token.client)
        return token

    async def restore(self, value: str, token: ClientToken) -> None:
        """Put a consumed token back, unchanged, for what is left of its life (a session refused for capacity
        after it was claimed spends nothing); a token that expired meanwhile stays gone."""
        left = token.expires_at - self._clock()
        if left > 0:
            await self._keep(TOKEN_KEY, secret_hash(value), token, left)

    # --- page sign-ins ----------------------------------------------------------------------------------------

    async def sign_in(self, ttl_s: float, *, client: str) -> str:
        """A new page sign-in (the cookie value) for ``client`` (the signing-in network, whose quota it counts in)."""
        now = self._clock()
        value = secrets.token_urlsafe(32)
        await self._keep(PAGE_KEY, secret_hash(value), SignIn(now + ttl_s, client), ttl_s)
        return value

    async def signed_in(self, value: str) -> bool:
        return bool(value) and await self.store.get(PAGE_KEY + secret_hash(value)) is not None

    async def sign_out(self, value: str) -> None:
        digest = secret_hash(value)
        stored = await self.store.consume(PAGE_KEY + digest)
        if stored is not None:
            page = SignIn(**json.loads(stored))
            await self._free(page.kind, digest, page.client)

    # --- what /metrics shows ----------------------------------------------------------------------------------

    async def stats(self) -> tuple[dict[str, int], int]:
        """``(live entries by kind (every kind of ALL_KINDS, zeros included), the most one named client holds)``,
        from one read of the store."""
        counts = dict.fromkeys(ALL_KINDS, 0)
        held: Counter[str] = Counter()
        for slot in await self.store.holders(ALL_SLOTS):
            kind, _, client = slot.split(" ", 2)
            counts[kind] = counts.get(kind, 0) + 1
            if client:
                held[client] += 1
        return counts, max(held.values(), default=0)

    async def live_counts(self) -> dict[str, int]:
        """Unexpired entries by kind (every kind of :data:`ALL_KINDS`, zeros included)."""
        return (await self.stats())[0]

    async def most_held(self) -> int:
        """The most unexpired entries one named client holds."""
        return (await self.stats())[1]

    async def count(self) -> int:
        """Unexpired entries in all."""
        return len(await self.store.holders(ALL_SLOTS))
