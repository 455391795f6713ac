"""The real captions transcriber over the packaged Whisper, with the VAD's verdicts scripted: a clip's finals when
the VAD hears speech only within given spans (tests of what a final decode hears, through the real model)."""

from __future__ import annotations

import asyncio

import numpy as np

from rtc_agent.apps.captions.transcriber import StreamingTranscriber
from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.bench.captions_virtual import WINDOW, replay
from rtc_agent.config import Settings
from tests.conftest import shared_worker


async def finals_with_scripted_vad(clip: np.ndarray, speech: list[tuple[float, float]],
                                   config: TranscriberConfig) -> tuple[list[str], dict]:
    """The final captions of ``clip`` (16 kHz int16) when the VAD hears speech within ``speech`` (seconds) and nowhere
    else, transcribed with ``config`` by a worker of its own (over engines shared across tests); and the
    transcriber's stats."""
    worker = shared_worker(Settings())
    events: list = []
    tasks: list[asyncio.Task] = []

    def spawn(coro, name: str) -> asyncio.Task:
        tasks.append(asyncio.ensure_future(coro))
        return tasks[-1]

    transcriber = StreamingTranscriber(lambda request: worker.call("asr", request), events.append, spawn, config)
    audio = clip.astype(np.float32) / 32768
    windows = len(audio) // WINDOW
    probs = np.array([1.0 if any(a * 1000 <= i * 32 < b * 1000 for a, b in speech) else 0.0 for i in range(windows)])
    try:
        await replay(transcriber, audio, probs, tasks)
    finally:
        await worker.close()
    finals = [e.text for e in events if getattr(e, "type", "") == "caption.final" and e.text.strip()]
    return finals, transcriber.stats()
