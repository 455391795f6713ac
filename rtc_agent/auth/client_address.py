"""The client's address: the one function every per-client limit, cap and log line takes it from.

Without ``trusted_proxies`` (the default) the client is the TCP peer and every forwarding header is ignored: a
client could write any address there. When the peer is one of ``trusted_proxies`` (IPs or CIDRs, e.g. a Caddy on
``127.0.0.1/32``), the address comes from the header ``trusted_proxy_header`` names:

- ``x-forwarded-for`` (the default; what Caddy, nginx and most proxies set): a comma-separated chain, the
  original client left-most, each proxy appending the address it received from;
- ``forwarded``: RFC 7239, the ``for=`` parameter of each element (quoted IPv6 ``"[2001:db8::1]:4711"``, ports and
  ``unknown`` allowed).

Only the named header is read: a proxy that maintains one header passes the other through as the client wrote
it. The chain is read from the right: addresses the trusted proxies added are skipped, and the right-most address
that is not itself trusted is the client (everything left of it the client could have written). A chain of only
trusted addresses gives its left-most one. A header that cannot be read where it matters (an entry that is no IP,
``unknown``, an empty header) gives the peer: never an exception, never a guessed address.

A request that went through a proxy is never a *local* client (:attr:`ClientAddress.local`), even when the proxy
runs on loopback: open mode (no API keys) serves only local clients unless ``insecure_open`` is set
(:mod:`rtc_agent.auth.access`). A request carrying any forwarding header, from a trusted peer or not, counts as
proxied for that rule.

A request another rtc-agent node forwarded (:mod:`rtc_agent.server.node_link`) carries the address that node
derived in ``X-RTC-Agent-Client-IP``; the forwarding middleware stores it as the request's address
(:data:`CLIENT_ADDRESS`) once the signature checks, and it is not derived again here.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiohttp import web
from multidict import MultiMapping

from rtc_agent.config.networks import XFF, parse_networks, parse_proxy_header

#: headers that say a proxy handled the request (any of them makes it non-local, trusted or not)
FORWARDING_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-IP", "X-Forwarded-Host", "Via")
UNKNOWN = "unknown"  # the address of a peer that is no IP (a Unix socket)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_FORWARDED_ELEMENT = re.compile(r'(?:[^,"]|"(?:[^"\\]|\\.)*")+')  # one comma-separated element, quotes kept whole
_BALANCED_QUOTES = re.compile(r'(?:[^"]|"(?:[^"\\]|\\.)*")*')
_FORWARDED_PAIR = re.compile(r'\s*([A-Za-z0-9!#$%&\'*+.^_`|~-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;"\s]*)\s*(?:;|$)')


@dataclass(frozen=True)
class ClientAddress:
    """Who a request came from. ``ip``: the client's address, normalised (IPv4-mapped IPv6 as IPv4), or the peer's
    text when that is no IP; ``peer``: the TCP peer (or the forwarding node's client address); ``proxied``: a
    proxy handled the request (a forwarding header was present, or another node forwarded it)."""

    ip: str
    peer: str
    proxied: bool = False

    @property
    def local(self) -> bool:
        """A client on this machine that reached the server directly: a loopback address and no proxy between."""
        return not self.proxied and is_loopback_ip(self.ip)


def parse_address(text: str) -> Address | None:
    """An address as forwarding headers write it: bare, ``[v6]``, ``[v6]:port``, ``v4:port``, with a zone on
    link-local IPv6; IPv4-mapped IPv6 becomes IPv4. None when it is not an address."""
    text = text.strip().strip('"').strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        text = host
    elif text.count(":") == 1:  # IPv4 with a port
        host, _, port = text.partition(":")
        if not port.isdigit():
            return None
        text = host
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_loopback_ip(text: str) -> bool:
    address = parse_address(text)
    return address is not None and address.is_loopback


def xff_chain(values: list[str]) -> list[str]:
    """The hops of ``X-Forwarded-For`` header lines, left to right (several lines are one list)."""
    return [hop.strip() for value in values for hop in value.split(",")]


def forwarded_elements(values: list[str]) -> list[dict[str, str]] | None:
    """The elements of RFC 7239 ``Forwarded`` header lines, left to right, each as its ``name=value`` pairs (names
    lower-cased, quotes removed; the first of a repeated name). None when an element is not such pairs."""
    elements: list[dict[str, str]] = []
    for value in values:
        if _BALANCED_QUOTES.fullmatch(value) is None:  # an unterminated quoted string
            return None
        for element in _FORWARDED_ELEMENT.findall(value):
            if not element.strip():
                continue
            pairs: dict[str, str] = {}
            position = 0
            text = element.strip()
            while position < len(text):
                match = _FORWARDED_PAIR.match(text, position)
                if match is None or match.end() == position:
                    return None
                pairs.setdefault(match.group(1).lower(), match.group(2).strip('"').replace('\\"', '"'))
                position = match.end()
            elements.append(pairs)
    return elements


def forwarded_chain(values: list[str]) -> list[str] | None:
    """The ``for=`` values of RFC 7239 ``Forwarded`` header lines, left to right; an element without ``for=`` is
    ``""``. None when an element is not ``name=value`` pairs."""
    elements = forwarded_elements(values)
    return None if elements is None else [pairs.get("for", "") for pairs in elements]


class TrustedProxies:
    """``trusted_proxies`` and ``trusted_proxy_header`` (checked by the settings' validation): derives a request's
    :class:`ClientAddress` from its peer and headers (see the module docstring)."""

    def __init__(self, entries: Iterable[str] = (), header: str = XFF) -> None:
        self.networks = parse_networks(entries)
        header = parse_proxy_header(header)
        self.header = header

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, address: Address) -> bool:
        return any(address.version == net.version and address in net for net in self.networks)

    def derive(self, remote: str | None, headers: Mapping[str, str] | MultiMapping[str]) -> ClientAddress:
        """The client address of a request from the TCP peer ``remote`` with ``headers``. Never raises."""
        peer_address = parse_address(remote or "")
        peer = str(peer_address) if peer_address is not None else (remote or UNKNOWN)
        proxied = any(name in headers for name in FORWARDING_HEADERS)
        if peer_address is None or not self.trusts(peer_address):
            return ClientAddress(peer, peer, proxied)
        values = _all(headers, "X-Forwarded-For" if self.header == XFF else "Forwarded")
        if not values:  # the trusted proxy sent this one itself (a health check) or was set up without the header
            return ClientAddress(peer, peer, proxied)
        chain = xff_chain(values) if self.header == XFF else forwarded_chain(values)
        client = self._client_of(chain) if chain else None
        return ClientAddress(str(client) if client is not None else peer, peer, True)

    def https(self, remote: str | None, headers: Mapping[str, str] | MultiMapping[str]) -> bool:
        """Whether a trusted proxy says the client reached it over HTTPS: from a peer in ``trusted_proxies``
        only, the right-most ``X-Forwarded-Proto`` value (with ``x-forwarded-for``) or the ``proto=`` of the
        last ``Forwarded`` element (with ``forwarded``), as the proxy next to this server wrote it. Never raises."""
        peer_address = parse_address(remote or "")
        if peer_address is None or not self.trusts(peer_address):
            return False
        if self.header == XFF:
            protos = [p.strip() for value in _all(headers, "X-Forwarded-Proto") for p in value.split(",")]
            return bool(protos) and protos[-1].lower() == "https"
        elements = forwarded_elements(_all(headers, "Forwarded"))
        return bool(elements) and elements[-1].get("proto", "").lower() == "https"

    def _client_of(self, chain: list[str]) -> Address | None:
        """The right-most hop that is not trusted (the left-most when all are); None when a hop on the way is not
        an address (garbage, ``unknown``, an obfuscated ``_name``)."""
        address: Address | None = None
        for hop in reversed(chain):
            address = parse_address(hop)
            if address is None:
                return None
            if not self.trusts(address):
                return address
        return address


def _all(headers: Mapping[str, str] | MultiMapping[str], name: str) -> list[str]:
    if isinstance(headers, MultiMapping):  # aiohttp's request headers: every line of the header
        return list(headers.getall(name, []))
    value = headers.get(name)
    return [value] if value is not None else []


NO_PROXIES = TrustedProxies()
CLIENT_ADDRESS = web.RequestKey("client_address", ClientAddress)  # derived once per request (or set by a forward)


def client_address(request: web.Request, proxies: TrustedProxies = NO_PROXIES) -> ClientAddress:
    """The request's :class:`ClientAddress`, derived once (through ``proxies``) and kept on the request."""
    known = request.get(CLIENT_ADDRESS)
    if known is not None:
        return known
    address = proxies.derive(request.remote, request.headers)
    request[CLIENT_ADDRESS] = address
    return address
