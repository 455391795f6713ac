"""``AccessControl`` and the access middleware: every HTTP request is checked here, before its handler runs.

Order: Host (DNS rebinding) → Origin (foreign pages; CORS preflights answered here; the page cookie only from
a trusted origin, see :mod:`rtc_agent.auth.origin`) → the route's rule: who may call it (an API key, a client
token, a page sign-in, a session's own token, or anyone while the server is open) and which rate limit it spends.
A route under ``/v1/`` without a rule needs an API key, so a new route is closed until it says otherwise.

Who a principal is for rate limits and token quotas (``Principal.client``): ``key:<id>`` for an API key, the
minter's name for a client token it minted, ``link:<digest prefix>`` for a room join link (so its holders share
one budget, from however many addresses), ``ip:<address>`` for a page sign-in and open mode.

Session routes (``/v1/sessions/{id}`` and its exports) answer a request without a valid credential with the same
401 whether the session exists or not; only an API key learns that an id is unknown (404).

Credentials arrive as ``Authorization: Bearer <value>`` (on a WebSocket upgrade also as the subprotocol
``openai-insecure-api-key.<value>``, which browsers can set); page sign-ins as the ``rtc_agent_page`` cookie
(``HttpOnly``, ``SameSite=Strict``). The principal is left on the request as ``request[PRINCIPAL]``. An ``ek_``
value (an OpenAI Realtime client secret) that is not live is refused even in open mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from rtc_agent.auth.origin import OriginPolicy
from rtc_agent.auth.rate_limit import RateLimiter
from rtc_agent.auth.secrets import ApiKeys, same_secret, secret_hash
from rtc_agent.auth.tokens import ClientToken, TokenStore
from rtc_agent.config import Settings
from rtc_agent.errors import AgentError, Forbidden, NotFound, RateLimited, Unauthorized
from rtc_agent.metrics import Metrics

PAGE_COOKIE = "rtc_agent_page"

API_KEY, CLIENT_TOKEN, PAGE, OPEN = "api_key", "client_token", "page", "open"
REALTIME_TOKEN_APP = "realtime"  # the ``app`` of OpenAI Realtime client secrets in the token store
ROOM_JOIN_APP = "room_join"  # the ``app`` of call-room join tokens (rtc_agent.server.room_links), never a session
CLIENT_SECRET_PREFIX = "ek_"  # OpenAI Realtime client secrets (ephemeral keys)
WS_KEY_PROTOCOL = "openai-insecure-api-key."  # a key offered as a WebSocket subprotocol (browsers)
COOKIE_PATHS = frozenset({"/login", "/logout"})  # routes that set or clear the page cookie
CROSS_SITE_FETCH = frozenset({"same-site", "cross-site"})  # Sec-Fetch-Site values of another origin's request
SWEEP_INTERVAL_S = 30.0  # how often expired tokens and sign-ins are dropped
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
    ("POST", "/v1/translate/stream"): _rule(API_KEY, CLIENT_TOKEN, OPEN, rate="uploads", consume=True,
                                            apps=frozenset({"interpret"})),
    ("POST", "/v1/rooms"): _rule(API_KEY, PAGE, OPEN, rate="tokens"),
    ("GET", r"/v1/rooms/{room}/transcript.{fmt}"): _rule(API_KEY, PAGE, OPEN, CLIENT_TOKEN,
                                                         apps=frozenset({ROOM_JOIN_APP})),
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
    """The server's keys, tokens, policy and rate limits (one per app)."""

    def __init__(self, settings: Settings, find_session: Callable[[str], Any] | None = None,
                 metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.find_session = find_session  # session id -> session (raises NotFound); set by the server
        self.keys = ApiKeys(settings.api_keys)
        self.tokens = TokenStore(settings.max_client_tokens, settings.max_tokens_per_credential)
        self.sweep_interval_s = SWEEP_INTERVAL_S
        if metrics is not None:
            metrics.before_render(self.export_metrics)
        self.policy = OriginPolicy(settings)
        self.limits = {
            "sessions": RateLimiter(settings.rate_sessions_per_minute),
            "uploads": RateLimiter(settings.rate_uploads_per_minute),
            "tokens": RateLimiter(settings.rate_tokens_per_minute),
            "logins": RateLimiter(settings.rate_logins_per_minute, burst=max(3, settings.rate_logins_per_minute // 2)),
        }

    def install(self, app: web.Application) -> AccessControl:
        """Run the periodic sweep of expired tokens while ``app`` runs (started and stopped with it)."""
        app.cleanup_ctx.append(self._sweeping)
        return self

    async def _sweeping(self, _app: web.Application) -> AsyncIterator[None]:
        task = asyncio.get_running_loop().create_task(self.sweep_forever(), name="token-sweep")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def sweep_forever(self) -> None:
        """Drop expired entries every ``sweep_interval_s`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            self.tokens.sweep()

    def export_metrics(self, metrics: Metrics) -> None:
        """Set the token store's gauges (called when ``/metrics`` is rendered)."""
        for kind, count in self.tokens.live_counts().items():
            metrics.tokens_live.labels(kind=kind).set(count)
        metrics.tokens_limit.set(self.tokens.limit)
        metrics.tokens_per_credential_limit.set(self.tokens.per_client)
        metrics.tokens_most_held.set(self.tokens.most_held())

    @property
    def open(self) -> bool:
        """No API keys: anyone may create sessions (allowed only on loopback or with ``insecure_open``)."""
        return not self.keys

    def spend(self, bucket: str, client: str) -> None:
        wait = self.limits[bucket].take(client)
        if wait is not None:
            raise RateLimited(f"too many requests ({bucket}); retry in {wait:.0f} s", retry_after=max(1.0, wait))

    def use_token(self, request: web.Request) -> None:
        """Use up the request's client token (atomic: of two requests with one token, one gets 401)."""
        if self.tokens.consume(bearer_token(request) or "") is None:
            raise Unauthorized("the client token was used already or has expired", code="invalid_credentials")

    def principal(self, request: web.Request) -> Principal | None:
        """The strongest credential the request carries, or the open principal, or None."""
        bearer = bearer_token(request)
        ip = client_ip(request)
        if bearer:
            key_id = self.keys.match(bearer)
            if key_id is not None:
                return Principal(API_KEY, f"key:{key_id}")
            token = self.tokens.peek(bearer)
            if token is not None and token.app == ROOM_JOIN_APP:  # its holders share the link's budget
                return Principal(CLIENT_TOKEN, "link:" + secret_hash(bearer)[:LINK_ID_CHARS], token)
            if token is not None:
                return Principal(CLIENT_TOKEN, token.client or f"ip:{ip}", token)
            if bearer.startswith(CLIENT_SECRET_PREFIX):
                return None  # a client secret that is wrong, expired or used up: refused even when open
        cookie = request.cookies.get(PAGE_COOKIE)
        if cookie and self.cookie_allowed(request) and self.tokens.signed_in(cookie):
            return Principal(PAGE, f"ip:{ip}")
        if self.open:
            return Principal(OPEN, f"ip:{ip}")
        return None

    def cookie_allowed(self, request: web.Request) -> bool:
        """Whether the page cookie may authorise this request: it comes from a trusted origin, or (no Origin) the
        browser does not mark it as another site's (``Sec-Fetch-Site``)."""
        origin = request.headers.get("Origin")
        if origin is None:
            return request.headers.get("Sec-Fetch-Site", "").lower() not in CROSS_SITE_FETCH
        return self.policy.trusted(origin, request.headers.get("Host"), request.scheme)

    def authorize(self, request: web.Request, rule: Rule) -> Principal:
        principal = self.principal(request)
        if principal is None or principal.kind not in rule.allow:
            if bearer_token(request) or request.cookies.get(PAGE_COOKIE):
                raise Unauthorized("the credential is not valid for this request (wrong, expired or used up)",
                                   code="invalid_credentials")
            raise Unauthorized("this request needs an API key or a client token (Authorization: Bearer ...)",
                               code="missing_credentials")
        if principal.kind == CLIENT_TOKEN and principal.token is not None:
            if rule.apps and principal.token.app not in rule.apps:
                raise Forbidden(f"this client token is for the {principal.token.app!r} app",
                                code="token_scope")
            if rule.consume:
                self.use_token(request)
        if rule.rate is not None:
            self.spend(rule.rate, principal.client)
        return principal


AUTH = web.AppKey("auth", AccessControl)
PRINCIPAL = web.RequestKey("principal", Principal)
CORS_ORIGIN = web.RequestKey("cors_origin", str)
CORS_CREDENTIALS = web.RequestKey("cors_credentials", bool)  # whether the origin is trusted with the cookie


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
    """The peer address (proxies' forwarding headers are not trusted)."""
    remote = request.remote or "unknown"
    try:
        return str(ipaddress.ip_address(remote))
    except ValueError:
        return remote


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


def _cors_headers(origin: str, credentials: bool) -> dict[str, str]:
    headers = {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Expose-Headers": "Location, Retry-After, X-Session-Token",
        "Vary": "Origin",
    }
    if credentials:
        headers["Access-Control-Allow-Credentials"] = "true"
    return headers


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def rule_for(request: web.Request) -> Rule | None:
    """The route's rule; None for public routes. Unknown /v1 routes need an API key."""
    path = request.path
    if path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES):
        return None
    resource = request.match_info.route.resource
    pattern = resource.canonical if resource is not None else path
    rule = RULES.get((request.method, pattern))
    if rule is not None:
        return rule
    if request.method == "HEAD":
        rule = RULES.get(("GET", pattern))
        if rule is not None:
            return rule
    if path.startswith("/v1/"):
        return _rule(API_KEY)
    return None


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Host, Origin, CORS preflight and the route's rule, in that order (see the module docstring)."""
    control = request.app[AUTH]
    host = request.headers.get("Host")
    if not control.policy.host_allowed(host):
        raise Forbidden(f"this server does not answer to the host name {host!r} (allowed_hosts)",
                        code="host_not_allowed")
    origin = request.headers.get("Origin")
    guarded = request.method not in ("GET", "HEAD") or request.path.startswith("/v1/")
    policy, scheme = control.policy, request.scheme
    if origin is not None and guarded and not policy.origin_allowed(origin, host, scheme):
        raise Forbidden(f"requests from the origin {origin!r} are not allowed (allowed_origins)",
                        code="origin_not_allowed")
    trusted = origin is not None and policy.trusted(origin, host, scheme)
    # a request the cookie would authorise (no bearer credential) or a sign-in; with a bearer the cookie is
    # ignored instead (browsers send it on every WebSocket handshake: a loopback page's own secret still works)
    cookie_bound = request.path in COOKIE_PATHS or (PAGE_COOKIE in request.cookies and not bearer_token(request))
    if origin is not None and guarded and cookie_bound and not trusted:
        raise Forbidden(f"the origin {origin!r} may not use this server's page sign-in: only the server's own "
                        "origin and those in allowed_origins may", code="origin_not_allowed")
    cors = origin is not None and guarded and not policy.is_same_origin(origin, host, scheme)
    if cors:
        request[CORS_ORIGIN] = origin
        request[CORS_CREDENTIALS] = trusted
    if request.method == "OPTIONS" and cors:
        headers = _cors_headers(origin or "", trusted)
        headers.update({
            "Access-Control-Allow-Methods": "GET, POST, PATCH, DELETE, OPTIONS",
            "Access-Control-Allow-Headers": "Authorization, Content-Type",
            "Access-Control-Max-Age": "600",
        })
        return web.Response(status=204, headers=headers)
    if request.match_info.http_exception is not None:  # no such route: the router's 404/405 follows
        return await handler(request)
    rule = rule_for(request)
    if rule is not None and rule.session:
        request[PRINCIPAL] = authorize_session(control, request, request.match_info["session_id"])
    elif rule is not None:
        request[PRINCIPAL] = control.authorize(request, rule)
    return await handler(request)


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare`` hook: CORS headers for allowed cross-origin requests, errors included."""
    origin = request.get(CORS_ORIGIN)
    if origin:
        response.headers.update(_cors_headers(origin, request.get(CORS_CREDENTIALS, False)))
