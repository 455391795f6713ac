"""Pages that explain themselves: readiness in /health and in the page config, capabilities published to the
pages (only what the server can do is offered), and the ``input_audio.muted`` event ending speech at once."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from rtc_agent.apps.base import App
from rtc_agent.config import Settings
from rtc_agent.protocol.codec import decode
from rtc_agent.protocol.events import InputAudioMuted
from rtc_agent.server.health import readiness
from rtc_agent.server.keys import SETTINGS, WORKER
from rtc_agent.server.pages import capabilities
from tests.fakes import ScriptedAppContext, ScriptedWorker


def _app(stats: dict[str, dict[str, Any]], preload: list[str]) -> web.Application:
    app = web.Application()
    app[WORKER] = ScriptedWorker(stats)  # type: ignore[assignment]
    app[SETTINGS] = dataclasses.replace(Settings(), preload=preload)
    return app


def _engine(loaded: bool = False, loading: bool = False, progress: str = "") -> dict[str, Any]:
    return {"loaded": loaded, "loading": loading, "progress": progress}


def test_health_is_loading_until_the_preloaded_engines_are_ready():
    stats = {"vad": _engine(loaded=True, progress="loaded"), "asr": _engine(loaded=True),
             "llm": _engine(loading=True, progress="assembling Qwen.gguf: part 3/6 done"),
             "tts": _engine(), "vlm": _engine()}
    ready = readiness(_app(stats, ["vad", "asr", "tts", "llm"]))
    assert ready["status"] == "loading"
    assert ready["engines"]["llm"] == {"state": "loading", "progress": "assembling Qwen.gguf: part 3/6 done",
                                       "percent": 50, "label": "language model"}
    assert ready["engines"]["tts"]["state"] == "loading"  # preloaded, its load not started yet
    assert ready["engines"]["vlm"]["state"] == "on_demand"  # not preloaded: loads with the first session
    assert ready["apps"]["captions"] == {"ready": True, "waiting": []}
    assert ready["apps"]["agent"] == {"ready": False, "waiting": ["llm", "tts"]}
    assert ready["apps"]["echo"]["ready"]

    stats.update(llm=_engine(loaded=True, progress="loaded"), tts=_engine(loaded=True))
    ready = readiness(_app(stats, ["vad", "asr", "tts", "llm"]))
    assert ready["status"] == "ok" and ready["apps"]["agent"]["ready"]
    assert ready["engines"]["llm"]["percent"] == 100


def test_a_failed_load_is_not_loading_but_keeps_its_app_waiting():
    stats = {"llm": _engine(progress="load failed: EngineError: no weights")}
    ready = readiness(_app(stats, ["llm"]))
    assert ready["status"] == "ok"
    assert ready["engines"]["llm"]["state"] == "failed"
    assert ready["apps"]["agent"] == {"ready": False, "waiting": ["llm"]}


def test_capabilities_of_the_default_server():
    caps = capabilities(Settings())
    assert caps["st"]["targets"] == ["en"]  # Whisper's translate task: into English only
    assert "fr" in caps["asr"]["languages"] and "en" in caps["st"]["sources"]
    assert caps["engines"]["llm"]["kind"] == "embedded"
    assert any("--st-engine" in note for note in caps["setup"])
    if not caps["agent"]["tools"]:
        assert any("tools" in note for note in caps["setup"])


def test_capabilities_follow_the_settings():
    caps = capabilities(dataclasses.replace(Settings(), llm_engine="openai", llm_url="http://gpu:8000/v1",
                                            asr_model="/models/whisper-tiny.en"))
    assert caps["agent"]["tools"] is True
    assert caps["engines"]["llm"]["kind"] == "remote"
    assert caps["asr"]["languages"] == ["en"]
    assert not any("tools" in note and "embedded language model" in note for note in caps["setup"])


def _client_config(html: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="client-config">(.*?)</script>', html, re.S)
    assert match
    return json.loads(match.group(1))


@pytest.mark.parametrize("path", ["/captions", "/interpret", "/agent", "/echo"])
async def test_pages_carry_capabilities_readiness_and_controls(server, path):
    async with aiohttp.ClientSession() as http, http.get(server.url + path) as resp:
        html = await resp.text()
    config = _client_config(html)
    assert config["capabilities"]["st"]["targets"]
    assert set(config["readiness"]["apps"]) >= {"captions", "interpret", "agent", "echo"}
    for element in ("readiness", "mute", "quality", "log-filter", "log-metrics", "server-setup",
                    "insecure-warning"):
        assert f'id="{element}"' in html, element
    assert ('id="camera-toggle"' in html) == config["media"]["video"]
    if path == "/agent":
        # no start-up flags addressed to end users outside the operators' note
        outside = html.replace(html[html.index('id="server-setup"'):html.index("</details>")], "")
        outside = re.sub(r'<script type="application/json" id="client-config">.*?</script>', "", outside, flags=re.S)
        assert "--llm-engine" not in outside
        for element in ("push-to-talk", "agent-download-json", "agent-download-text", "agent-clear"):
            assert f'id="{element}"' in html, element
        assert '<label class="visually-hidden" for="agent-text">' in html


async def test_health_reports_readiness(server):
    async with aiohttp.ClientSession() as http, http.get(server.url + "/health") as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body["status"] in ("ok", "loading")
    assert set(body["readiness"]["apps"]) >= {"captions", "agent"}


def test_the_muted_event_decodes():
    event = decode(json.dumps({"type": "input_audio.muted", "muted": True}), max_bytes=1000)
    assert isinstance(event, InputAudioMuted) and event.muted is True


class _Segmenter:
    in_speech = True
    min_silence_ms = 400


class _VadApp(App):
    name = "vad-test"

    def __init__(self) -> None:
        super().__init__(ScriptedAppContext(ms=5000), {})  # type: ignore[arg-type]
        self.segmenter = _Segmenter()
        self.windows: list[tuple[float, int, int]] = []

    def _on_window(self, prob: float, start_ms: int, end_ms: int) -> None:
        self.windows.append((prob, start_ms, end_ms))


def test_muting_feeds_silence_to_the_apps_vad_path_once():
    app = _VadApp()
    app.set_input_muted(True)
    assert app.input_muted
    assert app.windows and all(p == 0.0 for p, _, _ in app.windows)
    assert app.windows[0][1] == 5000 and app.windows[-1][2] - 5000 >= 400  # covers the end-of-speech silence
    count = len(app.windows)
    app.set_input_muted(True)  # already muted: nothing more
    app.set_input_muted(False)
    assert len(app.windows) == count and not app.input_muted
    app.segmenter.in_speech = False
    app.set_input_muted(True)  # no speech in progress: nothing to end
    assert len(app.windows) == count


def test_translation_chunks_carry_the_detected_language():
    """The interpretation page shows the spoken language: chunks carry what the translator reports."""
    import numpy as np

    from rtc_agent.apps.interpret import AudioChunk, PolicyConfig, SimulPolicy
    from rtc_agent.engines.st.base import Translation

    events: list[Any] = []
    policy = SimulPolicy(PolicyConfig(), object(), events.append)  # type: ignore[arg-type]
    chunk = AudioChunk(0, 0, 1600, np.zeros(25600, dtype=np.float32), True)
    policy._emit_chunk(chunk, "EMIT", "Good morning.", Translation("Good morning.", extra={"language": "es"}),
                       attempted=True)
    policy._emit_chunk(chunk, "WAIT", "", Translation(""), attempted=True)
    assert [e.source_language for e in events] == ["es", None]
