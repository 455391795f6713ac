"""Unit tests of the WebRTC edges with scripted tracks (the real-peer path is in test_sessions.py)."""

from __future__ import annotations

import asyncio
import fractions

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from rtc_agent.rtc import AudioInput, SessionClock, SpeechOutput, VideoInput
from rtc_agent.rtc.speech_output import FRAME_SAMPLES, OutputOverflow
from rtc_agent.rtc.video_input import scaled_size
from tests.conftest import tone


class ScriptedTrack(MediaStreamTrack):
    """Yields the given frames as fast as they are asked for, then ends."""

    def __init__(self, kind: str, frames: list) -> None:
        super().__init__()
        self.kind = kind
        self.frames = list(frames)

    async def recv(self):
        if not self.frames:
            self.stop()
            raise MediaStreamError
        await asyncio.sleep(0)
        return self.frames.pop(0)


def stereo_48k_frame(pts: int) -> av.AudioFrame:
    # packed s16 stereo, as aiortc decodes Opus: L R L R ...
    frame = av.AudioFrame.from_ndarray(np.repeat(tone(0.02), 2).reshape(1, -1), format="s16", layout="stereo")
    frame.sample_rate = 48000
    frame.pts = pts
    frame.time_base = fractions.Fraction(1, 48000)
    return frame


async def test_audio_input_resamples_to_16k_mono_and_counts_the_clock():
    clock = SessionClock()
    got: list[tuple[np.ndarray, int]] = []
    track = ScriptedTrack("audio", [stereo_48k_frame(i * 960) for i in range(50)])
    audio = AudioInput(track, clock, lambda pcm, start: got.append((pcm, start)))
    await audio.run()
    samples = sum(p.size for p, _ in got)
    assert all(p.dtype == np.int16 and p.ndim == 1 for p, _ in got)
    assert 15500 <= samples <= 16000  # 1 s at 16 kHz, less the resampler's delay
    assert clock.ms() == audio.received_ms == samples * 1000 // 16000
    starts = [s for _, s in got]
    assert starts == sorted(starts) and starts[0] == 0
    assert audio.frames == 50


async def test_audio_input_survives_a_failing_sink():
    def sink(pcm, start):
        raise RuntimeError("boom")

    audio = AudioInput(ScriptedTrack("audio", [stereo_48k_frame(i * 960) for i in range(5)]), SessionClock(), sink)
    await audio.run()
    assert audio.sink_errors >= 4


def video_frame(width: int, height: int, value: int) -> av.VideoFrame:
    return av.VideoFrame.from_ndarray(np.full((height, width, 3), value, dtype=np.uint8), format="rgb24")


async def test_video_input_drains_and_keeps_only_the_latest_frame():
    track = ScriptedTrack("video", [video_frame(1280, 720, v) for v in range(30)])
    video = VideoInput(track, lambda: 1234, None, fps=1.0, max_edge=512)
    await video.run()
    assert video.frames_received == 30
    sample = video.take_sample()
    assert sample is not None
    image, ts = sample
    assert image.shape == (288, 512, 3) and image.dtype == np.uint8
    assert ts == 1234
    assert abs(int(image[0, 0, 0]) - 29) <= 2  # the latest frame, not the first
    assert video.take_sample() is None  # no new frame since


async def test_video_sampler_hands_frames_at_its_rate():
    class SlowTrack(ScriptedTrack):
        async def recv(self):
            await asyncio.sleep(0.02)
            return await super().recv()

    got = []
    video = VideoInput(SlowTrack("video", [video_frame(64, 48, 9)] * 40), lambda: 0,
                       lambda img, ts: got.append(img.shape), fps=5.0, max_edge=512)
    await asyncio.gather(video.run(), video.sample())
    assert 2 <= len(got) <= 6  # about 0.8 s of frames at 5 fps
    assert got[0] == (48, 64, 3)


def test_scaled_size_keeps_aspect_and_even_sizes():
    assert scaled_size(1920, 1080, 512) == (512, 288)
    assert scaled_size(480, 640, 512) == (384, 512)
    assert scaled_size(320, 240, 512) == (320, 240)
    assert scaled_size(333, 201, 100) == (100, 60)


async def test_speech_output_frames_and_steady_timestamps():
    out = SpeechOutput()
    frames = [await out.recv() for _ in range(5)]
    assert [f.pts for f in frames] == [0, 960, 1920, 2880, 3840]
    assert all(f.samples == FRAME_SAMPLES and f.sample_rate == 48000 for f in frames)
    assert all(not f.to_ndarray().any() for f in frames)  # silence when idle
    out.stop()
    with pytest.raises(MediaStreamError):
        await out.recv()


async def test_speech_output_plays_in_order_and_reports_sent_ms():
    log = []
    out = SpeechOutput(listener=lambda u, what: log.append((u.id, what, u.sent_ms)))
    first = out.play(tone(0.1, sample_rate=16000), 16000, utterance_id="a")
    second = out.play(np.full(4800, 0.5, dtype=np.float32), 48000, utterance_id="b")
    pcm = [out.next_frame_pcm() for _ in range(12)]
    assert await first.done == 100 and await second.done == 100
    assert log == [("a", "started", 0), ("a", "stopped", 100), ("b", "started", 0), ("b", "stopped", 100)]
    assert all(p.any() for p in pcm[1:9])
    assert not pcm[11].any()
    assert not out.busy


async def test_speech_output_clear_stops_within_one_frame():
    out = SpeechOutput()
    utterance = out.play(np.full(48000, 10000, dtype=np.int16), 48000)
    for _ in range(3):
        assert out.next_frame_pcm().all()
    cut = out.clear()
    assert cut == [utterance] and utterance.cleared
    assert not out.next_frame_pcm().any()
    assert await utterance.done == 60
    assert out.queued_ms == 0


async def test_speech_output_streaming_utterance_underruns_with_silence():
    out = SpeechOutput()
    utterance = out.start_utterance(48000)
    utterance.write(np.full(480, 1000, dtype=np.int16))
    frame = out.next_frame_pcm()
    assert frame[:480].all() and not frame[480:].any()
    assert not out.next_frame_pcm().any() and not utterance.done.done()
    utterance.write(np.full(960, 1000, dtype=np.int16))
    utterance.finish()
    assert out.next_frame_pcm().all()
    out.next_frame_pcm()
    assert await utterance.done == 30


async def test_speech_output_queue_is_bounded():
    out = SpeechOutput(max_seconds=0.5)
    out.play(np.zeros(16000 // 4, dtype=np.int16), 16000)
    with pytest.raises(OutputOverflow):
        out.play(np.zeros(16000, dtype=np.int16), 16000)
    assert out.queued_ms == 250


async def test_speech_output_pause_holds_and_resume_continues():
    out = SpeechOutput()
    utterance = out.play(np.full(4800, 5000, dtype=np.int16), 48000)
    assert out.next_frame_pcm().all()
    out.pause()
    assert not out.next_frame_pcm().any() and not out.next_frame_pcm().any()
    assert utterance.sent_ms == 20  # nothing consumed while paused
    out.resume()
    assert out.next_frame_pcm().all()
    assert utterance.sent_ms == 40
