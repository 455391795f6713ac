"""Malformed OpenAI Realtime client events (bad base64, a wrong audio format, an unknown type, an oversized message,
bad JSON, unknown fields) each get an ``error`` event naming the offending ``event_id``, and the connection goes
on: a text turn still works afterwards."""

from __future__ import annotations

import base64
import json

from tests.openai_stub import OpenAIStub, text_reply
from tests.realtime_helpers import Events, client


async def test_malformed_events_get_errors_and_the_connection_goes_on(start_server):
    async with OpenAIStub(default=text_reply("Still here.")) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url)
        async with client(server).realtime.connect(model="gpt-realtime") as conn:
            events = Events(conn)
            await events.wait_for("session.created")
            huge = base64.b64encode(bytes(5 * 1024 * 1024)).decode()
            cases = [
                ({"type": "input_audio_buffer.append", "audio": "not base64 at all!"}, "invalid_value", "audio"),
                ({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01\x02\x03").decode()},
                 "invalid_value", "audio"),  # PCM16 needs whole samples
                ({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {
                    "format": {"type": "audio/wav"}}}}}, "invalid_value", "session.audio.input.format.type"),
                ({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {
                    "format": {"type": "audio/pcm", "rate": 16000}}}}}, "invalid_value",
                 "session.audio.input.format.rate"),
                ({"type": "no.such.event"}, "unknown_event", "type"),
                ({"type": "response.create", "surprise": 1}, "unknown_parameter", "surprise"),
                ({"type": "conversation.item.retrieve", "item_id": "item_missing"}, "invalid_value", "item_id"),
                ({"type": "input_audio_buffer.append", "audio": huge}, "message_too_large", None),
            ]
            for n, (event, code, param) in enumerate(cases):
                event_id = f"evt_bad_{n}"
                await conn.send_raw(json.dumps({**event, "event_id": event_id}))
                error = await events.wait_for("error", lambda e, i=event_id: e["error"]["event_id"] == i, timeout=10)
                assert error["error"]["code"] == code, error
                assert error["error"]["param"] == param, error
                assert error["error"]["type"] == "invalid_request_error"
            await conn.send_raw("{not json")
            error = await events.wait_for("error", lambda e: e["error"]["code"] == "invalid_json", timeout=10)
            assert error["error"]["event_id"] is None
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.commit", "event_id": "evt_empty"}))
            error = await events.wait_for("error", lambda e: e["error"]["event_id"] == "evt_empty", timeout=10)
            assert error["error"]["code"] == "input_audio_buffer_commit_empty"

            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
            await conn.conversation.item.create(item={"type": "message", "role": "user",
                                                      "content": [{"type": "input_text", "text": "Are you there?"}]})
            await conn.response.create()
            done = await events.wait_for("response.done", timeout=20)
            assert done["response"]["status"] == "completed"
            assert (await events.wait_for("response.output_text.done"))["text"] == "Still here."
            assert events.types().count("session.updated") == 1  # the refused updates changed nothing
            await events.close()
