"""Barge-in in the agent app, with scripted engines in a real worker and a real SpeechOutput: quiet speech over a
reply (echo, breathing) and a short loud sound never cancel it; loud speech for ``barge_in_min_ms`` does."""

from __future__ import annotations

import asyncio

import numpy as np

from rtc_agent.apps.agent.app import AgentApp
from rtc_agent.rtc import SpeechOutput
from rtc_agent.worker import Worker
from tests.fakes import ScriptedAppContext, ScriptedASR, ScriptedChat, ScriptedTTS, ScriptedVAD, register

STORY = "Once upon a time a small fox lived at the edge of a quiet forest, and she loved the river. " * 3


def frame(dbfs: float | None) -> np.ndarray:
    if dbfs is None:
        return np.zeros(320, dtype=np.int16)
    level = 32768 * np.sqrt(2) * 10 ** (dbfs / 20)
    return (level * np.sin(2 * np.pi * 300 * np.arange(320) / 16000)).astype(np.int16)


async def play(app: AgentApp, ctx: ScriptedAppContext, speech: SpeechOutput, ms: int, dbfs: float | None) -> None:
    """``ms`` of input at ``dbfs`` (None: silence), while the agent's audio plays out in step."""
    for _ in range(ms // 20):
        app.on_audio(frame(dbfs), ctx.ms)
        speech.next_frame_pcm()
        ctx.ms += 20
        await asyncio.sleep(0.004)


async def test_only_loud_speech_for_the_minimum_cancels_a_reply():
    worker = Worker()
    register(worker, "vad", ScriptedVAD(lambda w: (np.abs(w).max(axis=1) > 0.0005).astype(np.float32)),
             max_queue=256)
    register(worker, "asr", ScriptedASR(lambda request: "Tell me a story."))
    register(worker, "llm", ScriptedChat(default=STORY))
    register(worker, "tts", ScriptedTTS(seconds=lambda text: 0.06 * len(text.split())))
    speech = SpeechOutput()
    ctx = ScriptedAppContext(worker, speech=speech)
    app = AgentApp(ctx, AgentApp.validate_config({"preemptive": False, "tools": False}, ctx.settings))
    await app.start()
    try:
        await play(app, ctx, speech, 800, -20)  # the question
        await play(app, ctx, speech, 600, None)
        for _ in range(400):
            if app.responder is not None and app.responder.audible and app.responder.played_ms > 600:
                break
            await play(app, ctx, speech, 20, None)
        assert app.responder is not None and app.responder.audible
        reply = app.responder
        starts = len(ctx.of("input_audio_buffer.speech_started"))
        # echo and breathing: the VAD calls it speech, the level stays under the floor
        await play(app, ctx, speech, 1000, -55)
        await play(app, ctx, speech, 600, None)
        # a loud cough, shorter than the minimum
        await play(app, ctx, speech, 260, -15)
        await play(app, ctx, speech, 800, None)
        assert app.responder is reply and (reply.status == "in_progress" or reply.playing), ctx.types()
        assert app.counts["barge_ins"] == 0
        assert len(ctx.of("input_audio_buffer.speech_started")) == starts  # no turn was opened
        assert not speech.paused  # the reply plays on
        # the user talks over it, loud and long enough
        await play(app, ctx, speech, 600, -18)
        assert app.counts["barge_ins"] == 1, ctx.types()
        assert len(ctx.of("input_audio_buffer.speech_started")) == starts + 1
        await play(app, ctx, speech, 200, None)
        assert not reply.playing
    finally:
        await app.close()
        for task in ctx.tasks:
            task.cancel()
        await asyncio.gather(*ctx.tasks, return_exceptions=True)
        await worker.close()
