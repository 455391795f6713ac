"""``AccessControl`` and the route rules: every HTTP request is checked against them, before its handler runs, by
the access middleware (:mod:`rtc_agent.auth.middleware`).

Order: Host (DNS rebinding) → Origin (foreign pages; CORS preflights answered here; the page cookie only from
a trusted origin, see :mod:`rtc_agent.auth.origin`) → the route's rule: who may call it (an API key, a client
token, a page sign-in, a session's own token, or anyone while the server is open) and which rate limit it spends.
A route under ``/v1/`` without a rule needs an API key, so a new route is closed until it says otherwise.

Who a principal is for rate limits and token quotas (``Principal.client``): ``key:<id>`` for an API key, the
minter's name for a client token it minted, ``link:<digest prefix>`` for a room join link (so its holders share
one budget, from however many addresses), ``ip:<address>`` for a page sign-in and open mode. The address is the
client's (:func:`client_ip`, through ``trusted_proxies``: :mod:`rtc_agent.auth.client_address`), not the proxy's.

Open mode (no API keys) serves only local clients (loopback, no proxy between: a request a loopback proxy passed on
is not local) unless ``insecure_open`` is set; anyone else gets 403 ``open_mode_local_only``.

Session routes (``/v1/sessions/{id}`` and its exports) answer a request without a valid credential with the same
401 whether the session exists or not; only an API key learns that an id is unknown (404).

Credentials arrive as ``Authorization: Bearer <value>`` (on a WebSocket upgrade also as the subprotocol
``openai-insecure-api-key.<value>``, which browsers can set); page sign-ins as the ``rtc_agent_page`` cookie
(``HttpOnly``, ``SameSite=Strict``). The principal is left on the request as ``request[PRINCIPAL]``. An ``ek_``
value (an OpenAI Realtime client secret) that is not live is refused even in open mode.

Tokens, sign-ins and rate-limit budgets live in the server's state store (:mod:`rtc_agent.state`, given to
:class:`AccessControl`), so every check here is awaited: the store may be an SQLite file or a Redis server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from rtc_agent.auth.client_address import NO_PROXIES, TrustedProxies, client_address
from rtc_agent.auth.origin import OriginPolicy
from rtc_agent.auth.rate_limit import RateLimiter
from rtc_agent.auth.secrets import ApiKeys, same_secret, secret_hash
from rtc_agent.auth.tokens import ALL_KINDS, ClientToken, TokenStore
from rtc_agent.config import Settings
from rtc_agent.errors import AgentError, Forbidden, NotFound, RateLimited, Unauthorized
from rtc_agent.metrics import Metrics
from rtc_agent.state import MemoryStore, StateStore
from rtc_agent.tasks import cancel_and_wait

log = logging.getLogger(__name__)

PAGE_COOKIE = "rtc_agent_page"

API_KEY, CLIENT_TOKEN, PAGE, OPEN = "api_key", "client_token", "page", "open"
REALTIME_TOKEN_APP = "realtime"  # the ``app`` of OpenAI Realtime client secrets in the token store
ROOM_JOIN_APP = "room_join"  # the ``app`` of call-room join tokens (rtc_agent.server.room_links), never a session
CLIENT_SECRET_PREFIX = "ek_"  # OpenAI Realtime client secrets (ephemeral keys)
WS_KEY_PROTOCOL = "openai-insecure-api-key."  # a key offered as a WebSocket subprotocol (browsers)
CROSS_SITE_FETCH = frozenset({"same-site", "cross-site"})  # Sec-Fetch-Site values of another origin's request
LINK_ID_CHARS = 16  # hex digits of a join link's digest that name it (``link:...``) for its budget


@dataclass(frozen=True)
class Principal:
    """Who made a request. ``client`` names it for rate limits and per-client caps (never a secret)."""

    kind: str
    client: str
    token: ClientToken | None = None


@dataclass(frozen=True)
class Rule:
    """Who may call a route: ``allow`` kinds of principal, or the session's own token (``session``)."""

    allow: frozenset[str] = frozenset()
    session: bool = False
    rate: str | None = None  # the rate limit it spends
    consume: bool = False  # a client token is used up by this call
    apps: frozenset[str] = field(default_factory=frozenset)  # client tokens of these apps only (empty: any)


def _rule(*allow: str, **kw: Any) -> Rule:
    return Rule(allow=frozenset(allow), **kw)


