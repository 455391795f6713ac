"""Validation of remote ICE candidates (trickled with PATCH or inside an offer) before aiortc sees them.

A client names the addresses the server sends connectivity checks to, so a candidate is only taken when it is
well formed (RFC 8839 ``candidate-attribute``): component 1-2, transport ``udp``/``tcp``, a priority, an IPv4 or
IPv6 literal or an mDNS name (``<uuid>.local``), port 1-65535, type ``host``/``srflx``/``prflx``/``relay``.
A malformed candidate is refused (:class:`InvalidRequest`, code ``invalid_candidate``).

Well-formed candidates whose address the server must not probe are dropped quietly (counted, logged at debug):
loopback, link-local (169.254.0.0/16 with the cloud metadata address, fe80::/10), unspecified and 0.0.0.0/8,
multicast, the broadcast address, the cloud metadata addresses outside those ranges (AWS ``fd00:ec2::254``,
Alibaba ``100.100.100.200``), and the IPv6 forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible,
NAT64 ``64:ff9b::/96``, 6to4) of any of those. Carrier-grade NAT (100.64.0.0/10), private ranges and
unique-local IPv6 stay allowed: real clients live there. ``allow_loopback=True`` (the
``ice_allow_loopback_candidates`` setting) keeps them all. mDNS names are resolved later by aioice; what they
resolve to is not checked here.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from dataclasses import dataclass
from typing import Any

from aiortc import RTCIceCandidate

from rtc_agent.errors import InvalidRequest

log = logging.getLogger(__name__)

MAX_LINE_CHARS = 512
MAX_MEDIA_SECTIONS = 8  # media sections an offer may have (so sdpMLineIndex is below this)
TYPES = frozenset({"host", "srflx", "prflx", "relay"})
TRANSPORTS = frozenset({"udp", "tcp"})
TCP_TYPES = frozenset({"active", "passive", "so"})
_FOUNDATION = re.compile(r"[A-Za-z0-9+/]{1,32}")
_DIGITS = re.compile(r"[0-9]{1,10}")
_MDNS = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.local", re.IGNORECASE)
_ZERO_NET = ipaddress.ip_network("0.0.0.0/8")
_BROADCAST = ipaddress.ip_address("255.255.255.255")
_METADATA = frozenset(ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4 or the old IPv4-compatible form)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or (int(ip) >> 32 == 0 and int(ip) > 1):  # ::a.b.c.d (not :: or ::1)
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def forbidden_address(host: str) -> bool:
    """True for an IP literal the server must not send checks to (see the module docstring)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # an mDNS name
    if ip in _METADATA:
        return True
    if isinstance(ip, ipaddress.IPv6Address) and (inner := _embedded_ipv4(ip)) is not None:
        ip = inner
    if ip in _METADATA or ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast:
        return True
    return isinstance(ip, ipaddress.IPv4Address) and (ip in _ZERO_NET or ip == _BROADCAST)


def _address(value: str) -> str:
    if _MDNS.fullmatch(value):
        return value
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"address {value[:64]!r} is neither an IP literal nor an mDNS <uuid>.local name") from None


def _number(value: str, what: str, low: int, high: int) -> int:
    if not _DIGITS.fullmatch(value) or not low <= int(value) <= high:
        raise ValueError(f"{what} {value[:16]!r} is not a number from {low} to {high}")
    return int(value)


def parse_candidate(line: str) -> RTCIceCandidate:
    """Parse and validate one candidate line (``candidate:...``, with or without ``a=``). Raises ``ValueError``
    with the reason for a malformed one; the address is not filtered here (see :func:`forbidden_address`)."""
    if len(line) > MAX_LINE_CHARS:
        raise ValueError(f"candidate line longer than {MAX_LINE_CHARS} characters")
    bits = line.strip().removeprefix("a=").removeprefix("candidate:").split()
    if len(bits) < 8 or bits[6] != "typ":
        raise ValueError("expected 'foundation component transport priority address port typ type ...'")
    foundation, component, transport, priority, address, port, _, kind = bits[:8]
    if not _FOUNDATION.fullmatch(foundation):
        raise ValueError(f"foundation {foundation[:40]!r} is not 1-32 ice-chars")
    transport = transport.lower()
    if transport not in TRANSPORTS:
        raise ValueError(f"transport {transport[:16]!r} is not udp or tcp")
    if kind not in TYPES:
        raise ValueError(f"type {kind[:16]!r} is not host, srflx, prflx or relay")
    candidate = RTCIceCandidate(
        component=_number(component, "component", 1, 2), foundation=foundation, ip=_address(address),
        port=_number(port, "port", 1, 65535), priority=_number(priority, "priority", 1, 2**32 - 1),
        protocol=transport, type=kind,
    )
    rest = bits[8:]
    if len(rest) % 2:
        raise ValueError("extension attributes must come in name/value pairs")
    for name, value in zip(rest[::2], rest[1::2], strict=True):
        if name == "raddr":
            candidate.relatedAddress = _address(value)
        elif name == "rport":
            candidate.relatedPort = _number(value, "rport", 0, 65535)
        elif name == "tcptype":
            if value not in TCP_TYPES:
                raise ValueError(f"tcptype {value[:16]!r} is not active, passive or so")
            candidate.tcpType = value
    return candidate


