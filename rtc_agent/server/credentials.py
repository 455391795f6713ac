"""Credential routes: ``POST /v1/tokens`` (client tokens), ``POST /login`` and ``POST /logout`` (page sign-in).

A page signs in once with an API key (a form posting to ``/login``); the server answers with the
``rtc_agent_page`` cookie (``HttpOnly``, ``SameSite=Strict``) and from then on the page mints a client token for
each connection with ``POST /v1/tokens``, same-origin. With no API keys configured (open mode on loopback), the
pages mint tokens without signing in.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from aiohttp import web

from rtc_agent.auth.access import (
    AUTH,
    CLIENT_TOKEN,
    PAGE_COOKIE,
    PRINCIPAL,
    SIGNED_IN,
    client_ip,
    client_network,
    request_is_https,
)
from rtc_agent.errors import InvalidRequest, UnsupportedMediaType
from rtc_agent.server.http_errors import decode_text, read_body, read_json_object
from rtc_agent.server.keys import ROOMS, SETTINGS, app_class
from rtc_agent.server.room_links import exchange_join_token

MIN_TOKEN_TTL_S = 10
FORM_TYPE = "application/x-www-form-urlencoded"
MAX_LOGIN_BYTES = 4096
MAX_LOGIN_FIELDS = 8


async def create_token(request: web.Request) -> web.Response:
    """``POST /v1/tokens`` ``{app, config?, ttl_s?}`` → 201 ``{value, expires_at, app, config}``.

    The token creates one session of ``app``; keys of ``config`` are fixed for that session (the client's
    own config cannot change them). ``ttl_s`` may shorten the lifetime, never extend it. The token counts in its
    minter's quota (``max_tokens_per_credential``): the API key, the page's address, or the join link.
    """
    settings, control = request.app[SETTINGS], request.app[AUTH]
    data = await read_json_object(request, settings)
    cls = app_class(request.app, data.get("app"))
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise InvalidRequest("'config' must be a JSON object", code="invalid_config")
    principal, scope, join_ttl = request[PRINCIPAL], None, 0.0
    if principal.kind == CLIENT_TOKEN:  # a room join token (the rule admits no other): one call participant
        config, scope, join_ttl = await exchange_join_token(request.app[ROOMS], principal, cls.name, config)
    # refuse a config no session could start with, now
    cls.admit(cls.validate_config(dict(config), settings), request.app[ROOMS])
    ttl = data.get("ttl_s", settings.client_token_ttl_s)
    valid = isinstance(ttl, int | float) and not isinstance(ttl, bool)
    if not valid or not MIN_TOKEN_TTL_S <= ttl <= settings.client_token_ttl_s:
        raise InvalidRequest(f"'ttl_s' must be {MIN_TOKEN_TTL_S}-{settings.client_token_ttl_s} seconds",
                             code="invalid_ttl")
    if scope is not None:
        ttl = min(float(ttl), join_ttl)  # never outlives the join link
    value, token = await control.tokens.mint(cls.name, config, float(ttl), client=principal.client, scope=scope)
    return web.json_response(token.public(value), status=201, headers={"Cache-Control": "no-store"})


def _local_path(value: Any) -> str:
    """``value`` if it is a path on this server (no scheme, no host), else ``/``: no open redirects."""
    if not isinstance(value, str) or not value.startswith("/") or value.startswith("//"):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or "\\" in value:
        return "/"
    return value


async def login(request: web.Request) -> web.Response:
    """``POST /login`` (form ``key``, ``next``): sign this browser in with an API key and go back to ``next``.

    Before the key is known: the attempt spends the IP's ``logins`` rate, and the form must arrive within
    ``request_read_timeout_s`` (408 ``request_timeout``). The sign-in counts in its network's token quota
    (``max_tokens_per_credential``, 429 ``token_quota_exceeded`` past it)."""
    control = request.app[AUTH]
    settings = request.app[SETTINGS]
    ip = client_ip(request)
    await control.spend("logins", f"ip:{ip}")
    if request.content_type != FORM_TYPE:
        raise UnsupportedMediaType(f"POST /login takes {FORM_TYPE}")
    text = decode_text(await read_body(request, MAX_LOGIN_BYTES), "the form")
    try:
        form = parse_qs(text, max_num_fields=MAX_LOGIN_FIELDS)
    except ValueError:  # more fields than that
        raise InvalidRequest(f"the sign-in form takes at most {MAX_LOGIN_FIELDS} fields (key, next)",
                             code="invalid_request") from None
    target = _local_path((form.get("next") or ["/"])[0])
    key = (form.get("key") or [None])[0]
    if not isinstance(key, str) or control.keys.match(key) is None:
        separator = "&" if "?" in target else "?"
        raise web.HTTPSeeOther(target + separator + urlencode({"signin": "failed"}))
    response = web.HTTPSeeOther(target)
    cookie = await control.tokens.sign_in(settings.page_session_ttl_s, client=client_network(ip))
    response.set_cookie(PAGE_COOKIE, cookie,
                        max_age=settings.page_session_ttl_s, httponly=True, samesite="Strict", path="/",
                        secure=request_is_https(request))
    raise response


async def logout(request: web.Request) -> web.Response:
    """``POST /logout``: forget this browser's sign-in."""
    cookie = request.cookies.get(PAGE_COOKIE)
    if cookie:
        await request.app[AUTH].tokens.sign_out(cookie)
    response = web.HTTPSeeOther("/")
    response.del_cookie(PAGE_COOKIE, path="/")
    raise response


def page_auth(request: web.Request) -> dict[str, Any]:
    """What a page needs to know: whether sign-in is required and whether this browser is signed in (the access
    middleware read the cookie's sign-in from the state store before the page's handler ran)."""
    control = request.app[AUTH]
    signed_in = request.get(SIGNED_IN, False)
    return {"required": not control.open, "signed_in": signed_in or control.open,
            "signin_failed": request.query.get("signin") == "failed", "now": int(time.time())}


def add_routes(app: web.Application) -> None:
    """``POST /v1/tokens``, ``POST /login``, ``POST /logout``."""
    app.router.add_post("/v1/tokens", create_token)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
