"""What the call page's pre-join screen and mute controls rest on, without a browser or models:

- one mute state on the server: ``input_audio.muted`` and ``session.update {mic_muted}`` set the same participant
  flag, the room hears of changes only (one ``room.participant.updated`` per change), a muted participant's audio
  reaches its captions as silence, and a page that rejoins muted (config ``mic_muted``) is muted from its
  ``room.joined`` on;
- ``GET /v1/rooms/{room}``: who is in a room (names only), for the same readers as its transcript.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import aiohttp
import numpy as np

from rtc_agent.apps.call.app import CallApp
from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.room_registry import RoomRegistry
from rtc_agent.config import Settings
from rtc_agent.protocol.codec import encode
from rtc_agent.server.keys import ROOMS
from rtc_agent.worker import Worker
from tests.fakes import ScriptedAppContext, ScriptedASR, ScriptedVAD, register

KEY = "p" * 32


class Session(ScriptedAppContext):
    """One participant's session: its events as the JSON objects its page receives."""

    def emit(self, event: Any) -> None:
        self.events.append(encode(event, event_id="e", session_ms=0))

    def updates(self) -> list[dict]:
        return [e["participant"] for e in self.events if e["type"] == "room.participant.updated"]


def _call(worker: Worker, registry: RoomRegistry, pid: str, settings: Settings, **config: Any) -> CallApp:
    ctx = Session(worker, settings=settings, session_id=pid, ms=10_000)
    app = CallApp(ctx, CallApp.validate_config({"room": "mutes", "name": pid, "language": "en", **config}, settings))
    app.room = registry.join("mutes", app.participant)
    return app


async def test_one_mute_state_whichever_event_sets_it():
    settings = dataclasses.replace(Settings(), max_room_participants=3)
    worker = Worker()
    vad = register(worker, "vad", ScriptedVAD(record=True), max_queue=512)
    register(worker, "asr", ScriptedASR())
    registry = RoomRegistry(settings)
    ann, ben = (_call(worker, registry, pid, settings) for pid in ("ann", "ben"))
    try:
        await ann.captions.start()
        ann.set_input_muted(True)  # the page's input_audio.muted
        assert ann.participant.mic_muted is True and ann.config["mic_muted"] is True
        assert [u["mic_muted"] for u in ben.ctx.updates()] == [True]
        ann._update({"mic_muted": True})  # the page's session.update, right behind it: nothing new for the room
        assert [u["mic_muted"] for u in ben.ctx.updates()] == [True]
        assert ann.ctx.events[-1]["type"] == "session.updated"  # its own answer still comes
        loud = (np.sin(np.arange(320) / 3) * 12000).astype(np.int16)
        for i in range(50):  # 1 s of loud audio while muted
            ann.on_audio(loud, 10_000 + 20 * i)
        for _ in range(400):  # the detector runs on the worker: wait (on this loop) for its first calls
            if vad.calls:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        assert vad.requests and all(float(np.abs(r.windows).max()) == 0.0 for r in vad.requests), \
            "a muted microphone reaches the captions as silence"
        ann._update({"mic_muted": False})
        ann.set_input_muted(False)
        assert [u["mic_muted"] for u in ben.ctx.updates()] == [True, False]  # one update per change
        assert ann.participant.mic_muted is False
        # a page that rejoins muted is muted from its room.joined on
        cy = _call(worker, registry, "cy", settings, mic_muted=True, camera_muted=True)
        joined = next(e for e in cy.ctx.events if e["type"] == "room.joined")
        me = next(p for p in joined["participants"] if p["participant_id"] == "cy")
        assert me["mic_muted"] is True and me["camera_muted"] is True
        assert ben.ctx.events[-1]["type"] == "room.participant.joined"
        assert ben.ctx.events[-1]["participant"]["mic_muted"] is True
    finally:
        await ann.captions.close()
        await worker.close(grace=1.0)


async def test_room_presence_names_who_is_in_for_the_transcript_readers(start_server):
    server = await start_server(api_keys=[KEY])
    base, auth = server.url, {"Authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/v1/rooms/team") as resp:
            assert resp.status == 401  # the transcript's readers only
        async with http.get(f"{base}/v1/rooms/team", headers=auth) as resp:
            assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
            assert await resp.json() == {"room": "team", "participants": [], "count": 0,
                                         "max_participants": 6}
        async with http.get(f"{base}/v1/rooms/bad%20name", headers=auth) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["code"] == "invalid_config"
        async with http.post(f"{base}/v1/rooms", json={"room": "team"}, headers=auth) as resp:
            link = await resp.json()
        rooms = server.app[ROOMS]
        for pid, name in (("sess_a1", "Ann"), ("sess_b2", "Ben")):
            ctx = Session(None, settings=rooms.settings, session_id=pid)
            rooms.join("team", Participant(id=pid, name=name, language="en", listen_language="en", ctx=ctx))
        join = {"Authorization": f"Bearer {link['join_token']}"}
        async with http.get(f"{base}/v1/rooms/team", headers=join) as resp:
            assert resp.status == 200
            body = await resp.json()
        assert body["participants"] == [{"name": "Ann"}, {"name": "Ben"}] and body["count"] == 2
        text = json.dumps(body)
        assert "sess_" not in text and link["join_token"] not in text  # names only: no ids, no secrets
        async with http.get(f"{base}/v1/rooms/elsewhere", headers=join) as resp:
            assert resp.status == 403 and (await resp.json())["error"]["code"] == "token_scope"
        for pid in ("sess_a1", "sess_b2"):
            rooms.rooms["team"].leave(pid)