@dataclass
class CandidateFilter:
    """Validates candidates for one session and counts the ones dropped for their address."""

    allow_loopback: bool = False
    dropped: int = 0

    def check(self, line: str) -> RTCIceCandidate | None:
        """The candidate, or ``None`` when its address is forbidden. Raises :class:`InvalidRequest`
        (``invalid_candidate``) for a malformed one."""
        try:
            candidate = parse_candidate(line)
        except ValueError as exc:
            raise InvalidRequest(f"invalid ICE candidate {line[:120]!r}: {exc}", code="invalid_candidate") from None
        if not self.allow_loopback and forbidden_address(candidate.ip):
            self.dropped += 1
            log.debug("dropped remote ICE candidate on a forbidden address: %s", line[:120])
            return None
        return candidate

    def check_patch(self, inits: list[Any], *, limit: int, taken: int = 0,
                    total: int | None = None) -> tuple[list[RTCIceCandidate], bool]:
        """Validate a trickle PATCH: browser ``RTCIceCandidateInit`` dicts. Returns the candidates to add (with
        ``sdpMid``/``sdpMLineIndex``; index 0 when neither is given) and whether an end-of-candidates marker
        (an empty candidate) was among them.

        More than ``limit`` entries, or ``taken`` + entries above ``total``, is refused by count before any is
        parsed (``too_many_candidates``); one malformed entry refuses them all (``invalid_candidate``).
        """
        if len(inits) > limit:
            raise InvalidRequest(f"{len(inits)} ICE candidates in one request; at most {limit} are taken",
                                 code="too_many_candidates")
        if total is not None and taken + len(inits) > total:
            raise InvalidRequest(f"this session has taken {taken} ICE candidates; at most {total} are taken",
                                 code="too_many_candidates")
        valid: list[RTCIceCandidate] = []
        end = False
        for init in inits:
            line = init.get("candidate") if isinstance(init, dict) else None
            if not isinstance(line, str):
                raise InvalidRequest("each candidate needs a 'candidate' string", code="invalid_candidate")
            if not line:  # the browser's end-of-candidates marker
                end = True
                continue
            candidate = self.check(line)
            mid, index = init.get("sdpMid"), init.get("sdpMLineIndex")
            if not (mid is None or (isinstance(mid, str) and len(mid) <= 32)) or not (
                    index is None or (type(index) is int and 0 <= index < MAX_MEDIA_SECTIONS)):
                raise InvalidRequest("sdpMid must be a short string and sdpMLineIndex a media section index",
                                     code="invalid_candidate")
            if candidate is not None:
                candidate.sdpMid, candidate.sdpMLineIndex = mid, (0 if mid is None and index is None else index)
                valid.append(candidate)
        return valid, end

    def filter_sdp(self, sdp: str, *, limit: int) -> str:
        """The SDP without its ``a=candidate`` lines on forbidden addresses. Raises :class:`InvalidRequest`
        for a malformed candidate line (``invalid_candidate``) or more than ``limit`` of them
        (``too_many_candidates``), before parsing any."""
        lines = sdp.splitlines()
        count = sum(1 for line in lines if line.startswith("a=candidate:"))
        if count > limit:
            raise InvalidRequest(f"the offer carries {count} ICE candidates; at most {limit} are taken",
                                 code="too_many_candidates")
        if not count:
            return sdp
        kept = [line for line in lines if not line.startswith("a=candidate:") or self.check(line) is not None]
        return "\r\n".join(kept) + "\r\n"
