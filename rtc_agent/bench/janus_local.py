"""A Janus for benchmarks that are given none: Debian's ``janus`` on free loopback ports with a private config.

:func:`local_janus` writes ``janus.jcfg`` (an ``api_secret``, a small RTP port range, only the VideoRoom plugin and
the WebSocket transport loaded, no admin API) into a temp folder, starts ``janus -F DIR`` and yields
``(ws_url, api_secret)`` once the WebSocket API listens; the process is always stopped afterwards.
:func:`janus_libdir`, :func:`write_config` and :func:`janus_args` are also the tests' Janus (tests/janus.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from rtc_agent.bench.common import free_port, free_udp_block

LIBDIRS = (Path("/usr/lib/x86_64-linux-gnu/janus"), Path("/usr/lib/aarch64-linux-gnu/janus"), Path("/usr/lib/janus"),
           Path("/usr/local/lib/janus"))
RTP_PORTS = 1000


def janus_libdir() -> Path | None:
    """The first of :data:`LIBDIRS` with a ``plugins`` folder (None: Janus is not installed)."""
    return next((d for d in LIBDIRS if (d / "plugins").is_dir()), None)


def _disabled(folder: Path, keep: set[str]) -> str:
    """Comma-separated library names in ``folder`` other than ``keep`` (Janus's ``disable`` lists)."""
    return ",".join(sorted(p.name for p in folder.glob("*.so") if p.name not in keep)) if folder.is_dir() else ""


def write_config(folder: Path, lib: Path, *, ws_port: int, api_secret: str, rtp_low: int, rtp_ports: int = RTP_PORTS,
                 http_port: int | None = None, debug_level: int = 3) -> None:
    """Janus's configs in ``folder`` (made if missing), its libraries from ``lib``: the WebSocket API on loopback
    ``ws_port``, and the HTTP API (``/janus``) on ``http_port`` when one is given; ``api_secret`` ("": an open API);
    RTP ports ``rtp_low`` .. ``rtp_low + rtp_ports - 1``; only VideoRoom and those transports loaded, no admin API."""
    folder.mkdir(parents=True, exist_ok=True)
    transports = {"libjanus_websockets.so"} | ({"libjanus_http.so"} if http_port is not None else set())
    (folder / "janus.jcfg").write_text(f"""
general: {{
    configs_folder = "{folder}"
    plugins_folder = "{lib / 'plugins'}"
    transports_folder = "{lib / 'transports'}"
    events_folder = "{lib / 'events'}"
    loggers_folder = "{lib / 'loggers'}"
    debug_level = {debug_level}
    {f'api_secret = "{api_secret}"' if api_secret else ""}
    session_timeout = 60
    admin_secret = "{secrets.token_hex(16)}"
}}
media: {{
    rtp_port_range = "{rtp_low}-{rtp_low + rtp_ports - 1}"
}}
nat: {{
    nice_debug = false
    ice_ignore_list = "vmnet"
}}
plugins: {{
    disable = "{_disabled(lib / 'plugins', {'libjanus_videoroom.so'})}"
}}
transports: {{
    disable = "{_disabled(lib / 'transports', transports)}"
}}
loggers: {{
    disable = "{_disabled(lib / 'loggers', set())}"
}}
events: {{
    broadcast = false
    disable = "{_disabled(lib / 'events', set())}"
}}
""")
    (folder / "janus.transport.websockets.jcfg").write_text(f"""
general: {{
    json = "plain"
    ws = true
    ws_port = {ws_port}
    ws_ip = "127.0.0.1"
    wss = false
}}
admin: {{
    admin_ws = false
    admin_wss = false
}}
""")
    if http_port is not None:
        (folder / "janus.transport.http.jcfg").write_text(f"""
general: {{
    json = "plain"
    base_path = "/janus"
    http = true
    port = {http_port}
    ip = "127.0.0.1"
    https = false
}}
admin: {{
    admin_http = false
    admin_https = false
}}
""")
    (folder / "janus.plugin.videoroom.jcfg").write_text("general: {\n}\n")


def janus_args(binary: str, folder: Path) -> list[str]:
    """The command line of ``binary`` on the configs :func:`write_config` wrote in ``folder``, logging to stdout."""
    return [binary, "-F", str(folder), "-C", str(folder / "janus.jcfg"), "-o"]


@contextlib.asynccontextmanager
async def local_janus(ready_timeout_s: float = 30.0) -> AsyncIterator[tuple[str, str]]:
    """``(ws_url, api_secret)`` of a Janus started for the benchmark (SystemExit when janus is missing)."""
    binary = shutil.which("janus")
    lib = janus_libdir()
    if binary is None or lib is None:
        raise SystemExit("janus is not installed (apt-get install janus), or give --sfu-url")
    ws_port, secret = free_port(), "bench-" + secrets.token_hex(12)
    rtp_low = free_udp_block(RTP_PORTS)
    with tempfile.TemporaryDirectory(prefix="rtc-agent-janus-") as tmp:
        folder = Path(tmp)
        write_config(folder, lib, ws_port=ws_port, api_secret=secret, rtp_low=rtp_low)
        log = open(folder / "janus.log", "wb")  # noqa: SIM115 - closed below, after the process
        process = await asyncio.create_subprocess_exec(*janus_args(binary, folder), stdout=log,
                                                       stderr=asyncio.subprocess.STDOUT)
        try:
            deadline = asyncio.get_running_loop().time() + ready_timeout_s
            while True:
                try:
                    _reader, writer = await asyncio.open_connection("127.0.0.1", ws_port)
                    writer.close()
                    break
                except OSError:
                    if process.returncode is not None or asyncio.get_running_loop().time() > deadline:
                        raise SystemExit(f"janus did not start: {(folder / 'janus.log').read_text()[-2000:]}") from None
                    await asyncio.sleep(0.1)
            yield f"ws://127.0.0.1:{ws_port}", secret
        finally:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), 10)
                except TimeoutError:
                    process.kill()
                    await process.wait()
            log.close()
