"""Remote ICE candidate validation and offer checks (rtc_agent.rtc.candidates, rtc_agent.rtc.offer)."""

from __future__ import annotations

import time

import pytest
from aiortc import RTCPeerConnection

from rtc_agent.errors import InvalidRequest
from rtc_agent.rtc.candidates import CandidateFilter, forbidden_address, parse_candidate
from rtc_agent.rtc.offer import check_offer

MDNS = "1f4712db-ea17-4bcf-a596-105139dfd8bf.local"
VALID = [
    "candidate:f957a2332b1715da3b0ef8ba684454eb 1 udp 2130706431 192.0.2.2 42620 typ host",
    "a=candidate:d0bcf3d9c29a2bc887618212a1623bfa 1 udp 2130706431 fd00::2 60333 typ host",
    "candidate:842163049 1 udp 1677729535 203.0.113.7 61044 typ srflx raddr 0.0.0.0 rport 0 generation 0 "
    "ufrag 4ZcD network-cost 999",
    "candidate:0 1 UDP 2122252543 " + MDNS + " 51534 typ host",  # Firefox: upper-case UDP, an mDNS name
    "candidate:1 1 TCP 2105524479 198.51.100.4 9 typ host tcptype active",
    "candidate:3 2 udp 41885439 100.64.12.9 3478 typ relay raddr 100.64.0.1 rport 50000",  # CGNAT is allowed
]


@pytest.mark.parametrize("line", VALID)
def test_well_formed_candidates_parse(line):
    candidate = parse_candidate(line)
    assert candidate.protocol in ("udp", "tcp") and 1 <= candidate.port <= 65535
    assert CandidateFilter().check(line) is not None


def test_parsed_fields():
    c = parse_candidate(VALID[2])
    assert (c.foundation, c.component, c.protocol, c.priority, c.ip, c.port, c.type) == (
        "842163049", 1, "udp", 1677729535, "203.0.113.7", 61044, "srflx")
    assert (c.relatedAddress, c.relatedPort) == ("0.0.0.0", 0)
    assert parse_candidate(VALID[4]).tcpType == "active"


@pytest.mark.parametrize("line, why", [
    ("candidate:1 1 udp 2130706431 192.0.2.2 99999 typ host", "port"),
    ("candidate:1 1 udp 2130706431 192.0.2.2 0 typ host", "port"),
    ("candidate:1 1 udp 2130706431 999.1.1.1 5000 typ host", "address"),
    ("candidate:1 1 udp 2130706431 evil.example.com 5000 typ host", "address"),
    ("candidate:1 1 udp 2130706431 not-a-uuid.local 5000 typ host", "address"),
    ("candidate:1 3 udp 2130706431 192.0.2.2 5000 typ host", "component"),
    ("candidate:1 0 udp 2130706431 192.0.2.2 5000 typ host", "component"),
    ("candidate:1 1 sctp 2130706431 192.0.2.2 5000 typ host", "transport"),
    ("candidate:1 1 udp 2130706431 192.0.2.2 5000 typ bogus", "type"),
    ("candidate:1 1 udp 2130706431 192.0.2.2 5000 type host", "expected"),
    ("candidate:1 1 udp -5 192.0.2.2 5000 typ host", "priority"),
    ("candidate:1 1 udp 99999999999 192.0.2.2 5000 typ host", "priority"),
    ("candidate:1 1 udp 1 192.0.2.2 +5000 typ host", "port"),
    ("candidate:foo!bar 1 udp 1 192.0.2.2 5000 typ host", "foundation"),
    ("candidate:1 1 udp 1 192.0.2.2 5000 typ host raddr 999.0.0.1 rport 1", "address"),
    ("candidate:1 1 udp 1 192.0.2.2 5000 typ host rport 70000", "rport"),
    ("candidate:1 1 tcp 1 192.0.2.2 5000 typ host tcptype sideways", "tcptype"),
    ("candidate:1 1 udp 1 192.0.2.2 5000 typ host generation", "pairs"),
    ("garbage", "expected"),
    ("", "expected"),
    ("candidate:1 1 udp 1 192.0.2.2 5000 typ host " + "x " * 300, "longer"),
])
def test_malformed_candidates_are_refused(line, why):
    with pytest.raises(ValueError, match=why):
        parse_candidate(line)
    with pytest.raises(InvalidRequest) as refused:
        CandidateFilter().check(line)
    assert refused.value.code == "invalid_candidate" and refused.value.status == 400


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.1.2.3", "::1", "169.254.169.254", "169.254.0.1", "fe80::1", "febf::1", "fe80::1%eth0",
    "0.0.0.0", "0.1.2.3", "::", "224.0.0.251", "239.255.255.250", "ff02::1", "255.255.255.255",
    "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:0.0.0.0", "::ffff:224.0.0.1",
    # cloud metadata outside link-local, and IPv4 carried in NAT64, IPv4-compatible and 6to4 forms
    "fd00:ec2::254", "100.100.100.200", "64:ff9b::a9fe:a9fe", "::7f00:1", "::a9fe:a9fe", "2002:a9fe:a9fe::1",
])
def test_forbidden_addresses_are_dropped(address):
    assert forbidden_address(address)
    line = f"candidate:1 1 udp 2130706431 {address} 5000 typ host"
    candidates = CandidateFilter()
    assert candidates.check(line) is None
    assert candidates.dropped == 1
    assert CandidateFilter(allow_loopback=True).check(line) is not None


