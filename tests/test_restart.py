"""What survives a restart (issue 24): a real server on the embedded SQLite state store issues a page sign-in, a
room join link and a client token, is stopped, and a new server on the same store honours them; two servers on one
Redis store share sign-ins, single use and rate budgets. A call whose captions come from a real aiortc peer through
the captions pipeline (scripted engines) keeps its meeting across a restart: the join link re-opens it, the late
joiner's replay and the transcript hold every line from before and after."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from rtc_agent.config import Settings
from rtc_agent.protocol.events import CaptionFinal
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PcmSourceTrack
from rtc_agent.server.keys import ROOMS
from rtc_agent.worker import Worker
from tests.fakes import ScriptedASR, ScriptedVAD, loud_above, register
from tests.test_auth import KEY, bearer
from tests.test_state_store import redis_url  # noqa: F401  (the Redis server fixture)
from tests.test_trust_edges import upload

COOKIE = "rtc_agent_page"


async def _login(http: aiohttp.ClientSession, url: str) -> str:
    async with http.post(f"{url}/login", data={"key": KEY, "next": "/captions"}, allow_redirects=False) as r:
        assert r.status == 303 and r.headers["Location"] == "/captions"
        return r.cookies[COOKIE].value


async def _post(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None,
                **body: Any) -> tuple[int, dict[str, Any]]:
    async with http.post(url, json=body, headers=headers or {}) as r:
        return r.status, await r.json(content_type=None)


async def test_sign_ins_join_links_and_tokens_outlive_a_restart(start_server, tmp_path: Path):
    state = {"state_url": f"sqlite:///{tmp_path}/state.db", "api_keys": [KEY]}
    first = await start_server(**state)
    async with aiohttp.ClientSession() as http:
        cookie = await _login(http, first.url)
        status, room = await _post(http, f"{first.url}/v1/rooms", bearer(KEY), room="standup")
        assert status == 201, room
        status, token = await _post(http, f"{first.url}/v1/tokens", bearer(KEY), app="echo")
        assert status == 201, token
        status, used = await _post(http, f"{first.url}/v1/tokens", bearer(KEY), app="echo")
        assert status == 201, used
        async with http.post(f"{first.url}/v1/sessions", headers=bearer(used["value"]),
                             json={"sdp": "v=0"}) as r:
            assert r.status == 400  # a malformed offer: the token is still live
    await first.runner.cleanup()  # the server stops; its store is closed

    second = await start_server(**state)
    page = {"Cookie": f"{COOKIE}={cookie}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{second.url}/captions", headers=page) as r:
            assert r.status == 200 and 'action="/login"' not in await r.text()  # still signed in
        status, body = await _post(http, f"{second.url}/v1/tokens", page, app="echo")  # the page mints
        assert status == 201, body
        async with http.get(f"{second.url}/v1/ice-servers", headers=bearer(token["value"])) as r:
            assert r.status == 200  # the client token minted before the restart
        link = bearer(room["join_token"])
        status, body = await _post(http, f"{second.url}/v1/tokens", link, app="call", config={"name": "ana"})
        # the link is still a valid credential, and its meeting (in memory, gone with the old process) is made
        # current again under its own id: the link admits to the room as before
        assert status == 201, body
        async with http.post(f"{second.url}/logout", headers=page, allow_redirects=False) as r:
            assert r.status == 303
        status, body = await _post(http, f"{second.url}/v1/tokens", page, app="echo")
        assert (status, body["error"]["code"]) == (401, "invalid_credentials"), body  # signed out for good
    await second.runner.cleanup()

    third = await start_server(**state)
    async with aiohttp.ClientSession() as http:
        status, body = await _post(http, f"{third.url}/v1/tokens", page, app="echo")
        assert (status, body["error"]["code"]) == (401, "invalid_credentials"), body  # the sign-out survived too
        bogus = await _post(http, f"{third.url}/v1/tokens", bearer("rj_" + "x" * 43), app="call")
        assert bogus[0] == 401


async def test_two_servers_on_one_redis_share_sign_ins_single_use_and_budgets(start_server, redis_url):  # noqa: F811
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    await client.flushdb()
    await client.aclose()
    shared = {"state_url": redis_url, "api_keys": [KEY], "rate_tokens_per_minute": 6}
    a, b = await start_server(**shared), await start_server(**shared)
    async with aiohttp.ClientSession() as http:
        cookie = await _login(http, a.url)
        page = {"Cookie": f"{COOKIE}={cookie}"}
        status, token = await _post(http, f"{b.url}/v1/tokens", page, app="echo")  # signed in on a, minted on b
        assert status == 201, token
        results = []
        for server in (a, b, a, b, a):  # the page's address has one budget of 5 (a burst), whichever server
            results.append((await _post(http, f"{server.url}/v1/tokens", page, app="echo"))[0])
        assert results[:4] == [201] * 4 and results[4] == 429, results
        status, minted = await _post(http, f"{a.url}/v1/tokens", bearer(KEY), app="interpret")
        assert status == 201, minted
        interpret = minted["value"]  # single use across servers: used on b, gone on a
        status, body, _ = await upload(http, b.url, bearer(interpret))
        assert status not in (401, 403), body  # past the access check (the junk file itself is refused)
        status, body, _ = await upload(http, a.url, bearer(interpret))
        assert (status, body["error"]["code"]) == (401, "invalid_credentials"), body
        async with http.get(f"{b.url}/health") as r:
            assert r.status == 200 and "state-test-password" not in await r.text()


def captions_worker(heard: str) -> Callable[[Settings], Worker]:
    """Engines for a server whose call captions come from the real captions pipeline with scripted engines: a
    detector that hears speech in every loud window and a recognizer that hears ``heard`` in every utterance."""

    def make(settings: Settings) -> Worker:
        worker = Worker()
        register(worker, "vad", ScriptedVAD(loud_above(0.05)), max_queue=256)
        register(worker, "asr", ScriptedASR(lambda request: heard), max_queue=64)
        return worker

    return make


def bursts(count: int, rate: int = 48000) -> np.ndarray:
    """``count`` utterances (1 s of tone, then 1.5 s of silence each), after 0.5 s of silence, as int16 mono."""
    t = np.arange(rate) / rate
    tone = (0.3 * 32767 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)
    gap = np.zeros(int(1.5 * rate), dtype=np.int16)
    return np.concatenate([np.zeros(rate // 2, dtype=np.int16)] + [tone, gap] * count)


async def _transcript(http: aiohttp.ClientSession, url: str, fmt: str = "json") -> Any:
    async with http.get(f"{url}/v1/rooms/standup/transcript.{fmt}", headers=bearer(KEY)) as r:
        assert r.status in (200, 404), await r.text()
        if r.status == 404:
            return None
        return await r.json() if fmt == "json" else await r.text()


async def _lines(http: aiohttp.ClientSession, url: str, text: str, at_least: int, timeout: float = 60.0) -> Any:
    """The transcript once it holds ``at_least`` lines saying ``text`` (polled, generous deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        body = await _transcript(http, url)
        if body is not None and sum(line["text"] == text for line in body["lines"]) >= at_least:
            return body
        assert time.monotonic() < deadline, f"the transcript has no {at_least} lines {text!r}: {body}"
        await asyncio.sleep(0.2)


async def test_a_call_keeps_its_join_link_and_its_whole_transcript_across_a_restart(start_server, tmp_path: Path):
    state = {"state_url": f"sqlite:///{tmp_path}/state.db", "api_keys": [KEY]}
    first = await start_server(make_worker=captions_worker("before the restart"), **state)
    async with aiohttp.ClientSession() as http:
        status, link = await _post(http, f"{first.url}/v1/rooms", bearer(KEY), room="standup")
        assert status == 201, link
        status, token = await _post(http, f"{first.url}/v1/tokens", bearer(link["join_token"]), app="call",
                                    config={"name": "Ana", "language": "en"})
        assert status == 201, token
        ana = ClientPeer(first.url, "call", credential=token["value"],
                         audio=PcmSourceTrack(bursts(2), 48000, tail="silence"))
        try:
            await ana.connect()
            await ana.wait_for("room.joined")
            before = await _lines(http, first.url, "before the restart", 2)  # captions of Ana's speech
            assert before["meeting_id"] == link["meeting_id"]
        finally:
            await first.runner.cleanup()  # the server stops (as on SIGTERM): Ana's session ends with it
            await ana.close(delete=False)

    second = await start_server(make_worker=captions_worker("after the restart"), **state)
    async with aiohttp.ClientSession() as http:
        status, token = await _post(http, f"{second.url}/v1/tokens", bearer(link["join_token"]), app="call",
                                    config={"name": "Ben", "language": "en"})
        assert status == 201, token  # the join link from before the restart still admits
        ben = ClientPeer(second.url, "call", credential=token["value"],
                         audio=PcmSourceTrack(bursts(1), 48000, tail="silence"))
        try:
            await ben.connect()
            await ben.wait_for("room.joined")
            assert second.app[ROOMS].rooms["standup"].meeting_id == link["meeting_id"]  # the same meeting
            after = await _lines(http, second.url, "after the restart", 1)
            replayed = [e["text"] for e in ben.events if e["type"] == "caption.final"
                        and (e.get("speaker") or {}).get("name") == "Ana"]
            assert len(replayed) >= len(before["lines"])  # the late joiner's replay holds the earlier lines
            vtt = await _transcript(http, second.url, "vtt")
            async with http.get(f"{second.url}/health") as r:
                stored = (await r.json())["state"]
            assert stored["store"] == "sqlite" and stored["meetings"]["ok"], stored  # every write went through
        finally:
            await ben.close()
    assert after["meeting_id"] == link["meeting_id"]
    kept = [(line["segment_id"], line["text"], line["name"]) for line in after["lines"]]
    assert all((line["segment_id"], line["text"], line["name"]) in kept for line in before["lines"])
    texts = [line["text"] for line in after["lines"]]  # in room-clock order: the clock went on after the restart
    assert texts == sorted(texts, key=lambda text: text != "before the restart"), texts
    assert {p["name"] for p in after["participants"]} >= {"Ana", "Ben"}
    assert vtt.count("before the restart") == texts.count("before the restart") and "after the restart" in vtt


async def test_a_second_server_on_one_redis_reads_the_whole_transcript(start_server, redis_url):  # noqa: F811
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    await client.flushdb()
    await client.aclose()
    shared = {"state_url": redis_url, "api_keys": [KEY]}
    a, b = await start_server(**shared), await start_server(**shared)
    async with aiohttp.ClientSession() as http:
        status, link = await _post(http, f"{a.url}/v1/rooms", bearer(KEY), room="standup")
        assert status == 201, link
        ana = ClientPeer(a.url, "call", config={"room": "standup", "name": "Ana"}, credential=KEY)
        try:
            await ana.connect()
            await ana.wait_for("room.joined")
            room = a.app[ROOMS].rooms["standup"]
            for i in range(3):  # the finals Ana's captions pipeline would hand the room
                room.on_caption(room.participants[ana.session_id], CaptionFinal(
                    segment_id=f"s{i}", text=f"line {i} on a", audio_start_ms=0, audio_end_ms=400))
            await a.app[ROOMS].meetings.persist.flush()
            body = await _transcript(http, b.url)  # the other node reads it from the shared store
            assert body is not None and body["meeting_id"] == link["meeting_id"]
            assert sorted(line["text"] for line in body["lines"]) == [f"line {i} on a" for i in range(3)]
            status, token = await _post(http, f"{b.url}/v1/tokens", bearer(link["join_token"]), app="call",
                                        config={"name": "Ben"})
            assert status == 201, token  # b knows the meeting is current: the link admits there too
        finally:
            await ana.close()
