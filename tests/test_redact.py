"""Secrets never leave: URLs, tokens and registered secrets are masked in events, /health, errors and logs.

The findings reproduced here: credentials inside ``--llm-url`` came back to clients in ``error`` events and
appeared in the log; a token in ``--vlm-url`` went to every captions client in ``session.created``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import aiohttp
import numpy as np
import pytest

from rtc_agent.config import Settings
from rtc_agent.engines.asr.base import TranscribeRequest
from rtc_agent.engines.asr.openai import OpenAIASREngine
from rtc_agent.engines.llm.openai import OpenAIChatEngine
from rtc_agent.engines.tts.openai import OpenAITTSEngine
from rtc_agent.engines.vlm.remote import RemoteVLMEngine
from rtc_agent.errors import AgentError, EngineError
from rtc_agent.redact import (
    install_log_redaction,
    redact_data,
    redact_text,
    redact_url,
    register_secret,
    register_settings_secrets,
    uninstall_log_redaction,
    unregister_secret,
)
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PatternVideoTrack
from tests.conftest import free_port

SECRETS = ("s3cret", "TOPSECRET")


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def dead_url(path: str = "/v1") -> str:
    """A URL with a password and a query key, on a port nobody listens on."""
    return f"http://user:s3cret@127.0.0.1:{free_port()}{path}?key=TOPSECRET"


@pytest.fixture
def log_redaction() -> Iterator[None]:
    install_log_redaction()
    yield
    uninstall_log_redaction()


# --- units ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "expected"), [
    ("http://user:s3cret@127.0.0.1:9/v1?key=TOPSECRET", "http://127.0.0.1:9/v1?key=***"),
    ("https://h:8443/v1/chat?api_key=abc&model=m#access_token=x", "https://h:8443/v1/chat?api_key=***&model=***#access_token=***"),
    ("wss://tok@[::1]:8000/v1/realtime?token=t", "wss://[::1]:8000/v1/realtime?token=***"),
    ("turn:turn.example.org:3478?transport=udp", "turn:turn.example.org:3478?transport=udp"),
    ("http://h:8000/v1?SECRETVALUE", "http://h:8000/v1?***"),
    ("http://h:8000/v1", "http://h:8000/v1"),
    ("", ""),
])
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert redact_url(expected) == expected  # idempotent


def test_redact_url_never_raises_on_bad_urls() -> None:
    assert "s3cret" not in redact_url("http://u:s3cret@h:99999999/x?token=TOPSECRET")
    assert not leaks(redact_url("http://u:s3cret@[::1/x?token=TOPSECRET"))


@pytest.mark.parametrize("text", [
    "cannot reach the LLM server http://user:s3cret@127.0.0.1:9/v1?key=TOPSECRET/v1/chat: refused.",
    "upstream said: Authorization: Bearer TOPSECRET-9a8b7c",
    'echo {"api_key": "TOPSECRET", "max_tokens": 5}',
    "GET /v1/realtime?token=TOPSECRET HTTP/1.1",
    "X-Api-Key: TOPSECRET",
    "URL('ws://tok:s3cret@host:1/x?sig=TOPSECRET')",
    "nonnumeric port: 's3cret@127.0.0.1:9'",  # no scheme: caught by the registered secret only
])
def test_redact_text(text: str) -> None:
    register_secret("s3cret")
    try:
        out = redact_text(text)
        assert not leaks(out), out
        assert redact_text(out) == out
    finally:
        unregister_secret("s3cret")


def test_redact_text_keeps_ordinary_text() -> None:
    for text in ("max_tokens=128 prompt_tokens: 12", "listening on 127.0.0.1:8080 at 12:30:45",
                 "basic authentication needed", "this session's token is required (Authorization: Bearer ...)",
                 "session_ms=1200 code=llm_unauthorized", "turn:t:3478?transport=tcp"):
        assert redact_text(text) == text


def test_registered_secrets_and_settings() -> None:
    settings = Settings(llm_api_key="sk-live-abcdef", llm_url="http://u:pw-hunter2@h/v1?token=qq-zz-1",
                        turn_secret="turn-shared-secret")
    register_settings_secrets(settings)
    try:
        text = redact_text("keys sk-live-abcdef pw-hunter2 qq-zz-1 turn-shared-secret sk-live-abcdef%21 no")
        assert text == "keys *** *** *** *** ***%21 no"
        assert redact_text("short ab") == "short ab"
    finally:
        for value in ("sk-live-abcdef", "pw-hunter2", "qq-zz-1", "turn-shared-secret"):
            unregister_secret(value)
    public = settings.public()
    assert public["llm_api_key"] == "***" and public["llm_url"] == "http://h/v1?token=***"


def test_redact_data() -> None:
    data = {"engines": {"llm": {"progress": "checking http://u:s3cret@h/v1/models?key=TOPSECRET"}},
            "list": ["Bearer TOPSECRET123", 3, None], "n": 1.5}
    out = redact_data(data)
    assert not leaks(json.dumps(out)) and out["n"] == 1.5 and out["list"][1:] == [3, None]


def test_agent_errors_are_redacted() -> None:
    err = EngineError(f"cannot reach {dead_url()}: refused", code="llm_unreachable")
    assert not leaks(err.message) and not leaks(str(err)) and not leaks(json.dumps(err.to_dict()))
    assert err.code == "llm_unreachable"
    assert not leaks(AgentError("response failed: Authorization: Bearer TOPSECRET99").message)


def test_log_records_are_redacted(caplog: pytest.LogCaptureFixture, log_redaction: None) -> None:
    log = logging.getLogger("rtc_agent.test_redact")
    with caplog.at_level(logging.DEBUG):
        log.info("connecting to %s", "http://user:s3cret@h:1/v1?key=TOPSECRET")
        try:
            raise RuntimeError("upstream echoed api_key=TOPSECRET")
        except RuntimeError:
            log.exception("failed with token=%s", "TOPSECRET")
        log.warning("stack", stack_info=True)
        record = logging.makeLogRecord({"msg": "made %s", "args": ("Bearer TOPSECRET123",), "name": "x",
                                        "levelno": logging.INFO, "levelname": "INFO"})
        logging.getLogger().handle(record)
    assert "connecting to http://h:1/v1?key=***" in caplog.text
    assert "RuntimeError" in caplog.text  # the traceback is kept, redacted
    assert not leaks(caplog.text), caplog.text
    assert not any(leaks(r.getMessage()) for r in caplog.records)


def test_log_redaction_is_idempotent_and_undone() -> None:
    before = logging.getLogRecordFactory()
    install_log_redaction()
    installed = logging.getLogRecordFactory()
    install_log_redaction()
    assert logging.getLogRecordFactory() is installed is not before
    uninstall_log_redaction()
    assert logging.getLogRecordFactory() is before


def test_engine_messages_and_descriptions_name_servers_redacted() -> None:
    progress: list[str] = []
    llm = OpenAIChatEngine(dead_url(), "m", api_key="sk-TOPSECRET")
    llm.load(progress.append)
    assert llm.models_url.endswith("/v1/models?key=TOPSECRET")  # the query stays usable, after the path
    asr = OpenAIASREngine(dead_url(), api_key="sk-TOPSECRET")
    asr.load(progress.append)
    tts = OpenAITTSEngine(dead_url(), api_key="sk-TOPSECRET", check_on_load=False)
    tts.load(progress.append)
    vlm = RemoteVLMEngine(dead_url("/v1/video/realtime"), protocol="sglang")
    with pytest.raises(Exception) as raised:
        vlm.load(progress.append)
    texts = [*progress, repr(tts), json.dumps(vlm.describe()), str(raised.value)]
    assert not any(leaks(t) for t in texts), texts


def test_remote_asr_keeps_the_query_and_reports_safely() -> None:
    engine = OpenAIASREngine("http://u:s3cret@h:8000/v1?key=TOPSECRET")
    assert engine.endpoint("/audio/transcriptions") == "http://h:8000/v1/audio/transcriptions?key=TOPSECRET"
    dead = OpenAIASREngine(dead_url(), api_key="sk-TOPSECRET", timeout_s=2.0)
    with pytest.raises(EngineError) as raised:
        dead.transcribe(TranscribeRequest(np.zeros(1600, dtype=np.float32)))
    assert raised.value.code == "engine_unreachable" and not leaks(raised.value.message), raised.value.message


# --- through a real server -----------------------------------------------------------------------------------

async def _health(url: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/health") as resp:
        return await resp.text()


async def test_llm_url_credentials_never_reach_clients_or_logs(start_server, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    server = await start_server(llm_engine="openai", llm_url=dead_url(), llm_model="m")
    peer = ClientPeer(server.url, "agent")
    await peer.connect()
    try:
        peer.send({"type": "conversation.item.create",
                   "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}})
        peer.send({"type": "response.create"})
        error = await peer.wait_for("error", lambda e: e["error"]["code"].startswith("llm"), timeout=20)
        assert error["error"]["code"] == "llm_unreachable"
        assert "127.0.0.1" in error["error"]["message"]  # still says which server
        info = json.dumps(await peer.session_info())
        health = await _health(server.url)
    finally:
        await peer.close()
    assert not leaks(json.dumps(peer.events)), [e for e in peer.events if leaks(json.dumps(e))]
    assert not leaks(info) and not leaks(health)
    assert not leaks(caplog.text), [r.getMessage() for r in caplog.records if leaks(r.getMessage())]


async def test_vlm_url_token_never_reaches_captions_clients(start_server, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    server = await start_server(vlm_engine="sglang", vlm_url=dead_url("/v1/video/realtime"))
    peer = ClientPeer(server.url, "captions", config={"vision": True}, video=PatternVideoTrack(fps=5))
    await peer.connect()
    try:
        created = await peer.wait_for("session.created")
        assert created["session"]["engines"]["vlm"].startswith("sglang:http://127.0.0.1:")
        error = await peer.wait_for("error", timeout=20)  # the vision engine cannot be reached
        assert "127.0.0.1" in error["error"]["message"]
        info = json.dumps(await peer.session_info())
        health = await _health(server.url)
    finally:
        await peer.close()
    assert not leaks(json.dumps(peer.events)), [e for e in peer.events if leaks(json.dumps(e))]
    assert not leaks(info) and not leaks(health)
    assert not leaks(caplog.text), [r.getMessage() for r in caplog.records if leaks(r.getMessage())]
