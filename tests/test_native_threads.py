"""Media readers and writers hold no native threads of their own, during or after their media.

PyAV's ``AudioResampler`` runs a libavfilter graph that starts worker threads (one per core) unless told to use
none, and since PyAV 18.1.1 that graph is freed only by the cyclic garbage collector: a session kept after it
closes (the registry keeps recent sessions for ``GET`` and exports) once kept its resamplers' threads, and the
soak benchmark saw the server go from 29 to 222 threads. Every resampler now runs its graph on the calling
thread (``rtc.resampler``), and the audio reader and finished or cleared utterances drop theirs at once.
asyncio's default executor is started at full size with the server, so it does not creep up during a run.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from rtc_agent.rtc import AudioInput, SessionClock, SpeechOutput
from rtc_agent.rtc.resampler import audio_resampler
from rtc_agent.worker.default_executor import default_executor_size, prestart_default_executor
from tests.test_rtc_edges import ScriptedTrack, stereo_48k_frame

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")


def native_threads() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


@pytest.fixture(autouse=True)
def no_gc():
    """Keep the cyclic collector out of it: what is freed must be freed by the code, deterministically."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_a_resampler_starts_no_threads():
    before = native_threads()
    resamplers = [audio_resampler(16000) for _ in range(4)]
    out = [r.resample(stereo_48k_frame(0)) for r in resamplers]
    assert all(frames for frames in out)  # the graphs are configured: a default one would have started threads
    assert native_threads() <= before


@pytest.mark.parametrize("codec", ["opus", "g711", "g722"])
def test_aiortcs_audio_encoders_start_no_threads(codec):
    """aiortc makes a resampler per outgoing audio track (its encoder's); importing ``rtc_agent.rtc`` has them
    made without threads."""
    from aiortc.codecs import g711, g722, opus

    make = {"opus": opus.OpusEncoder, "g711": g711.PcmuEncoder, "g722": g722.G722Encoder}[codec]
    before = native_threads()
    encoders = [make() for _ in range(3)]
    for encoder in encoders:  # packets come out: the resampler's graph is configured
        assert any(encoder.encode(stereo_48k_frame(i * 960))[0] for i in range(5))
    assert native_threads() <= before


async def test_ended_audio_reader_holds_no_resampler_threads():
    before = native_threads()
    readers = [AudioInput(ScriptedTrack("audio", [stereo_48k_frame(i * 960) for i in range(3)]), SessionClock(),
                          lambda pcm, start: None) for _ in range(4)]
    for reader in readers:
        await reader.run()
    assert native_threads() <= before  # the readers are still referenced, as an ended session's are
    assert all(r.frames == 3 for r in readers)
    assert readers[0].convert(stereo_48k_frame(0)).size == 0  # a frame after the end converts to nothing


async def test_finished_and_cleared_utterances_hold_no_resampler_threads():
    out = SpeechOutput()
    before = native_threads()
    played = out.play(np.zeros(2205, dtype=np.int16), 22050)  # resampled to 48 kHz, then finished
    streaming = out.start_utterance(22050)
    streaming.write(np.zeros(2205, dtype=np.int16))
    out.clear()  # cut while still being written
    assert played.finished and streaming.cleared
    assert native_threads() <= before
    out.stop()


async def test_prestarted_default_executor_does_not_creep():
    """Sequential ``run_in_executor(None, ...)`` calls (aiortc encodes each outgoing audio frame so) add threads
    to a lazily started pool now and then; after the start-up prestart they add none."""
    loop = asyncio.get_running_loop()
    size = await prestart_default_executor()
    assert size == default_executor_size()
    before = threading.active_count()
    for _ in range(3000):
        await loop.run_in_executor(None, sum, range(100))
    assert threading.active_count() == before
