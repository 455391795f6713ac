"""Who may do what: server API keys, client tokens, page sign-ins, session tokens, the Origin/Host policy and
per-client rate limits. :mod:`rtc_agent.auth.access` ties them to the HTTP routes in one middleware."""

from rtc_agent.auth.access import (
    AUTH,
    PAGE_COOKIE,
    PRINCIPAL,
    AccessControl,
    Principal,
    authorize_session,
)
from rtc_agent.auth.exposure import check_exposure, is_loopback_host
from rtc_agent.auth.middleware import access_middleware, add_cors_headers
from rtc_agent.auth.secrets import ApiKeys, secret_hash

__all__ = [
    "AUTH",
    "PAGE_COOKIE",
    "PRINCIPAL",
    "AccessControl",
    "ApiKeys",
    "Principal",
    "access_middleware",
    "add_cors_headers",
    "authorize_session",
    "check_exposure",
    "is_loopback_host",
    "secret_hash",
]
