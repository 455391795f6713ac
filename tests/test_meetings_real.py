"""Meetings through the real server (HTTP clients and in-process aiortc peers, no models): a join link is bound to
one meeting of its room: it starts that meeting, rejoins it within the grace, and after it ended neither joins
the next meeting of the same name (410 ``meeting_ended``) nor reads its transcript, while it still reads its own
meeting's until ``room_transcript_ttl_s``; an API key reads both. Two participants named "Ana" appear to a third
as "Ana" and "Ana (2)", which is also what the second one is told and what the transcript says."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from rtc_agent.protocol.events import CaptionFinal
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.server.keys import ROOMS

KEY = "m" * 32
API = {"Authorization": f"Bearer {KEY}"}


async def until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def exchange(http: aiohttp.ClientSession, base: str, link: dict[str, Any], name: str) -> tuple[int, Any]:
    """``POST /v1/tokens`` with a join link: (status, body)."""
    async with http.post(f"{base}/v1/tokens", json={"app": "call", "config": {"name": name}},
                         headers={"Authorization": f"Bearer {link['join_token']}"}) as resp:
        return resp.status, await resp.json()


async def read(http: aiohttp.ClientSession, base: str, headers: dict[str, str], query: str = "") -> tuple[int, Any]:
    async with http.get(f"{base}/v1/rooms/meet1/transcript.json{query}", headers=headers) as resp:
        return resp.status, await resp.json()


def say(registry: Any, peer: ClientPeer, text: str) -> None:
    """A final caption of ``peer`` into the live meeting (what its captions pipeline would hand the room)."""
    room = registry.rooms["meet1"]
    room.on_caption(room.participants[peer.session_id],
                    CaptionFinal(segment_id="s1", text=text, audio_start_ms=0, audio_end_ms=400))


async def test_a_link_is_bound_to_its_meeting(start_server):
    server = await start_server(api_keys=[KEY], room_transcript_ttl_s=3600)
    base = server.url
    registry = server.app[ROOMS]
    offset = [0.0]
    registry.meetings.clock = lambda: time.time() + offset[0]
    peers: list[ClientPeer] = []
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/v1/rooms", json={"room": "meet1"}, headers=API) as resp:
            assert resp.status == 201
            link1 = await resp.json()
        m1 = link1["meeting_id"]
        assert m1.startswith("mtg_") and link1["participants"] == 0
        try:
            # the link starts its meeting (nobody was there), and a reconnect within the grace rejoins it
            for attempt in range(2):
                status, token = await exchange(http, base, link1, "Ann")
                assert status == 201 and token["config"] == {"name": "Ann", "room": "meet1"}
                ann = ClientPeer(base, "call", credential=token["value"])
                peers.append(ann)
                await ann.connect()
                await ann.wait_for("room.joined")
                assert registry.rooms["meet1"].meeting_id == m1, attempt
                say(registry, ann, f"first meeting {attempt}")
                await ann.close()
                await until(lambda: "meet1" not in registry.rooms)
            status, body = await read(http, base, {"Authorization": f"Bearer {link1['join_token']}"})
            assert status == 200 and body["meeting_id"] == m1 and len(body["lines"]) == 2

            offset[0] += 3600  # past the grace and the client tokens' lifetime: meeting 1 has ended
            bob = ClientPeer(base, "call", config={"room": "meet1", "name": "Bob"}, credential=KEY)
            peers.append(bob)
            await bob.connect()
            await bob.wait_for("room.joined")
            m2 = registry.rooms["meet1"].meeting_id
            assert m2 != m1
            say(registry, bob, "second meeting")
            async with http.post(f"{base}/v1/rooms", json={"room": "meet1"}, headers=API) as resp:
                link2 = await resp.json()
            assert link2["meeting_id"] == m2 and link2["participants"] == 1

            # link 1 cannot join meeting 2 ...
            status, body = await exchange(http, base, link1, "Ann")
            assert status == 410 and body["error"]["code"] == "meeting_ended", body
            # ... nor read its transcript; it reads its own meeting's
            join1 = {"Authorization": f"Bearer {link1['join_token']}"}
            status, body = await read(http, base, join1)
            assert status == 200 and body["meeting_id"] == m1
            assert [line["text"] for line in body["lines"]] == ["first meeting 0", "first meeting 1"]
            status, body = await read(http, base, join1, f"?meeting={m2}")
            assert status == 403 and body["error"]["code"] == "token_scope"
            join2 = {"Authorization": f"Bearer {link2['join_token']}"}
            status, body = await read(http, base, join2)
            assert status == 200 and [line["text"] for line in body["lines"]] == ["second meeting"]
            status, body = await read(http, base, join2, f"?meeting={m1}")
            assert status == 403
            status, token = await exchange(http, base, link2, "Cy")
            assert status == 201  # link 2 joins the meeting it was made for

            # an API key reads both: the current meeting by default, any by ?meeting=
            status, body = await read(http, base, API)
            assert status == 200 and body["meeting_id"] == m2
            status, body = await read(http, base, API, f"?meeting={m1}")
            assert status == 200 and body["meeting_id"] == m1
            async with http.get(f"{base}/v1/rooms/meet1/transcript.vtt?meeting={m1}", headers=API) as resp:
                assert resp.status == 200 and "first meeting 1" in await resp.text()
            status, body = await read(http, base, API, "?meeting=nope")
            assert status == 400 and body["error"]["code"] == "invalid_meeting"
            status, body = await read(http, base, API, "?meeting=mtg_0000000000000000")
            assert status == 404 and body["error"]["code"] == "meeting_not_found"

            offset[0] += 3600  # room_transcript_ttl_s after meeting 1 ended: gone for everyone
            status, body = await read(http, base, join1)
            assert status == 404
            status, body = await read(http, base, API, f"?meeting={m1}")
            assert status == 404 and m1 not in registry.meetings.ended
        finally:
            await asyncio.gather(*(peer.close() for peer in peers))


async def test_two_participants_named_ana_appear_as_ana_and_ana_2(server):
    registry = server.app[ROOMS]
    peers = [ClientPeer(server.url, "call", config={"room": "names", "name": name}) for name in ("Ana", "Ana", "Bo")]
    try:
        for peer in peers:
            await peer.connect()
        first, second, third = peers
        joined = await third.wait_for("room.joined")
        names = {p["participant_id"]: p["name"] for p in joined["participants"]}
        assert names == {first.session_id: "Ana", second.session_id: "Ana (2)", third.session_id: "Bo"}
        own = await second.wait_for("room.joined")
        assert {p["participant_id"]: p["name"] for p in own["participants"]}[second.session_id] == "Ana (2)"
        created = await second.wait_for("session.created")
        assert created["session"]["config"]["name"] == "Ana (2)"
        seen = await first.wait_for("room.participant.joined", lambda e: e["participant"]["participant_id"]
                                    == second.session_id)
        assert seen["participant"]["name"] == "Ana (2)"
        room = registry.rooms["names"]
        room.on_caption(room.participants[second.session_id],
                        CaptionFinal(segment_id="s1", text="hola", audio_start_ms=0, audio_end_ms=400))
        caption = await third.wait_for("caption.final")
        assert caption["speaker"] == {"participant_id": second.session_id, "name": "Ana (2)"}
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/v1/rooms/names/transcript.json") as r:
            transcript = await r.json()
        assert [line["name"] for line in transcript["lines"]] == ["Ana (2)"]
        assert sorted(p["name"] for p in transcript["participants"]) == ["Ana", "Ana (2)", "Bo"]
        # renaming to a name in use is suffixed as well
        second.send({"type": "session.update", "session": {"name": "bo"}})
        updated = await third.wait_for("room.participant.updated")
        assert updated["participant"]["name"] == "bo (2)"
    finally:
        await asyncio.gather(*(peer.close() for peer in peers))
