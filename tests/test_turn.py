"""TURN: per-session usernames with a TTL of minutes, and a coturn config that keeps the relay out of private,
loopback, link-local and metadata addresses.

The findings reproduced here: every caller got one 24 h credential with one shared username (``rtc-agent``), and
``deploy/turnserver.conf`` denied RFC 1918 peers but not 127/8, 169.254/16, 100.64/10, 0/8 or IPv6 ULA/link-local.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import ipaddress
import re
import time
from pathlib import Path

import aiohttp
import pytest

from rtc_agent.config import Settings, SettingsError, load_settings
from rtc_agent.server.ice import (
    ice_servers,
    new_turn_user,
    server_ice_servers,
    turn_rest_credentials,
    verify_turn_credentials,
)

CONF = Path(__file__).resolve().parent.parent / "deploy" / "turnserver.conf"
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def coturn_accepts(secret: str, username: str, credential: str, now: float) -> bool:
    """coturn's use-auth-secret check, written out independently of rtc_agent: the timestamp before the ':' is
    in the future and the password is base64(HMAC-SHA1(secret, username))."""
    stamp = username.split(":", 1)[0]
    expected = base64.b64encode(hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()).decode()
    return stamp.isdigit() and int(stamp) > now and hmac.compare_digest(expected, credential)


def turn_settings(**overrides) -> Settings:
    return dataclasses.replace(Settings(), turn_urls=["turn:t.example:3478?transport=udp"],
                               turn_secret="north-wind", **overrides)


# --- credentials ---------------------------------------------------------------------------------------------

def test_default_ttl_is_minutes_and_validated() -> None:
    assert Settings().turn_ttl_s == 600
    for bad in (0, 59, 86401, 7 * 86400):
        with pytest.raises(SettingsError, match="turn_ttl_s"):
            load_settings(env={}, overrides={"turn_ttl_s": bad})
    for good in (60, 600, 86400):
        assert load_settings(env={}, overrides={"turn_ttl_s": good}).turn_ttl_s == good


def test_each_call_gets_its_own_username() -> None:
    settings = turn_settings()
    names = set()
    for _ in range(20):
        (turn,) = ice_servers(settings)
        expiry, name = turn["username"].split(":")
        assert re.fullmatch(r"rtc-[0-9a-f]{16}", name), name
        assert abs(int(expiry) - (time.time() + 600)) <= 2
        assert coturn_accepts("north-wind", turn["username"], turn["credential"], time.time())
        names.add(name)
    assert len(names) == 20
    assert len({new_turn_user() for _ in range(100)}) == 100


def test_named_user_and_server_side_credentials() -> None:
    settings = turn_settings(turn_ttl_s=120)
    (turn,) = ice_servers(settings, user="sess_0123abcd")
    assert turn["username"].endswith(":sess_0123abcd")
    server_a, server_b = server_ice_servers(settings)[0], server_ice_servers(settings)[0]
    assert server_a.username != server_b.username and server_a.username.split(":")[1].startswith("srv-")
    assert server_ice_servers(settings, user="sess_1")[0].username.endswith(":sess_1")
    for bad in ("a:b", "", "x" * 65, "name with space", "ünïcode"):
        with pytest.raises(ValueError, match="TURN user name"):
            ice_servers(settings, user=bad)


def test_credentials_verify_as_coturn_would_and_expire() -> None:
    now = 1_700_000_000
    username, credential = turn_rest_credentials("north", 600, "alice", now=now)
    assert username == "1700000600:alice"
    assert coturn_accepts("north", username, credential, now)
    assert verify_turn_credentials("north", username, credential, now=now)
    assert verify_turn_credentials("north", username, credential, now=now + 599)
    assert not verify_turn_credentials("north", username, credential, now=now + 600)  # expired
    assert not coturn_accepts("north", username, credential, now + 601)
    assert not verify_turn_credentials("south", username, credential, now=now)  # another secret
    assert not verify_turn_credentials("north", "1700000600:mallory", credential, now=now)  # another name
    assert not verify_turn_credentials("north", "9999999999:alice", credential, now=now)  # a later expiry
    with pytest.raises(ValueError):
        turn_rest_credentials("north", 0, "alice")
    with pytest.raises(ValueError):
        turn_rest_credentials("", 600, "alice")


async def test_route_hands_out_distinct_short_lived_credentials(start_server) -> None:
    server = await start_server(turn_urls=["turn:t.example:3478?transport=udp"], turn_secret="s3cret-turn")
    seen = []
    async with aiohttp.ClientSession() as http:
        for _ in range(3):
            async with http.get(f"{server.url}/v1/ice-servers") as resp:
                assert resp.status == 200
                data = await resp.json()
            (turn,) = data["ice_servers"]
            assert "s3cret-turn" not in str(data)
            assert coturn_accepts("s3cret-turn", turn["username"], turn["credential"], time.time())
            assert int(turn["username"].split(":")[0]) <= time.time() + 600 + 2
            seen.append(turn["username"].split(":")[1])
    assert len(set(seen)) == 3 and "rtc-agent" not in seen


# --- turnserver.conf -----------------------------------------------------------------------------------------

def _parse_conf() -> tuple[list[tuple[IPAddress, IPAddress]], list[str]]:
    denied: list[tuple[IPAddress, IPAddress]] = []
    options: list[str] = []
    for raw in CONF.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        options.append(key.strip())
        if key.strip() == "denied-peer-ip":
            first, _, last = value.strip().partition("-")
            lo, hi = ipaddress.ip_address(first), ipaddress.ip_address(last or first)
            assert lo.version == hi.version and lo <= hi, line
            denied.append((lo, hi))
    return denied, options


def _denied(network: str, ranges: list[tuple[IPAddress, IPAddress]]) -> bool:
    """Whether the whole of ``network`` lies inside the union of the denied ranges."""
    net = ipaddress.ip_network(network)
    spans = sorted((lo, hi) for lo, hi in ranges if lo.version == net.version)
    cursor = net.network_address
    for lo, hi in spans:
        if hi < cursor:
            continue
        if lo > cursor:
            return False
        if hi >= net.broadcast_address:
            return True
        cursor = hi + 1
    return False


@pytest.mark.parametrize("network", [
    "127.0.0.0/8",         # loopback
    "169.254.0.0/16",      # link-local, cloud metadata 169.254.169.254
    "100.64.0.0/10",       # CGNAT
    "0.0.0.0/8",           # this network
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",  # RFC 1918
    "224.0.0.0/4",         # multicast
    "240.0.0.0/4",         # reserved + broadcast
    "::1/128",             # IPv6 loopback
    "fc00::/7",            # IPv6 unique local (AWS metadata fd00:ec2::254)
    "fe80::/10",           # IPv6 link-local
    "ff00::/8",            # IPv6 multicast
    "::ffff:0:0/96",       # IPv4-mapped: ::ffff:127.0.0.1 must not slip through
    "64:ff9b::/96",        # NAT64
    "2002::/16",           # 6to4
])
def test_turnserver_conf_denies(network: str) -> None:
    denied, _ = _parse_conf()
    assert _denied(network, denied), f"{network} is not denied in {CONF}"


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001::200e"])
def test_turnserver_conf_still_relays_to_public_addresses(address: str) -> None:
    denied, _ = _parse_conf()
    ip = ipaddress.ip_address(address)
    assert not any(lo.version == ip.version and lo <= ip <= hi for lo, hi in denied), address


def test_turnserver_conf_options() -> None:
    _, options = _parse_conf()
    assert "use-auth-secret" in options and "no-multicast-peers" in options and "no-cli" in options
    assert "no-loopback-peers" not in options  # deprecated in current coturn: the ranges are named instead
    assert "static-auth-secret" not in options  # the secret is given on the command line, not committed
    assert "allowed-peer-ip" not in options  # nothing re-opened by default
    text = CONF.read_text()
    for marker in ("Loopback", "Link-local", "Carrier-grade NAT", "unique local", "IPv4-mapped"):
        assert marker.lower() in text.lower(), marker  # each rule keeps its explanation
