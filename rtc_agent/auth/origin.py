"""The Origin and Host policy: which browser origins may call the API, which of them the sign-in cookie is good
for, and which Host names are served.

Host: a DNS-rebinding page reaches a loopback or LAN server under the attacker's own name, so only names the
operator expects are served: loopback names, the bound address, IP literals when bound to every interface, and
``allowed_hosts``.

Origin: a browser states where a request comes from. Three levels:

- *trusted*: the server's own origin (the Origin's scheme, host and port are the request's: its scheme and its
  ``Host`` header) and the origins ``allowed_origins`` names. Only these may use the page cookie
  (``rtc_agent_page``) and get credentialed CORS (``Access-Control-Allow-Credentials``). SameSite does not
  separate ports, so a page on ``http://localhost:9999`` would otherwise ride the operator's sign-in.
- *allowed*: any other loopback origin (a developer's page on this machine) and, with ``allowed_origins = ["*"]``,
  every origin: they may call the API with a bearer credential they hold (CORS without credentials), never with
  the cookie: :mod:`rtc_agent.auth.access` refuses a request of theirs that only the cookie would authorise, and
  a sign-in (403 ``origin_not_allowed``), and ignores the cookie next to a bearer credential.
- everything else is refused with 403 before any work (multipart uploads are "simple" requests a foreign page can
  send without a preflight).

A request without ``Origin`` is not from a page's script and is left to authentication. An ``https`` origin on a
plain-HTTP request counts as the same scheme: that is a TLS-terminating reverse proxy in front (the deployment
the README describes), since a browser cannot load an ``https`` page from a port that speaks plain HTTP.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from rtc_agent.auth.exposure import is_loopback_host
from rtc_agent.config import Settings

WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str) -> tuple[str, str]:
    """``("host", "port")`` of a Host header value (IPv6 in brackets; port may be empty)."""
    value = value.strip().lower()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, rest.removeprefix(":")
    host, _, port = value.partition(":") if value.count(":") == 1 else (value, "", "")
    return host, port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _origin_parts(origin: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an ``http(s)`` origin with its default port filled in, or None."""
    parts = urlsplit(origin.strip().lower())
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    return parts.scheme, parts.hostname, port if port is not None else DEFAULT_PORTS[parts.scheme]


class OriginPolicy:
    def __init__(self, settings: Settings) -> None:
        bind = settings.host.strip().lower()
        self.any_host = "*" in settings.allowed_hosts
        self.any_origin = "*" in settings.allowed_origins
        self.wildcard_bind = bind in WILDCARD_BINDS
        self.hosts = {h.strip().lower().removeprefix("[").removesuffix("]") for h in settings.allowed_hosts}
        if not self.wildcard_bind:
            self.hosts.add(bind.removeprefix("[").removesuffix("]"))
        self.origins = {o.strip().lower().rstrip("/") for o in settings.allowed_origins if o.strip() != "*"}

    def host_allowed(self, host_header: str | None) -> bool:
        if self.any_host:
            return True
        if not host_header:
            return False
        host, _ = split_host(host_header)
        if is_loopback_host(host) or host in self.hosts:
            return True
        return self.wildcard_bind and _is_ip(host)

    def is_same_origin(self, origin: str, host_header: str | None, scheme: str = "http") -> bool:
        """The Origin is the server's own: the request's scheme (or ``https`` behind a TLS-terminating proxy on a
        plain-HTTP request), and the ``Host`` header's host and port (a missing port is the scheme's default)."""
        parts = _origin_parts(origin)
        if parts is None or not host_header:
            return False
        o_scheme, o_host, o_port = parts
        scheme = scheme.lower()
        if o_scheme != scheme and not (o_scheme == "https" and scheme == "http"):
            return False
        host, port = split_host(host_header)
        if not port:
            h_port = DEFAULT_PORTS[o_scheme]
        elif port.isdigit():
            h_port = int(port)
        else:
            return False
        return (host, h_port) == (o_host, o_port)

    def trusted(self, origin: str, host_header: str | None, scheme: str = "http") -> bool:
        """May this origin use the page cookie (and get credentialed CORS)? Its own origin, or one named in
        ``allowed_origins`` (``*`` does not count: it opens the API to bearer credentials, not to the cookie)."""
        return origin.strip().lower().rstrip("/") in self.origins or self.is_same_origin(origin, host_header, scheme)

    def origin_allowed(self, origin: str, host_header: str | None, scheme: str = "http") -> bool:
        """May a page from this origin call the API at all: a trusted origin, a loopback origin, or any with
        ``allowed_origins = ["*"]``."""
        if self.any_origin or self.trusted(origin, host_header, scheme):
            return True
        parts = _origin_parts(origin)
        return parts is not None and is_loopback_host(parts[1])
