"""Sessions through the real server with in-process aiortc peers: media, lifecycle, limits and bad input."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import numpy as np
import pytest

from rtc_agent.rtc.client import ClientPeer, SessionRefused
from rtc_agent.rtc.sources import PatternVideoTrack, PcmSourceTrack
from tests.conftest import rms, tone


async def wait_until(predicate, timeout: float = 10.0, period: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(period)
    raise AssertionError(f"condition not met within {timeout} s")


async def test_session_created_and_media_counted(server):
    audio = PcmSourceTrack(tone(5.0), 48000, tail="end")
    video = PatternVideoTrack(320, 240, fps=15, seconds=5.0)
    async with ClientPeer(server.url, "echo", audio=audio, video=video) as peer:
        created = await peer.wait_for("session.created")
        assert created["session"]["id"] == peer.session_id
        assert created["session"]["app"] == "echo"
        assert created["session"]["config"] == {"delay_s": 1.0}
        assert isinstance(created["event_id"], str) and "session_ms" in created
        await wait_until(lambda: audio.finished and video.frames_sent >= 75, timeout=15)
        await asyncio.sleep(1.0)  # let the last packets arrive
        info = await peer.session_info()
    assert info["state"] == "connected"
    assert info["connection_state"] == "connected"
    assert info["event_channel"] == "open"
    assert 4700 <= info["audio"]["received_ms"] <= 5100, info["audio"]
    assert abs(info["session_ms"] - info["audio"]["received_ms"]) <= 40
    assert 60 <= info["video"]["frames_received"] <= 76, info["video"]
    assert (info["video"]["width"], info["video"]["height"]) == (320, 240)


async def test_echo_plays_the_audio_back(server):
    audio = PcmSourceTrack(tone(2.5, freq=440.0), 48000, tail="silence")
    async with ClientPeer(server.url, "echo", audio=audio) as peer:
        await wait_until(lambda: peer.received_audio().size >= 48000 * 4.0, timeout=15)
        received = peer.received_audio()
        info = await peer.session_info()
    assert info["output"]["speech_frames_sent"] > 100
    assert info["app_stats"]["echoed_ms"] >= 2500
    # The server answers with silence during the echo delay, then the tone.
    loud = [rms(received[i:i + 960]) > 0.05 for i in range(0, received.size - 960, 960)]
    assert any(loud), "no audible audio came back"
    first_loud = loud.index(True)
    assert first_loud >= 40, "audio came back before the echo delay"  # 40 frames = 0.8 s
    tail = received[first_loud * 960:first_loud * 960 + 48000]
    spectrum = np.abs(np.fft.rfft(tail.astype(np.float64)))
    peak_hz = np.argmax(spectrum) * 48000 / tail.size
    assert abs(peak_hz - 440.0) < 15, f"echoed audio peaks at {peak_hz:.0f} Hz, not 440 Hz"


async def _settled_task_count(baseline: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        count = len([t for t in asyncio.all_tasks() if not t.done()])
        if count <= baseline or time.monotonic() > deadline:
            return count
        await asyncio.sleep(0.1)


async def test_delete_ends_everything(server):
    await asyncio.sleep(0.2)
    baseline = len([t for t in asyncio.all_tasks() if not t.done()])
    peer = ClientPeer(server.url, "echo", audio=PcmSourceTrack(tone(10.0), tail="silence"),
                      video=PatternVideoTrack(fps=10))
    await peer.connect()
    await peer.wait_for("session.created")
    session = server.registry.get(peer.session_id)
    assert session.task_count >= 4
    assert await peer.delete() == 204
    assert session.state == "closed" and session.close_reason == "deleted"
    assert session.task_count == 0
    assert not [t for t in asyncio.all_tasks() if session.id in t.get_name() and not t.done()]
    assert session.pc.connectionState == "closed"
    assert peer.session_id not in server.registry.active
    info = await peer.session_info()
    assert info["state"] == "closed"
    await peer.close(delete=False)
    assert await _settled_task_count(baseline) <= baseline


async def test_peer_close_ends_the_session(server):
    await asyncio.sleep(0.2)
    baseline = len([t for t in asyncio.all_tasks() if not t.done()])
    peer = ClientPeer(server.url, "echo", audio=PcmSourceTrack(tone(10.0), tail="silence"))
    await peer.connect()
    session = server.registry.get(peer.session_id)
    await peer.close(delete=False)
    await wait_until(lambda: session.state == "closed", timeout=10)
    assert session.close_reason == "peer_closed"
    assert session.task_count == 0
    assert await _settled_task_count(baseline) <= baseline


async def test_heartbeat_loss_closes_the_session(start_server):
    server = await start_server(heartbeat_timeout_s=1.0)
    peer = ClientPeer(server.url, "echo", heartbeat_s=None)
    await peer.connect()
    session = server.registry.get(peer.session_id)
    await wait_until(lambda: session.state == "closed", timeout=10)
    assert session.close_reason == "heartbeat_lost"
    await peer.close(delete=False)


async def test_heartbeat_keeps_the_session(start_server):
    server = await start_server(heartbeat_timeout_s=1.0)
    async with ClientPeer(server.url, "echo", heartbeat_s=0.3) as peer:
        await asyncio.sleep(2.0)
        assert server.registry.get(peer.session_id).state == "connected"
        pong = await peer.wait_for("pong")
        assert pong["ping_event_id"].startswith("cli_")


async def test_max_duration(start_server):
    server = await start_server(max_session_seconds=1.0)
    peer = ClientPeer(server.url, "echo")
    await peer.connect()
    session = server.registry.get(peer.session_id)
    await wait_until(lambda: session.state == "closed", timeout=10)
    assert session.close_reason == "max_duration"
    await peer.close(delete=False)


async def test_session_cap_answers_503(start_server):
    server = await start_server(max_sessions=1)
    async with ClientPeer(server.url, "echo"):
        second = ClientPeer(server.url, "echo")
        with pytest.raises(SessionRefused) as refused:
            await second.connect()
        await second.close(delete=False)
        assert refused.value.status == 503
        assert refused.value.body["error"]["code"] == "too_many_sessions"
        async with aiohttp.ClientSession() as http, http.post(
            f"{server.url}/v1/sessions", json={"app": "echo", "sdp": "v=0"}
        ) as resp:
            assert resp.status == 503
            assert int(resp.headers["Retry-After"]) >= 1


async def _post(url: str, **kwargs) -> tuple[int, dict, dict]:
    async with aiohttp.ClientSession() as http, http.post(url, **kwargs) as resp:
        body = await resp.read()
        return resp.status, dict(resp.headers), (json.loads(body) if body else {})


async def test_bad_offers_get_json_errors(start_server):
    server = await start_server(max_body_bytes=4096)
    url = f"{server.url}/v1/sessions"
    cases = [
        ({"json": {"app": "echo", "sdp": "hello"}}, 400, "invalid_sdp"),
        ({"json": {"app": "echo", "sdp": "v=0\r\nblah"}}, 400, "invalid_sdp"),
        ({"json": {"app": "echo", "sdp": "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio x\r\n"}},
         400, "invalid_sdp"),
        ({"json": {"app": "nope", "sdp": "v=0"}}, 400, "unknown_app"),
        ({"json": {"sdp": "v=0"}}, 400, "missing_app"),
        ({"json": {"app": "echo", "sdp": "v=0", "type": "answer"}}, 400, "invalid_sdp_type"),
        ({"json": {"app": "echo", "sdp": "v=0", "config": {"delay_s": 99}}}, 400, "invalid_config"),
        ({"json": {"app": "echo", "sdp": "v=0", "config": {"bogus": 1}}}, 400, "invalid_config"),
        ({"json": ["not", "an", "object"]}, 400, "invalid_request"),
        ({"data": b"{not json", "headers": {"Content-Type": "application/json"}}, 400, "invalid_json"),
        ({"data": b"v=0", "headers": {"Content-Type": "text/plain"}}, 415, "unsupported_media_type"),
        ({"json": {"app": "echo", "sdp": "v=0" + "x" * 5000}}, 413, "payload_too_large"),
    ]
    for kwargs, status, code in cases:
        got_status, _, body = await _post(url, **kwargs)
        assert (got_status, body.get("error", {}).get("code")) == (status, code), (kwargs, body)
        assert body["error"]["message"] and body["error"]["type"]
    assert not server.registry.active


async def test_whip_style_offer_and_trickle(server):
    """An SDP body with ?app= gets an SDP answer; candidates trickled with PATCH connect the session."""
    from aiortc import RTCPeerConnection, RTCSessionDescription

    pc = RTCPeerConnection()
    pc.addTrack(PcmSourceTrack(tone(3.0), tail="silence"))
    channel = pc.createDataChannel("events")
    opened = asyncio.Event()
    channel.on("open", opened.set)
    await pc.setLocalDescription(await pc.createOffer())
    lines = pc.localDescription.sdp.splitlines()
    candidates = [ln[2:] for ln in lines if ln.startswith("a=candidate:")]
    offer = "\r\n".join(ln for ln in lines if not ln.startswith(("a=candidate:", "a=end-of-candidates"))) + "\r\n"
    assert candidates
    status, headers, _ = 0, {}, {}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{server.url}/v1/sessions?app=echo", data=offer.encode(),
                             headers={"Content-Type": "application/sdp"}) as resp:
            status, headers, answer = resp.status, resp.headers, await resp.text()
        assert status == 201 and headers["Content-Type"].startswith("application/sdp")
        location = headers["Location"]
        auth = {"Authorization": f"Bearer {headers['X-Session-Token']}"}
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        async with http.patch(f"{server.url}{location}", json={"candidates": [{"candidate": "garbage"}]},
                              headers=auth) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "invalid_candidate"
        frag = "a=mid:0\r\n" + "".join(f"a={c}\r\n" for c in candidates) + "a=end-of-candidates\r\n"
        async with http.patch(f"{server.url}{location}", data=frag.encode(),
                              headers={"Content-Type": "application/trickle-ice-sdpfrag", **auth}) as r:
            assert r.status == 204
        await asyncio.wait_for(opened.wait(), 15)
        async with http.get(f"{server.url}{location}", headers=auth) as r:
            assert (await r.json())["connection_state"] == "connected"
        async with http.delete(f"{server.url}{location}", headers=auth) as r:
            assert r.status == 204
        async with http.get(f"{server.url}/v1/sessions/sess_missing") as r:
            # without a credential an unknown id looks like a known one (no existence oracle)
            assert r.status == 401 and (await r.json())["error"]["code"] == "missing_credentials"
    await pc.close()


async def test_json_trickle(server):
    from aiortc import RTCPeerConnection, RTCSessionDescription

    pc = RTCPeerConnection()
    channel = pc.createDataChannel("events")
    pc.addTransceiver("audio", direction="recvonly")
    opened = asyncio.Event()
    channel.on("open", opened.set)
    await pc.setLocalDescription(await pc.createOffer())
    lines = pc.localDescription.sdp.splitlines()
    candidates = [{"candidate": ln[2:], "sdpMid": "0", "sdpMLineIndex": 0}
                  for ln in lines if ln.startswith("a=candidate:")]
    offer = "\r\n".join(ln for ln in lines if not ln.startswith(("a=candidate:", "a=end-of-candidates"))) + "\r\n"
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{server.url}/v1/sessions", json={"app": "echo", "sdp": offer}) as resp:
            data = await resp.json()
        auth = {"Authorization": f"Bearer {data['session_token']}"}
        await pc.setRemoteDescription(RTCSessionDescription(sdp=data["sdp"], type="answer"))
        async with http.patch(f"{server.url}/v1/sessions/{data['session_id']}",
                              json={"candidates": candidates, "end_of_candidates": True}, headers=auth) as r:
            assert r.status == 204
        await asyncio.wait_for(opened.wait(), 15)
        async with http.delete(f"{server.url}/v1/sessions/{data['session_id']}", headers=auth) as r:
            assert r.status == 204
    await pc.close()


async def test_bad_client_events_get_error_events(start_server):
    server = await start_server(max_event_bytes=2048)
    async with ClientPeer(server.url, "echo") as peer:
        await peer.wait_for("session.created")
        peer.send_raw("{not json")
        err = await peer.wait_for("error", lambda e: e["error"]["code"] == "invalid_json")
        assert err["error"]["type"] == "invalid_request_error"
        peer.send({"type": "no.such.event", "event_id": "e1"})
        err = await peer.wait_for("error", lambda e: e["error"]["code"] == "unknown_event")
        assert err["error"]["event_id"] == "e1"
        peer.send({"type": "vision.prompt", "text": ""})
        await peer.wait_for("error", lambda e: e["error"]["code"] == "invalid_event")
        peer.send({"type": "ping", "pad": "x" * 4000})
        await peer.wait_for("error", lambda e: e["error"]["code"] == "message_too_large")
        peer.send_raw("[1, 2]")
        await peer.wait_for("error", lambda e: "JSON object" in e["error"]["message"])
        peer.send({"type": "response.cancel"})  # valid, but echo does not handle it
        await peer.wait_for("error", lambda e: e["error"]["code"] == "unsupported_event")
        peer.send({"type": "session.update", "session": {"config": {"delay_s": 0.5}}})
        updated = await peer.wait_for("session.updated")
        assert updated["session"]["config"]["delay_s"] == 0.5
        peer.send({"type": "ping", "event_id": "still-alive", "client_ts": 1.0})
        pong = await peer.wait_for("pong", lambda e: e["ping_event_id"] == "still-alive")
        assert pong["client_ts"] == 1.0
        assert server.registry.get(peer.session_id).state == "connected"
    text = await _metrics(server)
    assert 'rtc_agent_errors_total{code="unknown_event"} 1.0' in text


async def _metrics(server) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


async def test_health_and_metrics(server):
    async with ClientPeer(server.url, "echo") as peer:
        await peer.wait_for("session.created")
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/health") as resp:
            health = await resp.json()
        assert health["status"] == "ok" and health["sessions"]["active"] == 1
        text = await _metrics(server)
        assert 'rtc_agent_sessions_active{app="echo"} 1.0' in text
    text = await _metrics(server)
    assert 'rtc_agent_sessions_total{app="echo"} 1.0' in text
    assert 'rtc_agent_sessions_active{app="echo"} 0.0' in text
    assert "rtc_agent_event_loop_lag_seconds_bucket" in text
    assert 'rtc_agent_stage_latency_seconds_count{stage="connect"} 1.0' in text


async def test_ice_failure_ends_the_session(server):
    """No usable remote candidate and end-of-candidates: ICE fails and the session closes itself."""
    from aiortc import RTCPeerConnection

    pc = RTCPeerConnection()
    pc.createDataChannel("events")
    pc.addTransceiver("audio", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    offer = "\r\n".join(ln for ln in pc.localDescription.sdp.splitlines()
                        if not ln.startswith(("a=candidate:", "a=end-of-candidates"))) + "\r\n"
    await pc.close()  # the client vanishes before it ever answers a connectivity check
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{server.url}/v1/sessions", json={"app": "echo", "sdp": offer}) as resp:
            data = await resp.json()
        session_id = data["session_id"]
        session = server.registry.get(session_id)
        async with http.patch(f"{server.url}/v1/sessions/{session_id}",
                              json={"candidates": [], "end_of_candidates": True},
                              headers={"Authorization": f"Bearer {data['session_token']}"}) as resp:
            assert resp.status == 204
    await wait_until(lambda: session.state == "closed", timeout=15)
    assert session.close_reason == "ice_failed"
    assert session.task_count == 0
