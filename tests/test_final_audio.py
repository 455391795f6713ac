"""What a final decode hears (``final_audio``): the earlier finals that fit the budget, else the pause before the
utterance when enough of it is voiced (speech the VAD missed), else the utterance alone. Synthetic audio: hiss at
-60 dBFS with tones where someone speaks."""

from __future__ import annotations

import numpy as np

from rtc_agent.apps.audio_ring import AudioRing
from rtc_agent.apps.captions.earlier_finals import EarlierFinals, FinalCaption
from rtc_agent.apps.captions.final_audio import final_audio
from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.apps.captions.utterance_audio import UtteranceAudio

RATE = 16000


def session(seconds: float, voiced: list[tuple[float, float]]) -> np.ndarray:
    """``seconds`` of hiss with a tone in each (start_s, end_s) span."""
    rng = np.random.default_rng(1)
    audio = (0.001 * rng.standard_normal(int(seconds * RATE))).astype(np.float32)
    for start, end in voiced:
        a, b = int(start * RATE), int(end * RATE)
        audio[a:b] += (0.1 * np.sin(np.arange(b - a) * 0.1)).astype(np.float32)
    return audio


def heard(audio: np.ndarray, utterance: tuple[float, float], finals: list[tuple[float, float]] = (),
          *, rate: float | None = None):
    """The final decode's audio for the utterance (start_s, end_s) of ``audio``, after ``finals`` (start_s, end_s)
    with recent final decodes at ``rate`` wall seconds per second of audio (None: none yet)."""
    config = TranscriberConfig(language="en")
    recent = AudioRing(30.0)
    recent.push(audio, 0)
    earlier = EarlierFinals(context_s=config.context_s, budget_ms=config.final_budget_ms,
                            preroll_ms=config.preroll_ms, max_finals=8)
    for i, (start, end) in enumerate(finals):
        earlier.add(FinalCaption(f"seg_{i}", f"final {i}", int(start * 1000), int(end * 1000), "en"))
    if rate is not None:
        earlier.decoded(rate, 1.0)
    start_ms, end_ms = int(utterance[0] * 1000), int(utterance[1] * 1000)
    buffer = UtteranceAudio()
    buffer.reset(recent.slice(start_ms, end_ms), start_ms)
    return final_audio(buffer, recent, earlier, config, end_ms, "en", 0)


def test_a_voiced_pause_is_heard_when_no_earlier_final_is():
    audio = session(10.0, [(3.0, 4.5), (6.0, 8.0)])  # missed speech at 3-4.5 s, the utterance at 6-8 s
    decode = heard(audio, (6.0, 8.0))
    assert decode.context_ms == 6000  # the pause from the session's start
    assert decode.context_text == "" and decode.context_speech_ms == 0  # all of it is pause
    assert np.array_equal(decode.audio, audio[:8 * RATE])


def test_a_pause_of_hiss_short_sounds_or_clicks_adds_nothing():
    assert heard(session(10.0, [(6.0, 8.0)]), (6.0, 8.0)).context_ms == 0
    assert heard(session(10.0, [(3.0, 3.2), (6.0, 8.0)]), (6.0, 8.0)).context_ms == 0  # 0.2 s voiced
    typing = [(1.0 + 0.1 * i, 1.04 + 0.1 * i) for i in range(30)]  # 30 key presses of 40 ms: 1.2 s voiced
    assert heard(session(10.0, [*typing, (6.0, 8.0)]), (6.0, 8.0)).context_ms == 0


def test_the_pause_starts_after_the_last_final_and_within_the_budget():
    audio = session(20.0, [(1.0, 3.0), (4.0, 5.0), (9.0, 10.0), (12.0, 16.0)])
    # the final of 1-3 s is older than the budget allows (0.45 s at 0.05 s per second of audio: 9 s, the
    # utterance included), so it is not heard; the pause from 7 s on is, with the missed speech at 9-10 s
    decode = heard(audio, (12.0, 16.0), [(1.0, 3.0)], rate=0.05)
    assert decode.context_ms == 12000 - 7000 and decode.context_text == ""
    # the missed speech at 4-5 s lies after the final but before the budget's start: not heard
    assert heard(session(20.0, [(1.0, 3.0), (4.0, 5.0), (12.0, 16.0)]), (12.0, 16.0), [(1.0, 3.0)],
                 rate=0.05).context_ms == 0
    # nor, with a budget that reaches back, speech within 0.5 s of the last final's end (its decode heard that)
    assert heard(session(20.0, [(1.0, 3.0), (3.1, 3.45), (12.0, 16.0)]), (12.0, 16.0), [(1.0, 3.0)],
                 rate=0.03).context_ms == 0


def test_voiced_audio_long_before_the_utterance_is_not_its_missed_start():
    # the session's first final (no speed measured yet: no budget) hears at most 6 s of the pause
    assert heard(session(12.0, [(1.0, 2.0), (9.0, 11.0)]), (9.0, 11.0)).context_ms == 0
    assert heard(session(12.0, [(4.0, 5.0), (9.0, 11.0)]), (9.0, 11.0)).context_ms > 0
    # once the speed is known, the budget decides (0.45 s at 0.03 s per second of audio: 15 s)
    assert heard(session(12.0, [(1.0, 2.0), (9.0, 11.0)]), (9.0, 11.0), rate=0.03).context_ms > 0


def test_an_earlier_final_that_fits_is_heard_with_its_text_as_before():
    audio = session(10.0, [(1.0, 3.0), (6.0, 8.0)])
    decode = heard(audio, (6.0, 8.0), [(1.0, 3.0)], rate=0.05)
    assert decode.context_text == "final 0"
    assert decode.context_ms == 6000 - (1000 - 200)  # from the final's pre-roll
