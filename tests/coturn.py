"""A real TURN server for tests: Debian's coturn (``turnserver``) on loopback, on free ports, with
``use-auth-secret`` (the TURN REST credentials rtc_agent.server.ice mints) and no system config file (``-n``).

coturn refuses to relay to loopback peers by default; these tests run every peer on 127.0.0.1, so the fixture
passes ``--allow-loopback-peers`` (never in a deployment: ``deploy/turnserver.conf`` denies 127/8). Started, waited
for and stopped by tests/daemons.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rtc_agent.bench.common import free_udp_block
from tests.daemons import log_tail, run_daemon

TURNSERVER = shutil.which("turnserver") or "/usr/bin/turnserver"
requires_coturn = pytest.mark.skipif(not os.path.exists(TURNSERVER), reason="coturn (turnserver) is not installed")
RELAY_PORTS = 64  # relay ports per test server
STUN_MAGIC = 0x2112A442


@dataclass(frozen=True)
class Coturn:
    port: int
    secret: str
    log: Path
    realm: str = "rtc-agent"

    @property
    def url(self) -> str:
        return f"turn:127.0.0.1:{self.port}?transport=udp"

    def server_args(self) -> list[str]:
        """``rtc-agent serve`` flags that point the server (and its pages) at this relay."""
        return ["--turn-urls", self.url, "--turn-secret", self.secret]

    def log_text(self) -> str:
        return log_tail(self.log, 4000)


def _free_udp_tcp_port() -> int:
    """A port free for both UDP and TCP on loopback (coturn listens on both)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port = udp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port
    raise RuntimeError("no free port for coturn")


def _relay_range() -> tuple[int, int]:
    """A block of RELAY_PORTS ports inside the ephemeral range; coturn skips any that are taken."""
    low = free_udp_block(RELAY_PORTS)
    return low, low + RELAY_PORTS - 1


def stun_answers(port: int, timeout: float = 0.5) -> bool:
    """Whether a STUN Binding request to 127.0.0.1:port gets a Binding success response."""
    txn = os.urandom(12)
    request = struct.pack("!HHI", 0x0001, 0, STUN_MAGIC) + txn
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.sendto(request, ("127.0.0.1", port))
            data, _ = sock.recvfrom(2048)
        except OSError:
            return False
    return len(data) >= 20 and struct.unpack("!H", data[:2])[0] == 0x0101 and data[8:20] == txn


@contextlib.contextmanager
def run_coturn(tmp_path: Path, secret: str = "turn-test-secret-0123456789", ready_timeout: float = 15.0,
               config: Path | None = None) -> Iterator[Coturn]:
    """``turnserver`` on 127.0.0.1 (listening and relaying), stopped afterwards; yields once it answers STUN.
    ``config``: a config file to read first (``-c``; the flags here win), else none at all (``-n``)."""
    port = _free_udp_tcp_port()
    low, high = _relay_range()
    log = tmp_path / f"coturn-{port}.log"
    args = [
        TURNSERVER, *(["-c", str(config)] if config else ["-n"]),
        "--listening-ip=127.0.0.1", "--relay-ip=127.0.0.1", f"--listening-port={port}",
        f"--min-port={low}", f"--max-port={high}", "--use-auth-secret", f"--static-auth-secret={secret}",
        "--realm=rtc-agent", "--fingerprint", "--no-cli", "--no-tls", "--no-dtls", "--allow-loopback-peers",
        f"--userdb={tmp_path / f'turndb-{port}'}", f"--pidfile={tmp_path / f'turnserver-{port}.pid'}",
        "--log-file=stdout", "--simple-log", "--no-software-attribute", "--verbose",
    ]
    server = Coturn(port, secret, log)
    with run_daemon(args, log=log, cwd=tmp_path, ready=lambda: stun_answers(port), ready_timeout=ready_timeout,
                    waiting_for="answer STUN", log_text=server.log_text):
        yield server
