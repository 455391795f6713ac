"""End to end through a real browser: headless Chromium with a fake microphone (a WAV file) connects to the
echo app of a real `rtc-agent serve` process and must hear its own audio come back.

Needs /usr/bin/chromium (the system package; this test never downloads browsers) and the `playwright` Python
package. Run: ``pytest -m browser tests/test_browser_echo.py``.
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
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = "/usr/bin/chromium"
REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is not installed"),
]

sync_api = pytest.importorskip("playwright.sync_api")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_tone_wav(path: Path, seconds: float = 3.0, rate: int = 48000) -> Path:
    """440 Hz at amplitude 0.3, 400 ms on / 200 ms off (the gaps give the level meters clear onsets)."""
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 440.0 * t)
    gate = (np.mod(t, 0.6) < 0.4).astype(np.float64)
    # 5 ms fades at each edge so the gaps do not click.
    ramp = int(0.005 * rate)
    kernel = np.ones(ramp) / ramp
    gate = np.convolve(gate, kernel, mode="same")
    pcm = np.clip(tone * gate, -1.0, 1.0)
    data = (pcm * 32767).astype("<i2").tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(data)
    return path


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    log_path = tmp_path / "server.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rtc_agent", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=str(REPO_ROOT),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode} before /health answered:\n{_tail(log_path)}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as res:
                    if res.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server did not answer /health within 90 s:\n{_tail(log_path)}")
            time.sleep(0.25)
        yield {"base": base, "log": log_path, "proc": proc}
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def test_echo_plays_microphone_back(server, tmp_path):
    wav = _write_tone_wav(tmp_path / "tone.wav")
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
        "--autoplay-policy=no-user-gesture-required",
    ]
    console: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            context = browser.new_context()
            page = context.new_page()
            page.on("console", lambda m: console.append(f"[{m.type}] {m.text}"))
            page.on("pageerror", lambda e: console.append(f"[pageerror] {e}"))

            def diagnose(step: str, err: BaseException | None = None) -> str:
                shot = tmp_path / "echo-failure.png"
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
                    f"--- console ---\n" + "\n".join(console[-60:]) + "\n"
                    f"--- server log ---\n{_tail(server['log'])}"
                )

            def step(name, fn):
                try:
                    return fn()
                except sync_api.TimeoutError as exc:
                    raise AssertionError(diagnose(name, exc)) from None

            step("load /echo", lambda: page.goto(f"{server['base']}/echo", wait_until="load"))
            step(
                "page ready",
                lambda: page.wait_for_function("document.body.dataset.ready === 'true'", timeout=10_000),
            )
            assert page.inner_text("#connection-state").strip() == "idle", diagnose("initial state")

            page.click("#connect")
            step(
                "connect",
                lambda: page.wait_for_function(
                    "document.querySelector('#connection-state').textContent.trim() === 'connected'",
                    timeout=20_000,
                ),
            )
            assert page.inner_text("#session-id").strip() not in ("", "—"), diagnose("session id shown")

            step(
                "hear the echo (output peak > 0.02)",
                lambda: page.wait_for_function(
                    "parseFloat(document.querySelector('#output-level').dataset.peak || '0') > 0.02",
                    timeout=15_000,
                ),
            )
            peak = float(page.get_attribute("#output-level", "data-peak") or 0)
            assert 0.02 < peak <= 1.0, diagnose(f"peak {peak}")
            # The heartbeat answered at least once: RTT is shown.
            step(
                "rtt",
                lambda: page.wait_for_function(
                    "document.querySelector('#rtt').dataset.last !== undefined",
                    timeout=5_000,
                ),
            )

            page.click("#disconnect")
            step(
                "disconnect",
                lambda: page.wait_for_function(
                    "document.querySelector('#connection-state').textContent.trim() === 'disconnected'",
                    timeout=10_000,
                ),
            )
            errors = [c for c in console if c.startswith("[pageerror]")]
            assert not errors, diagnose("no page errors")
        finally:
            browser.close()
