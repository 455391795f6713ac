"""Whether the server may run without API keys: only where nobody but this machine can reach it."""

from __future__ import annotations

import ipaddress

from rtc_agent.config import Settings, SettingsError

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


def is_loopback_host(host: str) -> bool:
    """``localhost``, ``127.0.0.0/8`` and ``::1`` (with or without brackets)."""
    host = host.strip().lower().removeprefix("[").removesuffix("]")
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings) -> str:
    """A one-line statement of the server's access mode for the start-up log.

    Raises :class:`SettingsError` when no API keys are set, the address is not loopback (or ``trusted_proxies``
    names a proxy, which passes other machines' requests on) and ``insecure_open`` is not given: an open server
    must not be reachable from other machines by accident. Per request, open mode also serves only local clients
    (:attr:`rtc_agent.auth.client_address.ClientAddress.local`) unless ``insecure_open`` is set.
    """
    if settings.api_keys:
        return f"API keys required ({len(settings.api_keys)} configured); pages sign in with a key"
    if is_loopback_host(settings.host) and settings.trusted_proxies and not settings.insecure_open:
        raise SettingsError(
            f"refusing to run on {settings.host} without API keys behind trusted_proxies: a proxy passes other "
            "machines' requests on, so even on loopback the server would be open to them; set api_keys "
            "(--api-keys or RTC_AGENT_API_KEYS), or pass --insecure-open to serve them on purpose"
        )
    if is_loopback_host(settings.host):
        return ("open mode: no API keys are configured, so anyone on this machine can start sessions "
                "(bound to loopback only); set api_keys before listening on other addresses")
    if settings.insecure_open:
        return (f"INSECURE open mode on {settings.host}: no API keys, anyone who reaches the port can start "
                "sessions (--insecure-open)")
    raise SettingsError(
        f"refusing to listen on {settings.host} without API keys: set api_keys (--api-keys or "
        "RTC_AGENT_API_KEYS), bind to 127.0.0.1, or pass --insecure-open for a trusted network"
    )
