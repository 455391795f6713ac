"""LoudnessOnset: 10 ms of sound above the level, counted across frames; a click alone is not an onset."""

from __future__ import annotations

import numpy as np

from rtc_agent.apps.agent.onset import LoudnessOnset

RATE = 16000
FRAME = 320  # 20 ms


def tone(ms: float, dbfs: float) -> np.ndarray:
    n = int(RATE * ms / 1000)
    return (np.sqrt(2) * 10 ** (dbfs / 20) * np.sin(2 * np.pi * 440 * np.arange(n) / RATE)).astype(np.float32)


def frames(audio: np.ndarray) -> list[np.ndarray]:
    return [audio[i:i + FRAME] for i in range(0, len(audio), FRAME)]


def test_quiet_audio_and_a_click_are_not_onsets() -> None:
    onset = LoudnessOnset()
    quiet = tone(200, -45)
    assert not any(onset.feed(f) for f in frames(quiet))
    click = np.concatenate([tone(15, -60), tone(5, -10), tone(40, -60)])  # one loud 5 ms block
    assert not any(onset.feed(f) for f in frames(click))


def test_a_word_starting_late_in_a_frame_is_caught_in_the_next_and_reported_once() -> None:
    onset = LoudnessOnset()
    audio = np.concatenate([tone(15, -60), tone(300, -30), tone(100, -60), tone(100, -25)])
    hits = [i for i, f in enumerate(frames(audio)) if onset.feed(f)]
    # sound from 15 ms: its second loud block ends at 25 ms, in frame 1; the second word starts at 415 ms and
    # its second block ends at 425 ms, in frame 21
    assert hits == [1, 21]


def test_odd_frame_sizes_keep_their_remainder() -> None:
    onset = LoudnessOnset()
    audio = np.concatenate([tone(3, -20), tone(3, -20), tone(4, -20)])  # 10 ms in three pieces
    assert [onset.feed(part) for part in (audio[:48], audio[48:96], audio[96:])] == [False, False, True]