# (method, route pattern) -> rule. Pages, static files and /health are public; /v1 routes are listed here.
RULES: dict[tuple[str, str], Rule] = {
    # A room join token (``rj_``) mints client tokens for its own room's call only (rtc_agent.server.room_links).
    ("POST", "/v1/tokens"): _rule(API_KEY, PAGE, OPEN, CLIENT_TOKEN, rate="tokens", apps=frozenset({ROOM_JOIN_APP})),
    ("GET", "/v1/ice-servers"): _rule(API_KEY, CLIENT_TOKEN, PAGE, OPEN),
    # The session route uses its client token up itself, once the offer and config are valid.
    ("POST", "/v1/sessions"): _rule(API_KEY, CLIENT_TOKEN, OPEN, rate="sessions"),
    ("GET", "/v1/sessions"): _rule(API_KEY),
    ("GET", "/v1/sessions/{session_id}"): Rule(session=True),
    ("PATCH", "/v1/sessions/{session_id}"): Rule(session=True),
    ("DELETE", "/v1/sessions/{session_id}"): Rule(session=True),
    ("GET", r"/v1/sessions/{session_id}/captions.{fmt}"): Rule(session=True),
    ("GET", "/v1/sessions/{session_id}/ice-servers"): Rule(session=True),  # fresh TURN credentials mid-session
    ("POST", "/v1/translate/stream"): _rule(API_KEY, CLIENT_TOKEN, OPEN, rate="uploads", consume=True,
                                            apps=frozenset({"interpret"})),
    ("POST", "/v1/rooms"): _rule(API_KEY, PAGE, OPEN, rate="tokens"),
    ("GET", r"/v1/rooms/{room}/transcript.{fmt}"): _rule(API_KEY, PAGE, OPEN, CLIENT_TOKEN,
                                                         apps=frozenset({ROOM_JOIN_APP})),
    # who is in a room now (names only), for the call page's pre-join screen: the same readers as its transcript
    ("GET", "/v1/rooms/{room}"): _rule(API_KEY, PAGE, OPEN, CLIENT_TOKEN, apps=frozenset({ROOM_JOIN_APP})),
    ("GET", "/metrics"): _rule(API_KEY, OPEN),
    # OpenAI Realtime (rtc_agent.realtime): an ``ek_`` client secret opens exactly one connection or call
    ("POST", "/v1/realtime/client_secrets"): _rule(API_KEY, PAGE, OPEN, rate="tokens"),
    ("GET", "/v1/realtime"): _rule(API_KEY, CLIENT_TOKEN, OPEN, rate="sessions", consume=True,
                                   apps=frozenset({REALTIME_TOKEN_APP})),
    ("POST", "/v1/realtime/calls"): _rule(API_KEY, CLIENT_TOKEN, OPEN, rate="sessions", consume=False,
                                          apps=frozenset({REALTIME_TOKEN_APP})),
    ("POST", "/v1/realtime/calls/{call_id}/hangup"): _rule(API_KEY, OPEN),
}
PUBLIC_PREFIXES = ("/static/",)
PUBLIC_PATHS = frozenset({"/health", "/favicon.ico"})


