"""The ``trusted_proxies`` / ``trusted_proxy_header`` values: one parser for the settings' validation and for
:mod:`rtc_agent.auth.client_address`, which derives client addresses from them."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from rtc_agent.config.settings import SettingsError

XFF, FORWARDED = "x-forwarded-for", "forwarded"
PROXY_HEADERS = (XFF, FORWARDED)  # the values of ``trusted_proxy_header``

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """``trusted_proxies`` as networks (an address is its own /32 or /128; comma-separated items are split).
    Raises :class:`~rtc_agent.config.settings.SettingsError` (a ``ValueError``) naming the entry for one that is not
    an IP or CIDR, has host bits set, or trusts every address (``/0``)."""
    networks: list[Network] = []
    for entry in (part.strip() for item in entries for part in str(item).split(",")):
        if not entry:
            continue
        try:
            network = ipaddress.ip_network(entry, strict=True)
        except ValueError as exc:
            raise SettingsError(f"trusted_proxies: {entry!r} is not an IP address or CIDR ({exc})") from None
        if network.prefixlen == 0:
            raise SettingsError(f"trusted_proxies: {entry!r} trusts every address, so any client could set its own "
                                "address; name the proxies' addresses")
        networks.append(network)
    return tuple(networks)


def parse_proxy_header(value: str) -> str:
    """``trusted_proxy_header`` normalised; :class:`SettingsError` unless it is one of :data:`PROXY_HEADERS`."""
    header = value.strip().lower()
    if header not in PROXY_HEADERS:
        raise SettingsError(f"trusted_proxy_header must be one of {', '.join(PROXY_HEADERS)}, not {header!r}")
    return header
