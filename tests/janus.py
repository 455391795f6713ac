"""A real Janus for tests: Debian's ``janus`` on free ports with a private config folder.

The fixture writes its configs with :func:`rtc_agent.bench.janus_local.write_config` (the benchmark's Janus) into
a temp folder and starts ``janus -F DIR``: the WebSocket API on a free loopback port, the HTTP API on another, no
admin API, an ``api_secret`` (unless asked for an open API), RTP ports from a small free range, debug level 4,
and only the VideoRoom plugin and the two transports loaded. It yields once the WebSocket API accepts a
connection and always stops the process (tests/daemons.py).
Tests skip when ``janus`` is not installed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rtc_agent.bench.common import free_port, free_udp_block
from rtc_agent.bench.janus_local import janus_args, janus_libdir, write_config
from tests.daemons import log_tail, run_daemon

JANUS = shutil.which("janus") or "/usr/bin/janus"
requires_janus = pytest.mark.skipif(not os.path.exists(JANUS), reason="janus is not installed")
RTP_PORTS = 200  # per test server


@dataclass(frozen=True)
class Janus:
    ws_port: int
    http_port: int
    api_secret: str
    log: Path

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/janus"

    def log_text(self) -> str:
        return log_tail(self.log, 6000)


def _ws_accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def run_janus(tmp_path: Path, ready_timeout: float = 20.0, *, with_api_secret: bool = True,
              again: Janus | None = None) -> Iterator[Janus]:
    """``janus -F DIR`` on free loopback ports, stopped afterwards; yields once its WebSocket API listens.
    ``with_api_secret=False``: an open API (``api_secret`` ""), as browsers that talk to Janus directly need.
    ``again``: a Janus that was stopped, started again on its ports with its secret (a restart: nothing it knew)."""
    if not os.path.exists(JANUS):
        pytest.skip("janus is not installed")
    lib = janus_libdir()
    if lib is None:
        pytest.skip("no Janus plugin folder found")
    ws_port, http_port = (again.ws_port, again.http_port) if again is not None else (free_port(), free_port())
    folder = tmp_path / f"janus-{ws_port}"
    api_secret = "janus-test-" + secrets.token_hex(8) if with_api_secret else ""
    if again is not None:
        api_secret = again.api_secret
    write_config(folder, lib, ws_port=ws_port, http_port=http_port, api_secret=api_secret,
                 rtp_low=free_udp_block(RTP_PORTS), rtp_ports=RTP_PORTS, debug_level=4)
    server = Janus(ws_port, http_port, api_secret, tmp_path / f"janus-{ws_port}{'-again' if again else ''}.log")
    with run_daemon(janus_args(JANUS, folder), log=server.log, cwd=folder, ready=lambda: _ws_accepts(ws_port),
                    ready_timeout=ready_timeout, waiting_for="listen", log_text=server.log_text):
        yield server
