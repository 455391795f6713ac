"""Settings from defaults, TOML, environment and flags; the CLI's help."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from rtc_agent.cli import build_parser
from rtc_agent.config import Settings, SettingsError, load_settings, settings_from_args


def test_defaults_are_the_embedded_cpu_setup():
    s = load_settings(env={})
    assert (s.host, s.port) == ("127.0.0.1", 8080)
    assert all(s.engine(kind)["engine"] == "embedded" for kind in ("asr", "st", "llm", "tts", "vlm"))
    assert s.video_fps == 1.0 and s.video_max_edge == 512 and s.heartbeat_timeout_s == 10.0


def test_precedence_file_env_flags(tmp_path):
    config = tmp_path / "rtc.toml"
    config.write_text(
        'port = 9001\nmax_sessions = 3\n[ice]\nturn_secret = "s"\nturn_urls = ["turn:a:3478"]\n'
        '[engines.asr]\nmodel = "large-v3"\nurl = "http://gpu:8000"\n'
    )
    s = load_settings(config, env={})
    assert (s.port, s.max_sessions, s.turn_secret, s.turn_urls) == (9001, 3, "s", ["turn:a:3478"])
    assert s.engine("asr") == {"engine": "embedded", "url": "http://gpu:8000", "model": "large-v3"}
    s = load_settings(config, env={"RTC_AGENT_PORT": "9002", "RTC_AGENT_STUN_URLS": "stun:x:1, stun:y:2"})
    assert s.port == 9002 and s.stun_urls == ["stun:x:1", "stun:y:2"]
    args = build_parser().parse_args(["serve", "--config", str(config), "--port", "9003", "--llm-url", "http://l"])
    s = settings_from_args(args)
    assert s.port == 9003 and s.llm_url == "http://l" and s.max_sessions == 3


@pytest.mark.parametrize("text, message", [
    ("bogus = 1\n", "unknown setting 'bogus'"),
    ("port = 'eighty'\n", "bad value"),
    ("port = 1.5\n", "expected an integer"),
    ("stun_urls = [1]\n", "list of strings"),
    ("port = \n", "invalid TOML"),
    ("port = 70000\n", "port must be"),
    ("ice_transport_policy = 'some'\n", "ice_transport_policy"),
    ("llm_precision = 'fp8'\n", "llm_precision must be one of auto, float32"),
    ("captions_context_s = 60\n", "captions_context_s must be 0-20"),
    ("captions_final_budget_ms = 0\n", "captions_final_budget_ms 100-10000"),
    ("sfu_url = 'ftp://janus'\n", "sfu_url must be a Janus API URL"),
    ("sfu_url = 'http://127.0.0.1:8088/janus'\n", "needs sfu_public_url"),
    ("sfu_public_url = 'https://janus.example.org/janus'\n", "sfu_public_url must be a Janus WebSocket"),
    ("sfu_poll_timeout_s = 30\n", "sfu_poll_timeout_s 31-600"),
    ("sfu_reconnect_max_delay_s = 0.5\n", "sfu_reconnect_max_delay_s from"),
])
def test_bad_settings_are_named(tmp_path, text, message):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    with pytest.raises(SettingsError, match=message):
        load_settings(config, env={})


def test_an_http_sfu_url_with_the_browsers_websocket_url(tmp_path):
    config = tmp_path / "sfu.toml"
    config.write_text("sfu_url = 'http://127.0.0.1:8088/janus'\nsfu_public_url = 'wss://janus.example.org/ws'\n")
    s = load_settings(config, env={})
    assert s.sfu_url.startswith("http://") and (s.sfu_poll_timeout_s, s.sfu_reconnect_attempts) == (45.0, 8)


def test_bad_environment_value():
    with pytest.raises(SettingsError, match="RTC_AGENT_MAX_SESSIONS"):
        load_settings(env={"RTC_AGENT_MAX_SESSIONS": "many"})


def test_missing_config_file():
    with pytest.raises(SettingsError, match="not found"):
        load_settings("/nonexistent/rtc.toml", env={})


def test_public_masks_secrets():
    s = dataclasses.replace(Settings(), turn_secret="hunter2")
    assert s.public()["turn_secret"] == "***" and "hunter2" not in str(s.public())


def test_help_explains_every_option():
    out = subprocess.run([sys.executable, "-m", "rtc_agent", "serve", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for f in dataclasses.fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        assert flag in out, flag
        assert f"RTC_AGENT_{f.name.upper()}" in out.replace("\n", "").replace(" ", ""), f.name
    assert "--config" in out
    top = subprocess.run([sys.executable, "-m", "rtc_agent", "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "serve" in top and "bench" in top


def test_serve_rejects_bad_settings_with_a_message():
    proc = subprocess.run([sys.executable, "-m", "rtc_agent", "serve", "--port", "0"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "port must be" in proc.stderr
