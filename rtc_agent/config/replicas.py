"""The settings of several nodes sharing one state store (``node_url``, ``node_id``, ``node_secret``,
``room_lease_ttl_s``, ``node_forward_timeout_s``): what cannot work (:func:`validate_replicas`, raised by
:func:`~rtc_agent.config.validation.validate`) and what works but is likely a mistake (:func:`replica_warnings`,
printed by ``rtc-agent check-config`` and logged by ``serve``)."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit

from rtc_agent.config.settings import Settings, SettingsError

NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MIN_NODE_SECRET = 16
SHARED_STATE_SCHEMES = ("redis://", "rediss://", "unix://")


def node_id_of(settings: Settings) -> str:
    """This node's name: ``node_id``, else ``node-`` and 8 hex digits of ``node_url``'s digest (stable across
    restarts), else ``single`` (no replicas)."""
    if settings.node_id:
        return settings.node_id
    if not settings.node_url:
        return "single"
    return "node-" + hashlib.sha256(settings.node_url.encode()).hexdigest()[:8]


def validate_replicas(settings: Settings) -> None:
    """Refuse replica settings that cannot work, naming the setting."""
    if not 1.0 <= settings.room_lease_ttl_s <= 300.0:
        raise SettingsError("room_lease_ttl_s must be 1-300 seconds")
    if not 1.0 <= settings.node_forward_timeout_s <= 120.0:
        raise SettingsError("node_forward_timeout_s must be 1-120 seconds")
    if settings.node_id and not NODE_ID.match(settings.node_id):
        raise SettingsError("node_id must be 1-64 letters, digits, '.', '-' or '_' (starting with a letter or digit)")
    if settings.node_secret and len(settings.node_secret) < MIN_NODE_SECRET:
        raise SettingsError(f"node_secret must be at least {MIN_NODE_SECRET} characters")
    if not settings.node_url:
        return
    parts = urlsplit(settings.node_url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username or parts.password:
        raise SettingsError("node_url must be http(s)://HOST[:PORT] (how the other nodes reach this one; no path, "
                            f"query or credentials), got {settings.node_url!r}")
    if not settings.node_secret:
        raise SettingsError("node_url needs node_secret (the same on every node): forwarded requests are signed "
                            "with it")


def replica_warnings(settings: Settings) -> list[str]:
    """Settings that start but are likely a mistake: a shared Redis state without ``node_url`` (this node then
    hosts every call room it is asked for, so two nodes behind one address can hold two rooms of one name), and
    ``node_url`` on a store of this process only."""
    shared = settings.state_url.startswith(SHARED_STATE_SCHEMES)
    out = []
    if shared and not settings.node_url:
        out.append("state_url is a shared Redis store but node_url is empty: this node hosts every call room it is "
                   "asked for, so two nodes behind one address can hold two different rooms of one name; give "
                   "every node its node_url and the same node_secret")
    if settings.node_url and settings.state_url == "memory:":
        out.append("node_url is set but state_url is memory: (this process only): no other node sees this node's "
                   "rooms; use a shared redis:// state_url")
    return out
