"""Support for the headless-Chromium tests: a real `rtc-agent serve` process, Debian's Chromium with fake
devices (DEVELOPERS.md flags), and failure reports with a screenshot, the page state, the event log, the browser
console and the server log. Never downloads a browser.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.daemons import run_daemon

CHROMIUM = "/usr/bin/chromium"
REPO_ROOT = Path(__file__).resolve().parent.parent

requires_chromium = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is not installed"),
]


def browser_test(fn: Any) -> Any:
    """Marks one test of a module with other tests as a browser test (``requires_chromium``)."""
    for mark in requires_chromium:
        fn = mark(fn)
    return fn


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_wav(path: Path, pcm: np.ndarray, rate: int) -> Path:
    """Float samples in -1..1 as a 16-bit mono WAV (Chromium's fake-capture format)."""
    data = (np.clip(pcm, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(data)
    return path


def gated_tone_wav(path: Path, seconds: float = 3.0, rate: int = 48000) -> Path:
    """440 Hz at amplitude 0.3, 400 ms on / 200 ms off (the gaps give the level meters clear onsets)."""
    t = np.arange(int(seconds * rate)) / rate
    gate = (np.mod(t, 0.6) < 0.4).astype(np.float64)
    ramp = int(0.005 * rate)  # 5 ms fades so the gaps do not click
    gate = np.convolve(gate, np.ones(ramp) / ramp, mode="same")
    return write_wav(path, 0.3 * np.sin(2 * np.pi * 440.0 * t) * gate, rate)


def tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


@dataclass
class Served:
    base: str
    log: Path
    proc: subprocess.Popen


@contextlib.contextmanager
def serve(tmp_path: Path, *args: str, ready_timeout: float = 90.0) -> Iterator[Served]:
    """`python -m rtc_agent serve` on a free loopback port, stopped afterwards."""
    port = free_port()
    log_path = tmp_path / "server.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    base = f"http://127.0.0.1:{port}"
    with run_daemon([sys.executable, "-m", "rtc_agent", "serve", "--host", "127.0.0.1", "--port", str(port), *args],
                    log=log_path, cwd=REPO_ROOT, env=env, name="server", ready=lambda: _healthy(base),
                    ready_timeout=ready_timeout, waiting_for="answer /health", log_text=lambda: tail(log_path),
                    period_s=0.25, stop_timeout=10.0) as proc:
        yield Served(base, log_path, proc)


def _healthy(base: str) -> bool:
    """``GET /health`` answers 200."""
    with contextlib.suppress(urllib.error.URLError, ConnectionError, OSError), urllib.request.urlopen(
        f"{base}/health", timeout=2
    ) as res:
        return res.status == 200
    return False


def chromium_args(audio_file: Path | None = None, video_file: Path | None = None) -> list[str]:
    args = [
        "--no-sandbox", "--disable-gpu", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
        "--disable-quic", "--autoplay-policy=no-user-gesture-required",
    ]
    if audio_file is not None:
        args.append(f"--use-file-for-fake-audio-capture={audio_file}")
    if video_file is not None:
        args.append(f"--use-file-for-fake-video-capture={video_file}")
    return args


@dataclass
class BrowserPage:
    """A page in headless Chromium, with the console captured for failure reports."""

    page: Any
    served: Served
    shots: Path
    console: list[str] = field(default_factory=list)

    def diagnose(self, step: str, err: BaseException | None = None) -> str:
        page = self.page
        shot = self.shots / f"failure-{step.split()[0].strip('/')}.png"
        with contextlib.suppress(Exception):
            page.screenshot(path=str(shot), full_page=True)
        try:
            log_text = page.inner_text("#event-log", timeout=2000)
        except Exception:
            log_text = "<no event log>"
        try:
            state = page.evaluate("window.rtcAgent && window.rtcAgent.state()")
        except Exception as exc:
            state = f"<state() failed: {exc}>"
        try:
            banner = page.evaluate(
                "(() => { const b = document.getElementById('error');"
                " const m = document.getElementById('error-message') || b;"
                " return !b || b.hidden ? '' : m.textContent.trim(); })()"
            )
        except Exception:
            banner = ""
        return (
            f"{step} failed{f': {err}' if err else ''}\n"
            f"state: {state}\nerror banner: {banner!r}\nscreenshot: {shot}\n"
            f"--- event log ---\n{log_text}\n"
            "--- console ---\n" + "\n".join(self.console[-60:]) + "\n"
            f"--- server log ---\n{tail(self.served.log)}"
        )

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run a Playwright action; a timeout becomes an assertion with the full diagnosis."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            return fn()
        except PlaywrightTimeout as exc:
            raise AssertionError(self.diagnose(name, exc)) from None

    def wait_js(self, name: str, expression: str, timeout_ms: int) -> None:
        """Wait until `expression` is truthy. Not for a promise (wait_for_function takes any promise as truthy at
        once): use :meth:`wait_value` for those."""
        self.step(name, lambda: self.page.wait_for_function(expression, timeout=timeout_ms))

    def wait_value(self, name: str, expression: str, timeout_ms: int, period_s: float = 0.1) -> Any:
        """Poll `expression` (a value or a promise, e.g. ``window.rtcAgent.app.stats().then(...)``) until it is
        truthy, and return it; the full diagnosis after `timeout_ms`."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            value = self.page.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(self.diagnose(f"{name} (last value: {value!r})"))
            time.sleep(period_s)

    def open(self, path: str) -> None:
        self.step(f"load {path}", lambda: self.page.goto(f"{self.served.base}{path}", wait_until="load"))
        self.wait_js("page ready", "document.body.dataset.ready === 'true'", 10_000)

    def state(self) -> str:
        return self.page.inner_text("#connection-state").strip()

    def page_errors(self) -> list[str]:
        return [c for c in self.console if c.startswith("[pageerror]")]


def launch_page(pw: Any, served: Served, shots: Path, **media: Path | None) -> tuple[Any, BrowserPage]:
    """A new Chromium (the caller closes it) and its page with fake devices (``audio_file=``, ``video_file=``),
    the console captured for failure reports."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=chromium_args(**media))
    page = browser.new_context().new_page()
    wrapped = BrowserPage(page, served, shots)
    page.on("console", lambda m: wrapped.console.append(f"[{m.type}] {m.text}"))
    page.on("pageerror", lambda e: wrapped.console.append(f"[pageerror] {e}"))
    return browser, wrapped


@contextlib.contextmanager
def chromium_page(served: Served, shots: Path, **media: Path | None) -> Iterator[BrowserPage]:
    """A fresh Chromium page with fake devices (``audio_file=``, ``video_file=``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = None
        try:
            browser, wrapped = launch_page(pw, served, shots, **media)
            yield wrapped
        finally:
            if browser is not None:
                browser.close()
