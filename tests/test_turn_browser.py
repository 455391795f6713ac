"""TURN from real browsers: headless Chromium forced to relay-only ICE (the pages' ``?ice=relay`` debug option)
through a real coturn on loopback (tests/coturn.py), against a real ``rtc-agent serve`` whose settings point
``turn_urls``/``turn_secret`` at it.

- The echo app over a relay-only server session: media flows both ways and the selected pair is a relay one;
  the running session fetches fresh credentials naming itself (``GET /v1/sessions/{id}/ice-servers``).
- Two /call pages: their browser-to-browser mesh connects relay-only and video frames arrive.
- The mesh's credential refresh, driven by a fake clock in the page: due at 80 % of ``ttl_s``, applied to the
  open connection (``setConfiguration``), a failed fetch retried with backoff, nothing scheduled after leaving.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time

import numpy as np
import pytest

from tests.browser import BrowserPage, chromium_page, gated_tone_wav, launch_page, requires_chromium, serve
from tests.coturn import requires_coturn, run_coturn
from tests.speech import write_wav

pytestmark = [*requires_chromium, requires_coturn]
pytest.importorskip("playwright.sync_api")

TTL_S = 60  # the shortest turn_ttl_s allowed: refresh due after 48 s

# the relay listens on 127.0.0.1 here, so the server must take loopback candidates (a deployment's are public)
LOOPBACK = ("--ice-allow-loopback-candidates",)

SELECTED_PAIR = """async () => {
  const { selectedPair } = await import('/static/js/ice-servers.js');
  return selectedPair(await window.rtcAgent.client.pc.getStats());
}"""


def test_echo_over_a_relay_only_server_session(tmp_path):
    wav = gated_tone_wav(tmp_path / "tone.wav")
    with run_coturn(tmp_path) as turn, serve(tmp_path, *turn.server_args(), "--turn-ttl-s", str(TTL_S),
                                             *LOOPBACK) as served, \
            chromium_page(served, tmp_path, audio_file=wav) as b:
        b.open("/echo?ice=relay")
        b.page.click("#connect")
        b.wait_js("connect through the relay",
                  "document.querySelector('#connection-state').textContent.trim() === 'connected'", 30_000)
        assert b.page.evaluate("window.rtcAgent.client.pc.getConfiguration().iceTransportPolicy") == "relay"
        b.wait_js("hear the echo through the relay",
                  "parseFloat(document.querySelector('#output-level').dataset.peak || '0') > 0.02", 20_000)
        pair = b.page.evaluate(SELECTED_PAIR)
        assert pair["localCandidateType"] == "relay", b.diagnose(f"selected pair {pair}\n{turn.log_text()}")
        fresh = b.page.evaluate("window.rtcAgent.client.refreshIceServers()")
        session_id = b.page.evaluate("window.rtcAgent.client.sessionId")
        (server,) = fresh["iceServers"]
        assert server["username"].endswith(f":{session_id}") and fresh["ttlS"] == TTL_S, fresh
        assert fresh["iceTransportPolicy"] == "relay" and fresh["refreshAfterS"] == int(TTL_S * 0.8)
        assert not b.page_errors(), b.diagnose("no page errors")


def _call_media(tmp_path, name: str, pattern: str):
    wav = write_wav(tmp_path / f"{name}.wav", np.zeros(48000, dtype=np.int16), 48000)  # silence: no ASR needed
    y4m = tmp_path / f"{name}.y4m"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"{pattern}=size=320x240:rate=10",
                    "-t", "2", "-pix_fmt", "yuv420p", str(y4m)], check=True)
    return wav, y4m


def _wait_for_mesh_video(b: BrowserPage, timeout_s: float) -> dict:
    """The one remote tile's numbers once its mesh connection is up and has decoded video frames."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = b.page.evaluate("window.rtcAgent.app.stats()")
        if len(stats) == 1 and stats[0]["state"] == "connected" and stats[0]["framesDecoded"] > 5:
            return stats[0]
        if time.monotonic() > deadline:
            raise AssertionError(b.diagnose(f"mesh video through the relay: {stats}"))
        time.sleep(0.5)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg missing")
