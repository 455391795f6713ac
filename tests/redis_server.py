"""Debian's ``redis-server`` for tests: on a free loopback port with a password and no persistence, started through
:func:`tests.daemons.run_daemon` (its output in a log file, waited for until it answers PING, always stopped)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.daemons import log_tail, run_daemon

PASSWORD = "state-test-password-123"


def _answers(port: int) -> bool:
    import redis

    client = redis.Redis(port=port, password=PASSWORD, socket_connect_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
    finally:
        client.close()


@contextlib.contextmanager
def run_redis(folder: Path, ready_timeout: float = 15.0) -> Iterator[str]:
    """A Redis server in ``folder``; yields its URL (password included) once it answers. Skips the test when
    ``redis-server`` is not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server): the Redis backend is untested")
    port = free_port()
    log = folder / f"redis-{port}.log"
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), "--save", "",
            "--appendonly", "no", "--requirepass", PASSWORD]
    with run_daemon(args, log=log, cwd=folder, ready=lambda: _answers(port), ready_timeout=ready_timeout,
                    waiting_for="answer PING", log_text=lambda: log_tail(log, 2000), period_s=0.05):
        yield f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
