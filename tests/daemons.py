"""Debian daemons for tests (Janus, coturn's ``turnserver``): started with their output in a log file, waited for
until a probe answers, always stopped. Free ports come from :mod:`rtc_agent.bench.common` (``free_port`` for TCP,
``free_udp_block`` for a media or relay range)."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest


def log_tail(log: Path, chars: int) -> str:
    """The last ``chars`` characters of ``log`` ("" when it cannot be read)."""
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


@contextlib.contextmanager
def run_daemon(args: Sequence[str], *, log: Path, cwd: Path, ready: Callable[[], bool], ready_timeout: float,
               waiting_for: str, log_text: Callable[[], str], env: Mapping[str, str] | None = None,
               name: str | None = None, period_s: float = 0.1,
               stop_timeout: float = 5.0) -> Iterator[subprocess.Popen[bytes]]:
    """``args`` started in ``cwd`` with stdout and stderr into ``log``; yields once ``ready()`` (tried every 0.1 s).
    The test fails with ``log_text()`` when the process exits first or ``ready_timeout`` seconds pass
    (``waiting_for`` says what it did not do: "listen"; ``name``, default the program's, names it there). ``env``:
    its environment (default: this process's). Terminated afterwards, killed after ``stop_timeout`` seconds."""
    name = name or Path(args[0]).name
    with open(log, "wb") as out:
        proc = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT, cwd=str(cwd),
                                env=None if env is None else dict(env))
    try:
        deadline = time.monotonic() + ready_timeout
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}:\n{log_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{name} did not {waiting_for} within {ready_timeout} s:\n{log_text()}")
            time.sleep(period_s)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