def test_call_mesh_connects_relay_only(tmp_path):
    from playwright.sync_api import sync_playwright

    people = [("Ann", "testsrc2"), ("Ben", "smptebars")]
    with run_coturn(tmp_path) as turn, serve(tmp_path, *turn.server_args(), *LOOPBACK) as served, \
            sync_playwright() as pw:
        browsers, pages = [], []
        try:
            for name, pattern in people:
                wav, y4m = _call_media(tmp_path, name, pattern)
                browser, b = launch_page(pw, served, tmp_path, audio_file=wav, video_file=y4m)
                browsers.append(browser)
                pages.append(b)
                b.open(f"/call?room=relay-room&name={name}&speak=en&hear=en&ice=relay")
                b.page.click("#join")
                b.wait_js("joined", "window.rtcAgent.app.participantId() !== null", 30_000)
            for b in pages:
                peer = _wait_for_mesh_video(b, 40.0)
                assert peer["localCandidateType"] == "relay" and peer["remoteCandidateType"] == "relay", \
                    b.diagnose(f"mesh pair {peer}\n{turn.log_text()}")
                assert peer["turnExpiry"] is not None, b.diagnose("the mesh uses expiring TURN credentials")
                assert not b.page_errors(), b.diagnose("no page errors")
        finally:
            for browser in browsers:
                with contextlib.suppress(Exception):
                    browser.close()


# A fake clock for the mesh's IceRefresher: timers fire when the test advances time; fetches are real (the
# server's GET /v1/ice-servers), so the test waits for each one to land.
REFRESH_SCRIPT = """async (ttl) => {
  const { Mesh } = await import('/static/js/mesh.js');
  const client = window.rtcAgent.client;
  let now = 1e12;
  const timers = new Map();
  let nextId = 1;
  const clock = {
    now: () => now,
    setTimeout: (fn, ms) => { timers.set(nextId, { at: now + ms, fn }); return nextId++; },
    clearTimeout: (id) => { timers.delete(id); },
  };
  const settle = () => new Promise((r) => setTimeout(r, 50));
  async function advance(ms) {
    now += ms;
    for (const [id, t] of [...timers]) if (t.at <= now) { timers.delete(id); t.fn(); }
    while (mesh.ice._inflight) await mesh.ice._inflight;
    await settle();
  }
  let failing = false;
  let fetches = 0;
  const refreshConfig = async () => {
    fetches += 1;
    if (failing) throw new Error('offline');
    return client.fetchIceServers(null);
  };
  const initial = await client.fetchIceServers(null);
  delete initial.receivedAt;  // stamped on the fake clock instead
  const mesh = new Mesh({ selfId: 'a', signal: () => {}, rtcConfig: initial, refreshConfig, clock });
  const { pc } = mesh.connect('b');
  const username = () => pc.getConfiguration().iceServers[0].username;
  const out = { first: username(), ttlS: initial.ttlS };
  await advance((ttl * 0.8 - 1) * 1000);
  out.fetchesBeforeDue = fetches;
  await advance(2000);
  out.fetchesAfterDue = fetches;
  out.second = username();
  out.refreshes = mesh.ice.refreshes;
  failing = true;
  await advance(ttl * 0.8 * 1000);  // due again: fails
  await advance(2000);  // first retry after 2 s: fails
  await advance(4000);  // then 4 s: fails
  out.failures = mesh.ice.failures;
  out.keptOnFailure = username() === out.second;
  failing = false;
  await advance(8000);  // then 8 s: works
  out.third = username();
  out.failuresAfter = mesh.ice.failures;
  mesh.closeAll();
  out.timersAfterClose = timers.size;
  out.stale = mesh.ice.stale();
  return out;
}"""


def test_mesh_refreshes_turn_credentials_on_schedule(tmp_path):
    with run_coturn(tmp_path) as turn, serve(tmp_path, *turn.server_args(), "--turn-ttl-s", str(TTL_S)) as served, \
            chromium_page(served, tmp_path) as b:
        b.open("/call?room=clock")
        out = b.page.evaluate(REFRESH_SCRIPT, TTL_S)
        assert out["ttlS"] == TTL_S, out
        assert out["fetchesBeforeDue"] == 0 and out["fetchesAfterDue"] == 1 and out["refreshes"] == 1, out
        assert out["second"] != out["first"], "the open connection got the fresh credentials"
        assert out["failures"] == 3 and out["keptOnFailure"], out
        assert out["third"] not in (out["first"], out["second"]) and out["failuresAfter"] == 0, out
        assert out["timersAfterClose"] == 0, "no refresh scheduled after the mesh closed"
        assert not b.page_errors(), b.diagnose("no page errors")
