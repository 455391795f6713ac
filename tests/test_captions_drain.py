"""The captions app ends a session's speech with a final caption (bounded wait) or says what it dropped (issue 11):
scripted VAD and ASR engines (the ASR a busy one) in a real worker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

from rtc_agent.apps.captions.app import CaptionsApp
from rtc_agent.engines.asr.base import Segment, TranscribeRequest, Transcript
from rtc_agent.worker import Worker
from tests.fakes import ScriptedAppContext, ScriptedASR, ScriptedVAD, register


def hello_there(request: TranscribeRequest) -> Transcript:
    """The scripted ASR's answer to every decode: "hello there", in English, over the whole audio."""
    audio_s = len(request.audio) / 16000
    return Transcript(text="hello there", segments=[Segment(0.0, audio_s, "hello there")], language="en",
                      language_prob=1.0, prefix_applied=True, audio_s=audio_s)


async def captions_closed_with(reason: str, asr_delay: float, **settings: Any) -> tuple[ScriptedAppContext, float]:
    """Speak 1.5 s into a captions app, end it with ``reason``; the context and how long close() took."""
    asr = ScriptedASR(hello_there, delay_s=asr_delay)  # a busy engine
    worker = Worker()
    register(worker, "vad", ScriptedVAD(0.9, delay_s=0.002), max_queue=64)  # every window is speech
    register(worker, "asr", asr, max_queue=64, concurrency=8)
    ctx = ScriptedAppContext(worker, **settings)
    app = CaptionsApp(ctx, CaptionsApp.validate_config({"vision": False, "language": "en"}, ctx.settings))
    await app.start()
    tone = (np.sin(np.arange(320) / 3) * 8000).astype(np.int16)
    for _ in range(75):  # 1.5 s in 20 ms chunks
        app.on_audio(tone, ctx.ms)
        ctx.ms += 20
        await asyncio.sleep(0)
    ctx.close_reason = reason
    started = time.monotonic()
    await app.close()
    took = time.monotonic() - started
    for task in ctx.tasks:
        task.cancel()
    await asyncio.gather(*ctx.tasks, return_exceptions=True)
    asr.release()  # no engine thread left waiting out its delay
    await worker.close()
    return ctx, took


@pytest.mark.parametrize("reason", ["deleted", "server_shutdown", "max_duration"])
async def test_captions_finish_the_open_utterance_before_the_session_ends(reason):
    ctx, took = await captions_closed_with(reason, asr_delay=0.3, final_drain_s=3.0)
    finals = [e for e in ctx.events if e.type == "caption.final"]
    assert len(finals) == 1 and finals[0].text == "hello there", ctx.types()
    assert finals[0].audio_end_ms == 1500
    assert "error:captions_dropped" not in ctx.types()
    assert took < 3.0


async def test_captions_say_what_was_dropped_when_the_final_cannot_finish():
    ctx, took = await captions_closed_with("deleted", asr_delay=10.0, final_drain_s=0.5)
    assert "caption.final" not in ctx.types()
    dropped = [e for e in ctx.events if e.type == "error" and e.error.code == "captions_dropped"]
    assert len(dropped) == 1 and "ms of speech without a final caption" in dropped[0].error.message
    assert 0.4 < took < 1.5


async def test_captions_do_not_wait_when_the_client_is_gone():
    ctx, took = await captions_closed_with("heartbeat_lost", asr_delay=10.0, final_drain_s=3.0)
    assert took < 0.2 and "error:captions_dropped" not in ctx.types()


async def test_a_session_that_sent_no_audio_has_nothing_to_finish():
    """A call participant without a microphone: the session's clock ran, no audio arrived, nothing is dropped."""
    worker = Worker()
    register(worker, "vad", ScriptedVAD(0.9, delay_s=0.002), max_queue=64)
    register(worker, "asr", ScriptedASR(hello_there), max_queue=64)
    ctx = ScriptedAppContext(worker, final_drain_s=1.0)
    app = CaptionsApp(ctx, CaptionsApp.validate_config({"vision": False, "language": "en"}, ctx.settings))
    await app.start()
    ctx.ms = 20_000
    ctx.close_reason = "deleted"
    started = time.monotonic()
    await app.close()
    for task in ctx.tasks:
        task.cancel()
    await asyncio.gather(*ctx.tasks, return_exceptions=True)
    await worker.close()
    assert "error:captions_dropped" not in ctx.types() and time.monotonic() - started < 0.5
