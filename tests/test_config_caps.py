"""Length caps on every free-text and list field a client sends, in a session's config or in its events (issue 11).

Finding reproduced: a 30 KB agent ``instructions`` string was accepted and held the shared LLM for 34 s. Now
config over a cap is a 400 ``config_too_large`` naming the field and the limit, and the same text in a data-channel
event is an ``error`` event while the session goes on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import aiohttp
import pytest

from rtc_agent.apps.agent.app import AgentApp
from rtc_agent.apps.captions.app import CaptionsApp
from rtc_agent.apps.echo import EchoApp
from rtc_agent.apps.interpret import resolve_config
from rtc_agent.apps.limits import TextLimits
from rtc_agent.apps.vision_commentary import VisionCommentary, validate_commentary_config
from rtc_agent.config import Settings
from rtc_agent.errors import InvalidRequest
from rtc_agent.protocol.events import ConversationItemCreate, SessionUpdate, VisionPrompt
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.worker import Worker
from tests.fakes import ScriptedAppContext

SMALL = dataclasses.replace(Settings(), max_instructions_chars=100, max_text_field_chars=20, max_tools=2,
                            max_tool_schema_bytes=400)


def too_large(call: Any, *args: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        call(*args)
    assert info.value.code == "config_too_large" and info.value.status == 400, info.value.to_dict()
    return info.value


def caps_context(settings: Settings) -> ScriptedAppContext:
    """A session context for the apps at construction and in ``on_event``: a real worker, no engine."""
    return ScriptedAppContext(Worker(), settings=settings, session_id="sess_caps")


def test_defaults_are_settings_in_the_limits_group():
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    defaults = Settings()
    for name, value in (("max_instructions_chars", 8000), ("max_tools", 32), ("max_tool_schema_bytes", 16384),
                        ("max_text_field_chars", 1000)):
        assert getattr(defaults, name) == value and fields[name].metadata["group"] == "limits"
        assert fields[name].metadata["help"]
    assert TextLimits.from_settings(None) == TextLimits.from_settings(defaults)


def test_agent_config_caps_name_the_field_and_the_limit():
    ok = AgentApp.validate_config({"instructions": "i" * 100, "filler": "f" * 20}, SMALL)
    assert len(ok["instructions"]) == 100
    error = too_large(AgentApp.validate_config, {"instructions": "i" * 101}, SMALL)
    assert "instructions" in error.message and "101" in error.message and "limit is 100" in error.message
    error = too_large(AgentApp.validate_config, {"filler": "f" * 21}, SMALL)
    assert "filler" in error.message and "limit is 20" in error.message
    too_large(AgentApp.validate_config, {"vision": {"prompt": "p" * 21}}, SMALL)
    too_large(AgentApp.validate_config, {"vision": {"system_prompt": "s" * 101}}, SMALL)
    # the defaults: 8000 characters of instructions pass, 30 KB do not
    assert AgentApp.validate_config({"instructions": "x" * 8000}, Settings())
    too_large(AgentApp.validate_config, {"instructions": "x" * 30_000}, Settings())


def test_vision_and_captions_config_caps():
    too_large(CaptionsApp.validate_config, {"vision": {"prompt": "p" * 21}}, SMALL)
    too_large(validate_commentary_config, {"prompt": "p" * 1001})  # no settings: the defaults
    too_large(validate_commentary_config, {"system_prompt": "s" * 8001})
    assert validate_commentary_config({"prompt": "p" * 1000, "system_prompt": "s" * 8000})


def test_error_messages_never_echo_a_huge_value():
    deep: list[Any] = []
    for _ in range(3000):
        deep = [deep]
    for call, config in ((resolve_config, {"direction": "x" * 50_000}), (resolve_config, {"max_lag_s": deep}),
                         (resolve_config, {"k" * 10_000: 1, "j" * 10_000: 2}),
                         (EchoApp.validate_config, {f"key{i}" * 100: i for i in range(100)}),
                         (AgentApp.validate_config, {"max_tokens": "9" * 50_000})):
        with pytest.raises(InvalidRequest) as info:
            call(config, Settings())
        assert info.value.code == "invalid_config" and len(info.value.message) < 1500, len(info.value.message)


async def test_agent_events_over_the_caps_are_refused_and_change_nothing():
    ctx = caps_context(SMALL)
    app = AgentApp(ctx, AgentApp.validate_config({"instructions": "be brief"}, SMALL))
    error = too_large(lambda: app._update_session({"instructions": "i" * 101}))
    assert "session.instructions" in error.message
    assert app.conversation.instructions == "be brief"
    tool = {"type": "function", "name": "t0", "description": "", "parameters": {"type": "object"}}
    three = [{**tool, "name": f"t{i}"} for i in range(3)]
    error = too_large(lambda: app._update_session({"tools": three}))
    assert "3 tools" in error.message and "limit is 2" in error.message
    big = [{**tool, "description": "d" * 400}]
    error = too_large(lambda: app._update_session({"tools": big, "instructions": "new"}))
    assert "bytes" in error.message and app.conversation.instructions == "be brief"  # all or nothing
    assert app.tools.tools("browser") == []
    await app.on_event(SessionUpdate(session={"tools": three[:2], "instructions": "i" * 100}))
    assert [t.name for t in app.tools.tools("browser")] == ["t0", "t1"] and len(app.conversation.instructions) == 100
    message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "m" * 21}]}
    with pytest.raises(InvalidRequest) as info:
        await app.on_event(ConversationItemCreate(item=message))
    assert info.value.code == "config_too_large" and "conversation.item.create" in info.value.message
    output = {"type": "function_call_output", "call_id": "call_1", "output": "o" * 101}
    with pytest.raises(InvalidRequest) as info:
        await app.on_event(ConversationItemCreate(item=output))
    assert info.value.code == "config_too_large"
    with pytest.raises(InvalidRequest) as info:
        await app.on_event(ConversationItemCreate(item={**output, "output": {"rows": ["o" * 50, "p" * 50]}}))
    assert info.value.code == "config_too_large"
    assert len(app.conversation.items) == 0
    await app.close()


async def test_vision_prompt_event_is_capped():
    ctx = caps_context(SMALL)
    commentary = VisionCommentary(ctx, ctx.worker, "vlm")
    with pytest.raises(InvalidRequest) as info:
        await commentary.prompt("p" * 21)
    assert info.value.code == "config_too_large" and "vision.prompt" in info.value.message
    with pytest.raises(InvalidRequest) as info:
        await commentary.prompt("p" * 20)
    assert info.value.code == "vision_unavailable"  # within the cap: on to the next check
    app = CaptionsApp(ctx, CaptionsApp.validate_config({}, SMALL))
    with pytest.raises(InvalidRequest) as info:
        await app.on_event(VisionPrompt(text="p" * 21))
    assert info.value.code == "config_too_large"
    await app.vision.close()


async def test_over_http_and_over_the_data_channel(start_server):
    server = await start_server()
    async with aiohttp.ClientSession() as http, http.post(f"{server.url}/v1/sessions", json={
            "app": "agent", "sdp": "v=0", "config": {"instructions": "x" * 30_000}}) as resp:
        body = await resp.json()
    assert resp.status == 400 and body["error"]["code"] == "config_too_large"
    assert "instructions" in body["error"]["message"] and "8000" in body["error"]["message"]
    peer = ClientPeer(server.url, "agent", receive_audio=False)
    await peer.connect()
    try:
        await peer.wait_for("session.created")
        peer.send({"type": "session.update", "session": {"instructions": "x" * 30_000}})
        error = await peer.wait_for("error", timeout=5)
        assert error["error"]["code"] == "config_too_large"
        peer.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "y" * 1001}]}})
        error = await peer.wait_for("error", lambda e: "conversation.item" in e["error"]["message"], timeout=5)
        assert error["error"]["code"] == "config_too_large"
        peer.send({"type": "session.update", "session": {"instructions": "Be brief."}})
        updated = await peer.wait_for("session.updated", timeout=5)  # the session went on
        assert updated["session"]["instructions"] == "Be brief."
        assert server.registry.get(peer.session_id).state == "connected"
    finally:
        await peer.close()


def test_caps_must_be_positive():
    from rtc_agent.config import SettingsError, load_settings

    for name in ("max_instructions_chars", "max_tools", "max_tool_schema_bytes", "max_text_field_chars",
                 "st_max_upload_seconds", "upload_read_timeout_s", "upload_deadline_s"):
        with pytest.raises(SettingsError, match=name):
            load_settings(env={f"RTC_AGENT_{name.upper()}": "0"})
