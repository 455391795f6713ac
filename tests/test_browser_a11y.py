"""Accessibility of every page in headless Chromium (issue 22, item 5): axe-core finds no serious or critical
violation on any page, in the light and the dark theme, at 1280 px and at 320 px wide; nothing scrolls sideways
at 320 px; no two items of a row of controls overlap; a caption in progress reaches no live region and a finished
one reaches exactly one.

axe-core is the official ``axe.min.js`` shipped in the ``axe-playwright-python`` wheel (the ``dev`` extra,
installed by ``make test``); only that file is read, and it is put into each page after it loads: nothing is
fetched at test time. The pages are checked idle and again with content in them (captions, translations, an
error banner, a call's controls enabled), so the colours of what appears later are measured too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import BrowserPage, Served, launch_page, requires_chromium, serve

pytestmark = requires_chromium
pytest.importorskip("playwright.sync_api")
axe_package = pytest.importorskip("axe_playwright_python", reason="the dev extra's axe-playwright-python")

AXE_JS = Path(axe_package.__file__).parent / "axe.min.js"
KEY = "a11y-test-key-0123456789abcdef"
PAGES = ["/", "/captions", "/interpret", "/agent", "/echo", "/call", "/realtime-demo"]
WIDTHS = (1280, 320)
THEMES = ("light", "dark")
BLOCKING = ("serious", "critical")

#: Server events each page is given (through its client, as if the server had sent them), so that what appears
#: during a session is on the page when axe looks. An ``error`` event shows the error banner on every app page.
CONTENT = {
    "/captions": [
        {"type": "caption.final", "segment_id": "s1", "text": "Hello there.", "audio_start_ms": 1200,
         "audio_end_ms": 2500, "language": "en"},
        {"type": "caption.translation", "segment_id": "s1", "language": "es", "text": "Hola.",
         "speaker": {"participant_id": "p1", "name": "Ana"}},
        {"type": "input_audio_buffer.speech_started", "audio_start_ms": 3000},
        {"type": "caption.partial", "segment_id": "s2", "committed": "still", "tentative": "talking",
         "audio_start_ms": 3000, "audio_end_ms": 3600},
        {"type": "vision.round.started", "round_id": "r1", "prompt": "what is on the desk?"},
        {"type": "vision.text.delta", "round_id": "r1", "delta": "A laptop.", "frame_ts": 1.0},
    ],
    "/interpret": [
        {"type": "caption.final", "segment_id": "s1", "text": "Buenos días.", "language": "es",
         "audio_start_ms": 0, "audio_end_ms": 1600},
        {"type": "translation.chunk", "index": 0, "action": "EMIT", "text": "Good morning.",
         "audio_start_ms": 0, "audio_end_ms": 1600, "latency_ms": 300},
        {"type": "translation.chunk", "index": 1, "action": "WAIT", "text": "", "audio_start_ms": 1600,
         "audio_end_ms": 2400},
        {"type": "translation.chunk", "index": 2, "action": "SKIP", "text": "", "audio_start_ms": 2400,
         "audio_end_ms": 3200},
        {"type": "translation.flush", "trigger": "silence", "text": "See you."},
        {"type": "translation.reset", "reason": "length"},
        {"type": "caption.partial", "segment_id": "s2", "committed": "Hasta", "tentative": "luego",
         "audio_start_ms": 4000, "audio_end_ms": 4500, "language": "es"},
    ],
    "/agent": [
        {"type": "conversation.item.input_audio_transcription.completed", "item_id": "u1",
         "transcript": "What is 17 times 23?"},
        {"type": "response.created", "response": {"id": "r1"}},
        {"type": "response.function_call_arguments.done", "response_id": "r1", "call_id": "c1",
         "name": "calculate", "arguments": "{\"expression\": \"17 * 23\"}"},
        {"type": "conversation.item.created", "item": {"type": "function_call_output", "call_id": "c1",
                                                       "output": "{\"result\": 391}"}},
        {"type": "response.output_audio_transcript.delta", "response_id": "r1", "delta": "It is 391."},
        {"type": "response.done", "response": {"id": "r1", "status": "completed"}},
    ],
    "/call": [
        {"type": "room.participant.joined", "participant": {"participant_id": "p2", "name": "Ana",
                                                            "language": "es", "listen_language": "en"}},
        {"type": "caption.final", "segment_id": "a1", "text": "Hola a todos.", "audio_start_ms": 0,
         "audio_end_ms": 900, "speaker": {"participant_id": "p2", "name": "Ana"}},
        {"type": "caption.translation", "segment_id": "a1", "language": "en", "text": "Hello everyone.",
         "speaker": {"participant_id": "p2", "name": "Ana"}},
        {"type": "caption.partial", "segment_id": "a2", "committed": "y", "tentative": "luego",
         "audio_start_ms": 1000, "audio_end_ms": 1400, "speaker": {"participant_id": "p2", "name": "Ana"}},
    ],
}
ERROR_EVENT = {"type": "error", "error": {"type": "invalid_request_error", "code": "a11y_check",
                                          "message": "A test error, to measure the banner."}}

#: What a page shows only in a session, shown for the content pass: the call card of a participant in a call
#: (``body[data-call-phase]``, static/js/call/call-status.js).
IN_SESSION = {"/call": "connected"}

#: The controls a session enables (disabled ones are exempt from the contrast rule): enabled here for the
#: content pass so their colours are measured as a participant sees them.
ENABLE = "#disconnect, #mute, #camera-toggle, #mute-mic, #mute-camera, #leave"

#: Colours are measured where they end, not halfway through a transition.
NO_TRANSITIONS = "*, *::before, *::after { transition: none !important; animation: none !important; }"

AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 6).map((n) => ({target: n.target.join(' '), summary: n.failureSummary}))}));
}"""

