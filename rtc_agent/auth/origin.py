"""The Origin and Host policy: which browser origins may call the API, and which Host names are served.

Host: a DNS-rebinding page reaches a loopback or LAN server under the attacker's own name, so only names the
operator expects are served: loopback names, the bound address, IP literals when bound to every interface, and
``allowed_hosts``. Origin: a browser states where a request comes from; requests from other sites are refused
before any work (multipart uploads are "simple" requests a foreign page can send without a preflight). A request
without ``Origin`` is not from a page's script and is left to authentication.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from rtc_agent.auth.exposure import is_loopback_host
from rtc_agent.config import Settings

WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})


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


class OriginPolicy:
    def __init__(self, settings: Settings) -> None:
        bind = settings.host.strip().lower()
        self.any_host = "*" in settings.allowed_hosts
        self.any_origin = "*" in settings.allowed_origins
        self.wildcard_bind = bind in WILDCARD_BINDS
        self.hosts = {h.strip().lower().removeprefix("[").removesuffix("]") for h in settings.allowed_hosts}
        if not self.wildcard_bind:
            self.hosts.add(bind.removeprefix("[").removesuffix("]"))
        self.origins = {o.strip().lower().rstrip("/") for o in settings.allowed_origins}

    def host_allowed(self, host_header: str | None) -> bool:
        if self.any_host:
            return True
        if not host_header:
            return False
        host, _ = split_host(host_header)
        if is_loopback_host(host) or host in self.hosts:
            return True
        return self.wildcard_bind and _is_ip(host)

    def origin_allowed(self, origin: str, host_header: str | None) -> bool:
        """Same origin as the request's Host, a loopback origin, or a configured one."""
        origin = origin.strip().lower().rstrip("/")
        if self.any_origin or origin in self.origins:
            return True
        if origin == "null":
            return False
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        if is_loopback_host(parts.hostname):
            return True
        return bool(host_header) and parts.netloc == (host_header or "").strip().lower()

    def is_same_origin(self, origin: str, host_header: str | None) -> bool:
        return bool(host_header) and urlsplit(origin.strip().lower()).netloc == (host_header or "").strip().lower()
