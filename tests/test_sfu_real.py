"""An SFU room with the real engines (Silero VAD, Whisper): a speaker's espeak-ng speech, published to a real Janus
by an aiortc peer, reaches rtc-agent through Janus and comes back as captions on a listener's event channel, with
a bounded word error rate over several sentences (which words Whisper gets differs between CPUs: a bound, never
exact words)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sfu import FeedPublisher, JanusClient
from rtc_agent.rtc.sources import PcmSourceTrack
from rtc_agent.server.keys import WORKER
from rtc_agent.words.scoring import wer
from tests.espeak import espeak_clip, have_espeak
from tests.janus import Janus, requires_janus, run_janus
from tests.speech import resample

pytestmark = [pytest.mark.real_model, requires_janus,
              pytest.mark.skipif(not have_espeak(), reason="needs espeak-ng")]

SENTENCES = ["Please remember to bring your umbrella tomorrow morning.",
             "The library opens at nine on Saturday.",
             "We will meet again next week to plan the garden."]
MAX_WER = 0.5  # espeak-ng's robotic voice through Opus twice (to Janus, from Janus); generous on every CPU
DEADLINE_S = 180.0


@pytest.fixture(scope="module")
def janus(tmp_path_factory: pytest.TempPathFactory) -> Janus:
    with run_janus(Path(tmp_path_factory.mktemp("janus"))) as server:
        yield server


async def test_speech_through_janus_becomes_captions(start_server, janus: Janus) -> None:
    server = await start_server(sfu_url=janus.ws_url, sfu_api_secret=janus.api_secret)
    for engine in ("vad", "asr"):  # loaded before the speech, as --preload does
        await server.app[WORKER].load(engine)
    room = "real-sfu"
    speaker = ClientPeer(server.url, "call", receive_audio=False,
                         config={"room": room, "mode": "sfu", "name": "Alan", "language": "en"})
    listener = ClientPeer(server.url, "call", receive_audio=False,
                          config={"room": room, "name": "Lia", "language": "en", "role": "listener"})
    client = await JanusClient(janus.ws_url, api_secret=janus.api_secret).connect()
    publisher = None
    try:
        await speaker.connect()
        joined = await speaker.wait_for("room.joined", timeout=60)
        await listener.connect()
        await listener.wait_for("room.joined", timeout=60)
        speech = resample(espeak_clip(SENTENCES, "en", lead_s=1.0, gap_s=1.2, tail_s=2.0), 16000, 48000)
        publisher = FeedPublisher(client, joined["sfu"]["room"], PcmSourceTrack(speech, 48000, tail="silence"),
                                  display=joined["sfu"]["display"], token=joined["sfu"]["token"])
        await publisher.start()
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        reference = " ".join(SENTENCES)

        def heard() -> str:
            return " ".join(e["text"] for e in listener.events if e["type"] == "caption.final"
                            and (e.get("speaker") or {}).get("name") == "Alan")

        while len(heard().split()) < len(reference.split()) * 0.8 or wer(reference, heard()) > MAX_WER:
            assert asyncio.get_running_loop().time() < deadline, f"captions through Janus: {heard()!r}"
            await asyncio.sleep(0.5)
        assert wer(reference, heard()) <= MAX_WER
    finally:
        if publisher is not None:
            await publisher.close()
        await listener.close()
        await speaker.close()
        await client.close()
