"""Real rtc-agent nodes as separate processes on one machine, sharing a Redis state store (issue 24, replicas).

:class:`Node` runs ``rtc-agent serve`` in a subprocess on a free loopback port with ``node_url`` set to that
address, the shared ``node_secret`` and ``state_url``, and stops it with SIGTERM (:meth:`Node.stop`) or
``kill -9`` (:meth:`Node.kill`). ``scripted=True`` runs the very same command line (``rtc_agent.cli.main(["serve",
...])``) through this module, whose only change is the engines: a scripted VAD (loud audio is speech) and a
scripted ASR that hears ``"<words> spoken through <node>"`` in every utterance, so captions need no model and
say which node made them. ``scripted=False`` is the plain ``python -m rtc_agent serve`` with nothing preloaded
(fine for sessions that send no speech).

Secrets (API keys, node secret, Redis password) travel in the environment, not on the command line. Each node
logs to ``<folder>/<name>.log``; :meth:`Node.log_text` reads it for failure messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.conftest import free_port

REPO = Path(__file__).resolve().parent.parent
NODE_SECRET = "node-secret-for-tests-0123456789"
WORDS = "hello everyone"
#: settings every test node gets: nothing preloaded or probed, no admission by the loaded test machine's lag
QUIET = {"preload": "", "speed_probe": "false", "admission_max_loop_lag_ms": "0",
         "admission_max_queue_delay_ms": "0", "log_level": "info"}


def spoken_text(node_name: str) -> str:
    """What the scripted ASR of node ``node_name`` hears in every utterance."""
    return f"{WORDS} spoken through {node_name}"


class Node:
    """One ``rtc-agent serve`` process (see the module docstring). ``settings`` are more options (names as in
    Settings; values as text); ``secrets`` go into the environment as ``RTC_AGENT_<NAME>``."""

    def __init__(self, folder: Path, name: str, *, state_url: str, scripted: bool = True,
                 settings: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.scripted = scripted
        self.options = {**QUIET, "host": "127.0.0.1", "port": str(self.port), "node_url": self.url,
                        "node_id": name, **{k: str(v) for k, v in (settings or {}).items()}}
        self.secrets = {"state_url": state_url, "node_secret": NODE_SECRET, **(secrets or {})}
        self.proc: subprocess.Popen | None = None
        self.log_path = folder / f"{name}.log"

    def command(self) -> list[str]:
        module = "tests.nodes" if self.scripted else "rtc_agent"
        args = [sys.executable, "-m", module, "serve"]
        for key, value in self.options.items():
            args += [f"--{key.replace('_', '-')}", value] if value not in ("true", "false") else \
                [f"--{'' if value == 'true' else 'no-'}{key.replace('_', '-')}"]
        return args

    def start(self) -> Node:
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1",
               **{f"RTC_AGENT_{k.upper()}": v for k, v in self.secrets.items()}}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.command(), cwd=str(REPO), env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self

    async def ready(self, timeout: float = 90.0) -> Node:
        """Wait until ``/health`` answers (the process may take a while to import on a loaded machine)."""
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(f"node {self.name} exited with {self.proc.returncode}:\n{self.log_text()}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"{self.url}/health", timeout=aiohttp.ClientTimeout(total=5)) as r:
                        if r.status < 500:
                            return self
                await asyncio.sleep(0.2)
        raise TimeoutError(f"node {self.name} did not answer /health within {timeout} s:\n{self.log_text()}")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """``kill -9``: no shutdown, no lease released."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the process holds its sockets but answers nothing (until :meth:`resume`)."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then ``kill -9`` if it has not exited within ``timeout``; the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def log_text(self, last: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-last:]
        except OSError:
            return ""


class FailoverAddress:
    """One address in front of several nodes, as a TCP load balancer with failover: each connection goes to the
    first upstream port that accepts it (so once a node is gone, to the next). Runs its own event loop in a
    thread; ``with FailoverAddress([port_a, port_b]) as front: front.url``."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="failover-address", daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def __enter__(self) -> FailoverAddress:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", self.port), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def shut() -> None:
            assert self._server is not None
            self._server.close()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for port in self.ports:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer),
                                 return_exceptions=True)
            return
        writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()


def scripted_engines(worker: Any, settings: Any) -> None:
    """The engines of a scripted node: loud audio is speech; every utterance is heard as :func:`spoken_text`."""
    from tests.fakes import ScriptedASR, ScriptedVAD, loud_above, register

    text = spoken_text(settings.node_id or "node")
    register(worker, "vad", ScriptedVAD(loud_above(0.05)), max_queue=256, max_batch=16)
    register(worker, "asr", ScriptedASR(lambda request: text), max_queue=64, concurrency=2)


def main(argv: list[str]) -> int:
    """``python -m tests.nodes serve ...``: ``rtc-agent serve`` with the scripted engines."""
    import rtc_agent.app
    from rtc_agent import cli

    rtc_agent.app.register_engines = scripted_engines  # the one difference from rtc-agent serve
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
