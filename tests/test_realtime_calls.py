"""The OpenAI Realtime WebRTC flow with a real aiortc peer: ``POST /v1/realtime/calls`` (SDP, or multipart with a
session), GA events on the ``oai-events`` data channel, the reply's speech on the audio track, hang-up."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from rtc_agent.rtc.peer_close import close_peer_connection
from rtc_agent.rtc.sources import PcmSourceTrack
from tests.conftest import rms
from tests.openai_stub import OpenAIStub, text_reply
from tests.realtime_helpers import check_shape, client

REPLY = "Hello from the other side of the call."


class Caller:
    """An aiortc peer doing OpenAI's WebRTC flow: microphone track, ``oai-events`` channel, SDP over HTTP."""

    def __init__(self) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        silence = np.zeros(48000, dtype=np.int16)
        self.pc.addTrack(PcmSourceTrack(silence, 48000, tail="silence"))
        self.channel = self.pc.createDataChannel("oai-events")
        self.events: list[dict[str, Any]] = []
        self.audio: list[np.ndarray] = []
        self.location: str | None = None
        self._new = asyncio.Event()
        self._readers: list[asyncio.Task] = []
        self.channel.on("message", self._on_message)
        self.pc.on("track", lambda track: self._readers.append(asyncio.ensure_future(self._read(track))))

    def _on_message(self, message: str) -> None:
        self.events.append(check_shape(json.loads(message)))
        self._new.set()

    async def _read(self, track: Any) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                self.audio.append(frame.to_ndarray().reshape(-1))

    async def call(self, url: str, key: str, *, session: dict[str, Any] | None = None) -> int:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = self.pc.localDescription.sdp
        headers = {"Authorization": f"Bearer {key}"}
        async with aiohttp.ClientSession() as http:
            if session is None:
                request = http.post(url + "/v1/realtime/calls?model=gpt-realtime", data=offer,
                                    headers={**headers, "Content-Type": "application/sdp"})
            else:
                form = aiohttp.MultipartWriter("form-data")
                for name, value in (("sdp", offer), ("session", json.dumps(session))):
                    form.append(value).set_content_disposition("form-data", name=name)
                request = http.post(url + "/v1/realtime/calls", data=form, headers=headers)
            async with request as res:
                if res.status != 201:
                    return res.status
                assert res.content_type == "application/sdp"
                self.location = res.headers["Location"]
                answer = await res.text()
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        return 201

    def send(self, event: dict[str, Any]) -> None:
        self.channel.send(json.dumps(event))

    async def wait_for(self, kind: str, timeout: float = 20.0, *, after: int = 0,
                       where: Callable[[dict[str, Any]], bool] = lambda e: True) -> dict[str, Any]:
        """The first event of ``kind`` (among events from index ``after`` on) that ``where`` accepts."""
        async with asyncio.timeout(timeout):
            while True:
                for event in self.events[after:]:
                    if event["type"] == kind and where(event):
                        return event
                self._new.clear()
                await self._new.wait()

    async def close(self) -> None:
        await close_peer_connection(self.pc, name="realtime call")
        for task in self._readers:
            task.cancel()


@pytest.mark.real_model
async def test_a_webrtc_call_speaks_ga_events_on_oai_events(start_server):
    async with OpenAIStub(default=text_reply(REPLY)) as stub:
        server = await start_server(llm_engine="openai", llm_url=stub.url, heartbeat_timeout_s=2.0)
        caller = Caller()
        try:
            assert await caller.call(server.url, "sk-anything") == 201
            assert caller.location is not None and caller.location.startswith("/v1/realtime/calls/")
            created = await caller.wait_for("session.created")
            assert created["session"]["type"] == "realtime" and created["session"]["model"] == "gpt-realtime"
            caller.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}})
            caller.send({"type": "response.create"})
            done = await caller.wait_for("response.done", timeout=40)
            assert done["response"]["status"] == "completed"
            started = await caller.wait_for("output_audio_buffer.started")
            assert started["response_id"] == done["response"]["id"]
            transcript = await caller.wait_for("response.output_audio_transcript.done")
            assert transcript["transcript"] == REPLY
            await caller.wait_for("output_audio_buffer.stopped", timeout=20)
            kinds = [e["type"] for e in caller.events]
            assert "response.output_audio.delta" not in kinds  # the audio is on the track
            assert "response.output_audio.done" in kinds
            heard = np.concatenate(caller.audio)
            assert rms(heard) > 0.005, rms(heard)
            await asyncio.sleep(3.0)  # no client message for longer than the heartbeat: the audio track keeps it
            session = server.registry.get(caller.location.rsplit("/", 1)[-1])
            assert session.state == "connected", session.close_reason
            caller.send({"type": "input_audio_buffer.append", "audio": ""})
            error = await caller.wait_for("error")
            assert error["error"]["code"] == "unsupported_parameter"
            async with aiohttp.ClientSession() as http, http.post(
                    server.url + caller.location + "/hangup", headers={"Authorization": "Bearer x"}) as res:
                assert res.status == 200
            assert session.state == "closed" and session.close_reason == "deleted"
        finally:
            await caller.close()


