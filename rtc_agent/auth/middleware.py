"""The access middleware: every HTTP request is checked here, before its handler runs (the order and the rules are
:mod:`rtc_agent.auth.access`'s), and the CORS headers of allowed cross-origin answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from rtc_agent.auth.access import (
    API_KEY,
    AUTH,
    PAGE_COOKIE,
    PRINCIPAL,
    PUBLIC_PATHS,
    PUBLIC_PREFIXES,
    RULES,
    Rule,
    authorize_session,
    bearer_token,
)
from rtc_agent.errors import Forbidden

COOKIE_PATHS = frozenset({"/login", "/logout"})  # routes that set or clear the page cookie
METRICS_PATH = "/metrics"
CORS_ORIGIN = web.RequestKey("cors_origin", str)
CORS_CREDENTIALS = web.RequestKey("cors_credentials", bool)  # whether the origin is trusted with the cookie


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
        return Rule(allow=frozenset({API_KEY}))
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
        request[PRINCIPAL] = await control.authorize(request, rule)
    if PAGE_COOKIE in request.cookies and not request.path.startswith(PUBLIC_PREFIXES):
        await control.signed_in(request)  # pages say whether this browser is signed in (credentials.page_auth)
    if request.path == METRICS_PATH:
        await control.refresh_stats()  # the token gauges come from the store, which only an await can read
    return await handler(request)


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare`` hook: CORS headers for allowed cross-origin requests, errors included."""
    origin = request.get(CORS_ORIGIN)
    if origin:
        response.headers.update(_cors_headers(origin, request.get(CORS_CREDENTIALS, False)))
