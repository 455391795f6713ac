"""``AccessControl`` and the access middleware: every HTTP request is checked here, before its handler runs.

Order: Host (DNS rebinding) → Origin (foreign pages; CORS preflights answered here) → the route's rule: who
may call it (an API key, a client token, a page sign-in, a session's own token, or anyone while the server is
open) and which rate limit it spends. A route under ``/v1/`` without a rule needs an API key, so a new route is
closed until it says otherwise.

Credentials arrive as ``Authorization: Bearer <value>`` (on a WebSocket upgrade also as the subprotocol
``openai-insecure-api-key.<value>``, which browsers can set); page sign-ins as the ``rtc_agent_page`` cookie
(``HttpOnly``, ``SameSite=Strict``). The principal is left on the request as ``request[PRINCIPAL]``. An ``ek_``
value (an OpenAI Realtime client secret) that is not live is refused even in open mode.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from rtc_agent.auth.origin import OriginPolicy
from rtc_agent.auth.rate_limit import RateLimiter
from rtc_agent.auth.secrets import ApiKeys, same_secret
from rtc_agent.auth.tokens import ClientToken, TokenStore
from rtc_agent.config import Settings
from rtc_agent.errors import AgentError, Forbidden, RateLimited, Unauthorized

PAGE_COOKIE = "rtc_agent_page"

API_KEY, CLIENT_TOKEN, PAGE, OPEN = "api_key", "client_token", "page", "open"
REALTIME_TOKEN_APP = "realtime"  # the ``app`` of OpenAI Realtime client secrets in the token store
ROOM_JOIN_APP = "room_join"  # the ``app`` of call-room join tokens (rtc_agent.rooms.routes), never a session
CLIENT_SECRET_PREFIX = "ek_"  # OpenAI Realtime client secrets (ephemeral keys)
WS_KEY_PROTOCOL = "openai-insecure-api-key."  # a key offered as a WebSocket subprotocol (browsers)


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
    # A room join token (``rj_``) mints client tokens for its own room's call only (rtc_agent.rooms.routes).
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
    ("POST", "/v1/realtime/calls"): _rule(API_KEY, CLIENT_TOKEN, OPEN, rate="sessions", consume=True,
                                          apps=frozenset({REALTIME_TOKEN_APP})),
    ("POST", "/v1/realtime/calls/{call_id}/hangup"): _rule(API_KEY, OPEN),
}
PUBLIC_PREFIXES = ("/static/",)
PUBLIC_PATHS = frozenset({"/health", "/favicon.ico"})


class AccessControl:
    """The server's keys, tokens, policy and rate limits (one per app)."""

    def __init__(self, settings: Settings, find_session: Callable[[str], Any] | None = None) -> None:
        self.settings = settings
        self.find_session = find_session  # session id -> session (raises NotFound); set by the server
        self.keys = ApiKeys(settings.api_keys)
        self.tokens = TokenStore(settings.max_client_tokens)
        self.policy = OriginPolicy(settings)
        self.limits = {
            "sessions": RateLimiter(settings.rate_sessions_per_minute),
            "uploads": RateLimiter(settings.rate_uploads_per_minute),
            "tokens": RateLimiter(settings.rate_tokens_per_minute),
            "logins": RateLimiter(settings.rate_logins_per_minute, burst=max(3, settings.rate_logins_per_minute // 2)),
        }

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
            if token is not None:
                return Principal(CLIENT_TOKEN, token.client or f"ip:{ip}", token)
            if bearer.startswith(CLIENT_SECRET_PREFIX):
                return None  # a client secret that is wrong, expired or used up: refused even when open
        cookie = request.cookies.get(PAGE_COOKIE)
        if cookie and self.tokens.signed_in(cookie):
            return Principal(PAGE, f"ip:{ip}")
        if self.open:
            return Principal(OPEN, f"ip:{ip}")
        return None

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


def authorize_session(control: AccessControl, request: web.Request, session: Any) -> Principal:
    """Allow the session's own token (``session.token_hash``) or an API key; raise otherwise."""
    bearer = bearer_token(request)
    if bearer:
        if control.keys.match(bearer) is not None:
            return Principal(API_KEY, "key")
        digest = getattr(session, "token_hash", "")
        if digest and same_secret(bearer, digest):
            return Principal("session", f"session:{session.id}")
        raise Forbidden("this token does not grant access to this session", code="invalid_session_token")
    raise Unauthorized("this session's token is required (Authorization: Bearer <session_token>)",
                       code="missing_credentials")


def _cors_headers(origin: str) -> dict[str, str]:
    return {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Credentials": "true",
        "Access-Control-Expose-Headers": "Location, Retry-After, X-Session-Token",
        "Vary": "Origin",
    }


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
    if origin is not None and guarded and not control.policy.origin_allowed(origin, host):
        raise Forbidden(f"requests from the origin {origin!r} are not allowed (allowed_origins)",
                        code="origin_not_allowed")
    cors = origin is not None and guarded and not control.policy.is_same_origin(origin, host)
    if cors:
        request[CORS_ORIGIN] = origin
    if request.method == "OPTIONS" and cors:
        headers = _cors_headers(origin or "")
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
        if control.find_session is None:
            raise AgentError("session lookup is not configured")
        session = control.find_session(request.match_info["session_id"])
        request[PRINCIPAL] = authorize_session(control, request, session)
    elif rule is not None:
        request[PRINCIPAL] = control.authorize(request, rule)
    return await handler(request)


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare`` hook: CORS headers for allowed cross-origin requests, errors included."""
    origin = request.get(CORS_ORIGIN)
    if origin:
        response.headers.update(_cors_headers(origin))