async def test_a_call_takes_its_session_from_a_multipart_body_or_a_client_secret(start_server):
    server = await start_server()
    caller = Caller()
    try:
        session = {"type": "realtime", "instructions": "Speak like a pirate.", "audio": {"input": {
            "turn_detection": None}}}
        assert await caller.call(server.url, "sk-anything", session=session) == 201
        created = await caller.wait_for("session.created")
        assert created["session"]["instructions"] == "Speak like a pirate."
        assert created["session"]["audio"]["input"]["turn_detection"] is None
    finally:
        await caller.close()
    secret = await client(server).realtime.client_secrets.create(
        session={"type": "transcription", "audio": {"input": {"transcription": {"language": "en"}}}})
    caller = Caller()
    try:
        assert await caller.call(server.url, secret.value) == 201
        created = await caller.wait_for("session.created")
        assert created["session"]["type"] == "transcription" and created["session"]["id"] == secret.session.id
        assert server.registry.get(secret.session.id).app_name == "captions"
    finally:
        await caller.close()
    again = Caller()
    try:
        assert await again.call(server.url, secret.value) == 401  # one call per secret
    finally:
        await again.close()


async def test_a_refused_offer_leaves_its_client_secret_for_a_valid_one(start_server):
    """A client secret is used up only by an offer that is valid: malformed multipart bodies, a session the
    server refuses and an SDP that is not one each get a 400, and the same secret then opens its call."""
    from tests.test_fuzz_routes import form, named

    server = await start_server()
    secret = await client(server).realtime.client_secrets.create(session={"type": "realtime"})
    offer = form("b0und", [(named("sdp"), b"v=0\r\n"), (named("session"), b"{}")])
    refused = [
        ("multipart/form-data", offer, "invalid_multipart"),
        ("multipart/form-data; boundary=" + "a" * 71, offer, "invalid_multipart"),
        ("multipart/form-data; boundary=b0und", b"\x00garbage\xff", "invalid_multipart"),
        ("multipart/form-data; boundary=b0und", offer[:30], "invalid_multipart"),
        ("multipart/form-data; boundary=b0und", form("b0und", [(named("sdp"), b"v=0\r\n")] * 2), "invalid_multipart"),
        ("multipart/form-data; boundary=b0und", form("b0und", [(named("sdp"), b"v=0\r\n"), (
            named("session"), json.dumps({"type": "realtime", "output_modalities": ["smell"]}).encode())]),
         "invalid_value"),
        ("application/sdp", b"v=0\r\nm=text 9 UDP/DTLS/SCTP webrtc-datachannel\r\n", "invalid_sdp"),
        ("application/sdp", b"not an offer", "invalid_sdp"),
    ]
    async with aiohttp.ClientSession() as http:
        for content_type, body, code in refused:
            async with http.post(server.url + "/v1/realtime/calls", data=body, headers={
                    "Authorization": f"Bearer {secret.value}", "Content-Type": content_type}) as res:
                answer = await res.json()
            assert res.status == 400 and answer["error"]["code"] == code, (content_type, body[:80], answer)
    caller = Caller()
    try:
        assert await caller.call(server.url, secret.value) == 201  # still live: none of the above used it
        created = await caller.wait_for("session.created")
        assert created["session"]["id"] == secret.session.id
    finally:
        await caller.close()
    again = Caller()
    try:
        assert await again.call(server.url, secret.value) == 401  # and now it is spent
    finally:
        await again.close()


async def test_a_stalled_multipart_offer_gets_408_in_time(start_server):
    """A form that stops arriving is answered within ``request_read_timeout_s`` (it holds nothing for long)."""
    from tests.test_upload_limits import read_status

    server = await start_server(request_read_timeout_s=1.0)
    port = int(server.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"POST /v1/realtime/calls HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: "
                     f"multipart/form-data; boundary=b0und\r\nContent-Length: 10000\r\n\r\n".encode()
                     + b'--b0und\r\nContent-Disposition: form-data; name="sdp"\r\n\r\nv=0\r\n')
        await writer.drain()
        started = asyncio.get_running_loop().time()
        status, body = await read_status(reader, timeout=5.0)
        assert status == 408, body
        assert asyncio.get_running_loop().time() - started < 3.0
    finally:
        writer.close()