class AccessControl:
    """The server's keys, tokens, policy and rate limits (one per app). Tokens, sign-ins and budgets are kept in
    ``store`` (the server's state store; by default one in memory). The caller closes the store."""

    def __init__(self, settings: Settings, find_session: Callable[[str], Any] | None = None,
                 metrics: Metrics | None = None, store: StateStore | None = None) -> None:
        self.settings = settings
        self.find_session = find_session  # session id -> session (raises NotFound); set by the server
        self.keys = ApiKeys(settings.api_keys)
        self.store = store if store is not None else MemoryStore()
        self.tokens = TokenStore(settings.max_client_tokens, settings.max_tokens_per_credential, store=self.store)
        self.sweep_interval_s = float(getattr(settings, "state_sweep_s", 30.0))
        self._stats: tuple[dict[str, int], int] = ({}, 0)  # the token gauges, as last read from the store
        if metrics is not None:
            metrics.before_render(self.export_metrics)
        self.policy = OriginPolicy(settings)
        self.proxies = TrustedProxies(settings.trusted_proxies, settings.trusted_proxy_header)
        logins = settings.rate_logins_per_minute
        self.limits = {
            "sessions": RateLimiter(settings.rate_sessions_per_minute, store=self.store, name="sessions"),
            "uploads": RateLimiter(settings.rate_uploads_per_minute, store=self.store, name="uploads"),
            "tokens": RateLimiter(settings.rate_tokens_per_minute, store=self.store, name="tokens"),
            "logins": RateLimiter(logins, burst=max(3, logins // 2), store=self.store, name="logins"),
        }

    def install(self, app: web.Application) -> AccessControl:
        """Run the periodic sweep of expired tokens while ``app`` runs (started and stopped with it)."""
        app.cleanup_ctx.append(self._sweeping)
        return self

    async def _sweeping(self, _app: web.Application) -> AsyncIterator[None]:
        task = asyncio.get_running_loop().create_task(self.sweep_forever(), name="token-sweep")
        yield
        await cancel_and_wait(task)

    async def sweep_forever(self) -> None:
        """Drop the state store's expired entries every ``sweep_interval_s`` seconds (``state_sweep_s``), until
        cancelled. A store that fails once (a Redis server restarting) is tried again at the next turn."""
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                await self.tokens.sweep()
                await self.refresh_stats()
            except AgentError as exc:
                log.warning("state sweep failed: %s", exc)

    async def refresh_stats(self) -> None:
        """Read the token gauges from the store (before ``/metrics`` is rendered, and after each sweep)."""
        self._stats = await self.tokens.stats()

    def export_metrics(self, metrics: Metrics) -> None:
        """Set the token store's gauges (called when ``/metrics`` is rendered) from :meth:`refresh_stats`."""
        counts, most_held = self._stats
        for kind in ALL_KINDS:
            metrics.tokens_live.labels(kind=kind).set(counts.get(kind, 0))
        metrics.tokens_limit.set(self.tokens.limit)
        metrics.tokens_per_credential_limit.set(self.tokens.per_client)
        metrics.tokens_most_held.set(most_held)

    @property
    def open(self) -> bool:
        """No API keys: anyone may create sessions (allowed only on loopback or with ``insecure_open``)."""
        return not self.keys

    async def spend(self, bucket: str, client: str) -> None:
        wait = await self.limits[bucket].take(client)
        if wait is not None:
            raise RateLimited(f"too many requests ({bucket}); retry in {wait:.0f} s", retry_after=max(1.0, wait))

    async def use_token(self, request: web.Request) -> ClientToken:
        """Use up the request's client token (atomic in the store: of two requests with one token, on any server
        sharing it, one gets 401)."""
        token = await self.tokens.consume(bearer_token(request) or "")
        if token is None:
            raise Unauthorized("the client token was used already or has expired", code="invalid_credentials")
        return token

    @contextlib.asynccontextmanager
    async def token_claim(self, request: web.Request) -> AsyncIterator[Callable[[], None]]:
        """Use the request's client token up now (401 if it is not live any more) and yield the ``on_admit``
        callback for :meth:`SessionRegistry.start`: if the body raises before that callback ran (the session was
        refused for capacity, or the offer failed before it was admitted) the token is put back, so a refused
        offer spends nothing; once it ran, the token stays used."""
        token = await self.use_token(request)
        admitted = False

        def on_admit() -> None:
            nonlocal admitted
            admitted = True

        try:
            yield on_admit
        except BaseException:
            if not admitted:
                with contextlib.suppress(AgentError):  # the refusal is what the client hears
                    await self.tokens.restore(bearer_token(request) or "", token)
            raise

    async def signed_in(self, request: web.Request) -> bool:
        """Whether the request's page cookie is a live sign-in (read once per request: ``request[SIGNED_IN]``)."""
        if SIGNED_IN not in request:
            cookie = request.cookies.get(PAGE_COOKIE)
            request[SIGNED_IN] = bool(cookie) and await self.tokens.signed_in(cookie or "")
        return request[SIGNED_IN]

    async def principal(self, request: web.Request) -> Principal | None:
        """The strongest credential the request carries, or the open principal, or None."""
        bearer = bearer_token(request)
        ip = client_ip(request)
        if bearer:
            key_id = self.keys.match(bearer)
            if key_id is not None:
                return Principal(API_KEY, f"key:{key_id}")
            token = await self.tokens.peek(bearer)
            if token is not None and token.app == ROOM_JOIN_APP:  # its holders share the link's budget
                return Principal(CLIENT_TOKEN, "link:" + secret_hash(bearer)[:LINK_ID_CHARS], token)
            if token is not None:
                return Principal(CLIENT_TOKEN, token.client or f"ip:{ip}", token)
            if bearer.startswith(CLIENT_SECRET_PREFIX):
                return None  # a client secret that is wrong, expired or used up: refused even when open
        cookie = request.cookies.get(PAGE_COOKIE)
        if cookie and self.cookie_allowed(request) and await self.signed_in(request):
            return Principal(PAGE, f"ip:{ip}")
        if self.open and (self.settings.insecure_open or client_address(request, self.proxies).local):
            return Principal(OPEN, f"ip:{ip}")
        return None

    def cookie_allowed(self, request: web.Request) -> bool:
        """Whether the page cookie may authorise this request: it comes from a trusted origin, or (no Origin) the
        browser does not mark it as another site's (``Sec-Fetch-Site``)."""
        origin = request.headers.get("Origin")
        if origin is None:
            return request.headers.get("Sec-Fetch-Site", "").lower() not in CROSS_SITE_FETCH
        return self.policy.trusted(origin, request.headers.get("Host"), request.scheme)

    async def authorize(self, request: web.Request, rule: Rule) -> Principal:
        principal = await self.principal(request)
        if principal is None or principal.kind not in rule.allow:
            if bearer_token(request) or request.cookies.get(PAGE_COOKIE):
                raise Unauthorized("the credential is not valid for this request (wrong, expired or used up)",
                                   code="invalid_credentials")
            if self.open and OPEN in rule.allow:  # open, but this client is not on this machine
                raise Forbidden("this server runs without API keys and serves only clients on its own machine; "
                                "this request came through a proxy or from elsewhere: set api_keys (or "
                                "insecure_open for a trusted network)", code="open_mode_local_only")
            raise Unauthorized("this request needs an API key or a client token (Authorization: Bearer ...)",
                               code="missing_credentials")
        if principal.kind == CLIENT_TOKEN and principal.token is not None:
            if rule.apps and principal.token.app not in rule.apps:
                raise Forbidden(f"this client token is for the {principal.token.app!r} app",
                                code="token_scope")
            if rule.consume:
                await self.use_token(request)
        if rule.rate is not None and FORWARDED_BY_NODE not in request:  # a forwarding node spent it already
            await self.spend(rule.rate, principal.client)
        return principal


AUTH = web.AppKey("auth", AccessControl)
PRINCIPAL = web.RequestKey("principal", Principal)
SIGNED_IN = web.RequestKey("signed_in", bool)  # whether the page cookie is a live sign-in (see signed_in)
#: the id of the node that forwarded this request, once its signature checked (rtc_agent.server.node_link): that
#: node authorised the client and spent its rate budget; the client's credential is still checked here
FORWARDED_BY_NODE = web.RequestKey("forwarded_by_node", str)


def bearer_token(request: web.Request) -> str | None:
    """``Authorization: Bearer <value>``; for a WebSocket upgrade without that header, a key offered as the
    subprotocol ``openai-insecure-api-key.<value>`` (how OpenAI Realtime browser clients send it)."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if request.headers.get("Upgrade", "").lower() == "websocket":
        for protocol in request.headers.get("Sec-WebSocket-Protocol", "").split(","):
            protocol = protocol.strip()
            if protocol.startswith(WS_KEY_PROTOCOL) and len(protocol) > len(WS_KEY_PROTOCOL):
                return protocol[len(WS_KEY_PROTOCOL):]
    return None


def client_ip(request: web.Request) -> str:
    """The client's address: the peer's, or (when the peer is one of ``trusted_proxies``) the one its forwarding
    header names, or the one a signed forward from another node carries (see
    :mod:`rtc_agent.auth.client_address`). Every per-client limit and cap keys on this."""
    control = request.app.get(AUTH)
    return client_address(request, control.proxies if control is not None else NO_PROXIES).ip


def request_is_https(request: web.Request) -> bool:
    """Whether the client reached us over HTTPS: this server's own TLS, or a trusted proxy that terminated TLS and
    says so (``X-Forwarded-Proto: https``, or ``Forwarded: proto=https``; see
    :meth:`~rtc_agent.auth.client_address.TrustedProxies.https`). Cookies set on such a request are ``Secure``."""
    if request.secure:
        return True
    control = request.app.get(AUTH)
    return control is not None and control.proxies.https(request.remote, request.headers)


def client_network(ip: str) -> str:
    """``net:<prefix>`` of an address's network (IPv4 /24, IPv6 /64): what one party can easily rotate within."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return f"net:{ip}"
    prefix = 24 if address.version == 4 else 64
    return f"net:{ipaddress.ip_network(f'{address}/{prefix}', strict=False)}"


NO_SESSION_DIGEST = secret_hash("no session")  # compared against when the id is unknown: the same work either way


def authorize_session(control: AccessControl, request: web.Request, session_id: str) -> Principal:
    """Allow an API key (an unknown id then gets 404) or the session's own token (``session.token_hash``).

    Anything else gets 401, the same status, code and message whether the session exists or not, so a caller
    without its token cannot tell."""
    if control.find_session is None:
        raise AgentError("session lookup is not configured")
    bearer = bearer_token(request)
    if not bearer:
        raise Unauthorized("this session's token is required (Authorization: Bearer <session_token>)",
                           code="missing_credentials")
    key_id = control.keys.match(bearer)
    if key_id is not None:
        control.find_session(session_id)  # raises NotFound (404) for an unknown id
        return Principal(API_KEY, f"key:{key_id}")
    try:
        session = control.find_session(session_id)
    except NotFound:
        session = None
    digest = getattr(session, "token_hash", "") or NO_SESSION_DIGEST
    if same_secret(bearer, digest) and session is not None and digest != NO_SESSION_DIGEST:
        return Principal("session", f"session:{session.id}")
    raise Unauthorized("the credential is not valid for this session (wrong, expired or not this session's token)",
                       code="invalid_credentials")