@pytest.mark.parametrize("address", [
    "192.0.2.2", "10.0.0.1", "172.16.5.4", "192.168.1.20", "100.64.1.1", "100.127.255.254", "8.8.8.8",
    "fd00::2", "2001:db8::1", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", MDNS,
])
def test_real_client_addresses_are_kept(address):
    assert not forbidden_address(address)
    assert CandidateFilter().check(f"candidate:1 1 udp 2130706431 {address} 5000 typ host") is not None


def test_patch_is_refused_by_count_before_parsing():
    inits = [{"candidate": "garbage"}] * 1000
    started = time.perf_counter()
    with pytest.raises(InvalidRequest) as refused:
        CandidateFilter().check_patch(inits, limit=20)
    assert refused.value.code == "too_many_candidates"
    assert time.perf_counter() - started < 0.05
    with pytest.raises(InvalidRequest) as refused:
        CandidateFilter().check_patch([{"candidate": VALID[0]}] * 10, limit=20, taken=95, total=100)
    assert refused.value.code == "too_many_candidates"


def test_patch_validation():
    filt = CandidateFilter()
    inits = [{"candidate": VALID[0], "sdpMid": "0"}, {"candidate": VALID[1], "sdpMLineIndex": 1},
             {"candidate": VALID[3]}, {"candidate": "candidate:1 1 udp 1 127.0.0.1 5000 typ host"},
             {"candidate": ""}]
    valid, end = filt.check_patch(inits, limit=20)
    assert end and len(valid) == 3 and filt.dropped == 1
    assert [(c.sdpMid, c.sdpMLineIndex) for c in valid] == [("0", None), (None, 1), (None, 0)]
    for bad in ({"candidate": VALID[0], "sdpMLineIndex": 99}, {"candidate": VALID[0], "sdpMLineIndex": "0"},
                {"candidate": VALID[0], "sdpMid": "x" * 100}, {"candidate": 5}, "not a dict",
                {"candidate": "candidate:1 1 udp 1 192.0.2.1 99999 typ host"}):
        with pytest.raises(InvalidRequest) as refused:
            filt.check_patch([{"candidate": VALID[0]}, bad], limit=20)
        assert refused.value.code == "invalid_candidate"


async def _aiortc_offer() -> str:
    pc = RTCPeerConnection()
    pc.createDataChannel("events")
    pc.addTransceiver("audio", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return sdp


async def test_a_real_offer_passes_and_loses_only_forbidden_candidates():
    offer = await _aiortc_offer()
    kept = check_offer(offer, CandidateFilter(), max_candidates=100)
    original = [ln for ln in offer.splitlines() if ln.startswith("a=candidate:")]
    assert [ln for ln in kept.splitlines() if ln.startswith("a=candidate:")] == [
        ln for ln in original if not forbidden_address(ln.split()[4])]
    lines = offer.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("a=candidate:"))
    injected = "\r\n".join([*lines[:at], "a=candidate:9 1 udp 2130706431 169.254.169.254 80 typ host",
                            "a=candidate:8 1 udp 2130706431 127.0.0.1 8080 typ host", *lines[at:]]) + "\r\n"
    filt = CandidateFilter()
    cleaned = check_offer(injected, filt, max_candidates=100)
    assert "169.254.169.254" not in cleaned and "127.0.0.1" not in cleaned and filt.dropped == 2
    assert "127.0.0.1" in check_offer(injected, CandidateFilter(allow_loopback=True), max_candidates=100)
    with pytest.raises(InvalidRequest) as refused:
        check_offer(injected.replace(" 80 typ", " 99999 typ"), CandidateFilter(), max_candidates=100)
    assert refused.value.code == "invalid_candidate"
    with pytest.raises(InvalidRequest) as refused:
        check_offer(injected, CandidateFilter(), max_candidates=3)
    assert refused.value.code == "too_many_candidates"


async def test_offers_aiortc_cannot_handle_are_refused():
    offer = await _aiortc_offer()
    lines = offer.rstrip("\r\n").split("\r\n")
    creds = list(dict.fromkeys(ln for ln in lines if ln.startswith(("a=ice-ufrag", "a=ice-pwd", "a=setup"))))
    text = ["m=text 9 UDP/TLS/RTP/SAVPF 0", "c=IN IP4 0.0.0.0", "a=mid:2", *creds]
    cases = {
        "text section": lines + text,
        "bundle names a missing mid": [ln.replace("BUNDLE 0 1", "BUNDLE 7 0 1") for ln in lines],
        "duplicate mid": [ln.replace("a=mid:1", "a=mid:0") for ln in lines],
        "two data channels": lines + [ln.replace("a=mid:1", "a=mid:3") for ln in
                                      lines[next(i for i, ln in enumerate(lines) if ln.startswith("m=app")):]],
        "too many sections": lines + ["m=audio 9 UDP/TLS/RTP/SAVPF 0", *creds] * 9,
        "malformed media line": [*lines, "m=audio nine UDP 0"],
        "not sdp": ["hello"],
        "no media": lines[:4],
    }
    for name, case in cases.items():
        with pytest.raises(InvalidRequest) as refused:
            check_offer("\r\n".join(case) + "\r\n", CandidateFilter(), max_candidates=100)
        assert refused.value.code == "invalid_sdp", name