OVERFLOW = """() => {
  const width = window.innerWidth;
  const wide = [...document.querySelectorAll('body *')].filter((e) => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.right > width + 0.5 && getComputedStyle(e).position !== 'fixed';
  }).slice(0, 8).map((e) => `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}.${[...e.classList].join('.')}`
    + ` right=${Math.round(e.getBoundingClientRect().right)}`);
  return {scrollWidth: document.documentElement.scrollWidth, innerWidth: width, wide};
}"""

#: Controls and readouts laid out side by side: no two of a row's items (nor anything inside them) may overlap,
#: such as the /captions speech selector lying over the language readout.
OVERLAPS = """() => {
  const boxes = (e) => [e, ...e.querySelectorAll('*')].map((x) => x.getBoundingClientRect())
    .filter((r) => r.width > 0 && r.height > 0);
  const hit = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5
    && b.top < a.bottom - 0.5;
  const name = (e) => `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}${e.className ? '.' + e.className : ''}`;
  const out = [];
  for (const row of document.querySelectorAll('.card-head, .head-right, .download-row, .log-tools, .button-row')) {
    const items = [...row.children]
      .filter((e) => e.getClientRects().length && getComputedStyle(e).position !== 'absolute');
    for (let i = 0; i < items.length; i++) {
      for (let j = i + 1; j < items.length; j++) {
        if (boxes(items[i]).some((a) => boxes(items[j]).some((b) => hit(a, b)))) {
          out.push(`${name(items[i])} overlaps ${name(items[j])}`);
        }
      }
    }
  }
  return out;
}"""


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("a11y-open"), "--preload", "") as served:
        yield served


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("a11y-keyed"), "--preload", "", "--api-keys", KEY) as served:
        yield served


def _open(b: BrowserPage, path: str) -> None:
    b.step(f"load {path}", lambda: b.page.goto(f"{b.served.base}{path}", wait_until="load"))
    if path != "/":  # the index has no session to get ready
        b.wait_js(f"{path} ready", "document.body.dataset.ready === 'true'", 15_000)
    b.page.add_script_tag(content=AXE_JS.read_text(encoding="utf-8"))
    b.page.add_style_tag(content=NO_TRANSITIONS)


def _fill(b: BrowserPage, path: str) -> None:
    """The page with a session's content in it (see ``CONTENT``), its controls enabled."""
    events = [*CONTENT.get(path, []), ERROR_EVENT]
    b.page.evaluate("""([events, enable, phase]) => {
      const client = window.rtcAgent && window.rtcAgent.client;
      if (client) for (const ev of events) client._dispatch(ev);
      for (const e of document.querySelectorAll(enable)) e.disabled = false;
      if (phase) document.body.dataset.callPhase = phase;
    }""", [events, ENABLE, IN_SESSION.get(path)])


def _settle(b: BrowserPage) -> None:
    b.page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")


def _problems(b: BrowserPage, label: str) -> list[str]:
    """Blocking axe violations, overlapping items of a row, and (at 320 px) sideways scrolling of the page as it
    is now, one line each."""
    out = []
    for v in b.page.evaluate(AXE_RUN):
        if v["impact"] in BLOCKING:
            nodes = "; ".join(f"{n['target']}: {n['summary']}".replace("\n", " ") for n in v["nodes"])
            out.append(f"{label}: {v['impact']} {v['id']} ({v['help']}): {nodes}")
    out += [f"{label}: {overlap}" for overlap in b.page.evaluate(OVERLAPS)]
    if b.page.viewport_size["width"] <= 320:
        box = b.page.evaluate(OVERFLOW)
        if box["scrollWidth"] > box["innerWidth"]:
            out.append(f"{label}: scrolls sideways, scrollWidth {box['scrollWidth']} > {box['innerWidth']}: "
                       f"{box['wide']}")
    return out


