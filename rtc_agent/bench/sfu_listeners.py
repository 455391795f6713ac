"""The SFU benchmark's listeners' media: interpreter feeds received through Janus in a child process of its own.

In deployment each listener's browser decodes its audio on its own machine; here they all share the server's
cores. :class:`ListenerMedia` runs the subscribers in a separate process (``python -m
rtc_agent.bench.sfu_listeners``) at a lower CPU priority (``nice``), so the listeners' Opus decoding waits while the
server has work, and what the benchmark measures is the server, not its own clients. Decoding in that process
does not share the benchmark's interpreter lock with the speaker's publisher and the listeners' event channels.

The child's protocol (one JSON object per line): stdin gets ``{"url", "api_secret", "room", "subscriptions":
[{"feed", "token"}, ...]}``; stdout answers ``{"started": n, "failed": [error, ...]}`` once every subscription
has been tried, then ``{"heard": [frames, ...], "onsets": [[t, ...], ...]}`` every ``REPORT_S``: the 20 ms frames of
non-silent audio each subscription received so far, and the voice onsets it heard since the last report (the
``time.monotonic()`` of a non-silent frame after at least ``ONSET_GAP_S`` without one: the system's monotonic
clock, the same in the benchmark's process); it closes its subscribers and exits when stdin ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import Any

import numpy as np

REPORT_S = 0.5
NON_SILENT = 300  # peak (int16) of a frame that counts as heard
ONSET_GAP_S = 0.3  # a non-silent frame after this long without one starts a voice (clauses pause less)


class ListenerMedia:
    """The child process of the module docstring, seen from the benchmark: :meth:`start` subscribes, ``heard``
    follows the child's reports, :meth:`close` ends it. ``nice``: how much lower its CPU priority is."""

    def __init__(self, url: str, api_secret: str, room: int, subscriptions: list[dict[str, Any]], *,
                 nice: int = 10) -> None:
        self.request = {"url": url, "api_secret": api_secret, "room": room, "subscriptions": subscriptions}
        self.nice = nice
        self.heard = [0] * len(subscriptions)
        self.onsets: list[list[float]] = [[] for _ in subscriptions]  # per subscription, monotonic seconds
        self.failed: list[str] = []
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None

    async def start(self, timeout_s: float = 120.0) -> None:
        """Start the child and return once it has tried every subscription (``failed`` names the errors)."""
        self._process = await asyncio.create_subprocess_exec(
            "nice", "-n", str(self.nice), sys.executable, "-m", "rtc_agent.bench.sfu_listeners",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write((json.dumps(self.request) + "\n").encode())
        await self._process.stdin.drain()
        line = await asyncio.wait_for(self._process.stdout.readline(), timeout_s)
        if not line:
            raise RuntimeError(f"the listeners' process exited with status {await self._process.wait()}")
        self.failed = list(json.loads(line).get("failed", []))
        self._reader = asyncio.get_running_loop().create_task(self._read(self._process.stdout),
                                                              name="sfu-listeners-reports")

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        while line := await stdout.readline():
            report = json.loads(line)
            self.heard = list(report.get("heard", self.heard))
            for mine, new in zip(self.onsets, report.get("onsets", []), strict=False):
                mine.extend(new)

    async def close(self) -> None:
        if self._process is None:
            return
        process, self._process = self._process, None
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()
        if self._reader is not None:
            await self._reader  # the child's last report (stdout has ended)


async def _serve(request: dict[str, Any]) -> None:
    """The child: subscribe to every feed, report, and close when stdin ends."""
    from rtc_agent.rtc.sfu import FeedSubscriber, JanusClient

    subscriptions = request["subscriptions"]
    heard = [0] * len(subscriptions)
    onsets: list[list[float]] = [[] for _ in subscriptions]  # since the last report
    voiced_at = [float("-inf")] * len(subscriptions)

    def counter(i: int) -> Any:
        def sink(pcm: np.ndarray, _start_ms: int) -> None:
            if pcm.size and int(np.abs(pcm).max()) > NON_SILENT:
                heard[i] += 1
                now = time.monotonic()
                if now - voiced_at[i] >= ONSET_GAP_S:
                    onsets[i].append(round(now, 4))
                voiced_at[i] = now
        return sink

    def report() -> None:
        _report({"heard": heard, "onsets": onsets})
        for new in onsets:
            new.clear()

    janus = await JanusClient(request["url"], api_secret=request.get("api_secret", "")).connect()
    subscribers: list[FeedSubscriber] = []
    failed: list[str] = []
    try:
        for i, sub in enumerate(subscriptions):
            subscriber = FeedSubscriber(janus, int(request["room"]), int(sub["feed"]), [{"feed": int(sub["feed"])}],
                                        token=sub["token"], sink=counter(i))
            try:
                await subscriber.start()
                subscribers.append(subscriber)
            except Exception as exc:  # reported; the benchmark counts that listener as not hearing
                failed.append(str(exc))
        _report({"started": len(subscribers), "failed": failed})
        stdin_closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        while not stdin_closed.done():
            report()
            await asyncio.wait([stdin_closed], timeout=REPORT_S)
        report()
    finally:
        for subscriber in subscribers:
            with contextlib.suppress(Exception):
                await subscriber.close()
        await janus.close()


def _report(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    asyncio.run(_serve(json.loads(sys.stdin.readline())))


if __name__ == "__main__":
    main()