def _check_everywhere(b: BrowserPage, path: str, *, fill: bool) -> list[str]:
    problems: list[str] = []
    for theme in THEMES:
        b.page.emulate_media(color_scheme=theme)
        for width in WIDTHS:
            b.page.set_viewport_size({"width": width, "height": 900})
            _open(b, path)
            _settle(b)
            problems += _problems(b, f"{path} {theme} {width}px idle")
            if fill:
                _fill(b, path)
                _settle(b)
                problems += _problems(b, f"{path} {theme} {width}px with content")
    return problems


@pytest.mark.parametrize("path", PAGES)
def test_no_serious_violation_in_either_theme_at_either_width(playwright, open_server, tmp_path, path):
    browser, b = launch_page(playwright, open_server, tmp_path)
    try:
        problems = _check_everywhere(b, path, fill=path != "/realtime-demo" and path != "/")
        assert not problems, "\n".join(problems)
        assert not b.page_errors(), b.diagnose("no page errors")
    finally:
        browser.close()


@pytest.mark.parametrize("path", ["/captions", "/realtime-demo"])
def test_sign_in_pages_have_no_serious_violation(playwright, keyed_server, tmp_path, path):
    """With keys set, the app pages show the sign-in card and the demo page its note; a refused key its error."""
    browser, b = launch_page(playwright, keyed_server, tmp_path)
    try:
        problems = _check_everywhere(b, path, fill=False)
        if path == "/captions":
            b.page.fill("#signin-key", "not-the-key")
            b.page.click("#signin button[type=submit]")
            b.wait_js("refused", "document.body.dataset.ready === 'true' && !!document.querySelector('.signin-error')",
                      10_000)
            b.page.add_script_tag(content=AXE_JS.read_text(encoding="utf-8"))
            problems += _problems(b, f"{path} refused key")
        assert not problems, "\n".join(problems)
    finally:
        browser.close()


LIVE_TEXT = """() => [...document.querySelectorAll('[aria-live], [role=log], [role=status], [role=alert]')]
  .filter((e) => {
    const live = e.getAttribute('aria-live');
    return live ? live !== 'off' : true;
  })
  .map((e) => ({id: e.id || e.className, text: e.textContent}))"""


ANA = {"participant_id": "p2", "name": "Ana"}


@pytest.mark.parametrize("path, before, partial, final, finished", [
    ("/captions", [],
     {"type": "caption.partial", "segment_id": "s1", "committed": "half", "tentative": "spoken",
      "audio_start_ms": 0, "audio_end_ms": 500},
     {"type": "caption.final", "segment_id": "s1", "text": "Complete sentence now.", "audio_start_ms": 0,
      "audio_end_ms": 900}, "Complete sentence now."),
    ("/interpret", [],
     {"type": "caption.partial", "segment_id": "s1", "committed": "medio", "tentative": "dicho",
      "audio_start_ms": 0, "audio_end_ms": 500, "language": "es"},
     {"type": "translation.chunk", "index": 0, "action": "EMIT", "text": "Fully translated words.",
      "audio_start_ms": 0, "audio_end_ms": 900}, "Fully translated words."),
    ("/call", [{"type": "room.participant.joined", "participant": {**ANA, "language": "en",
                                                                   "listen_language": "en"}}],
     {"type": "caption.partial", "segment_id": "a1", "committed": "half", "tentative": "spoken",
      "audio_start_ms": 0, "audio_end_ms": 500, "speaker": ANA},
     {"type": "caption.final", "segment_id": "a1", "text": "Complete sentence now.", "audio_start_ms": 0,
      "audio_end_ms": 900, "speaker": ANA}, "Complete sentence now."),
])
def test_one_live_region_hears_finished_captions_only(playwright, open_server, tmp_path, path, before, partial,
                                                      final, finished):
    """A caption in progress is in no live region (it would be read word by word); a finished caption or
    translation reaches the page's one announcer (``#announcer``) and no other live region."""
    browser, b = launch_page(playwright, open_server, tmp_path)
    try:
        _open(b, path)
        for ev in [*before, partial]:
            b.page.evaluate("(ev) => window.rtcAgent.client._dispatch(ev)", ev)
        words = [w for w in (partial.get("committed"), partial.get("tentative")) if w]

        def in_progress(regions: list[dict[str, str]]) -> list[dict[str, str]]:
            return [r for r in regions if any(w in r["text"] for w in words)]

        assert not in_progress(b.page.evaluate(LIVE_TEXT)), json.dumps(b.page.evaluate(LIVE_TEXT))
        b.page.evaluate("(ev) => window.rtcAgent.client._dispatch(ev)", final)
        b.wait_js("the announcer says the finished caption",
                  f"document.getElementById('announcer').textContent.includes({json.dumps(finished)})", 5_000)
        heard = b.page.evaluate(LIVE_TEXT)
        assert [r["id"] for r in heard if finished in r["text"]] == ["announcer"], json.dumps(heard)
        assert not in_progress(heard), json.dumps(heard)
    finally:
        browser.close()
