"""Speech the VAD missed, heard by the next final: the real transcriber and the packaged Whisper base, with the
VAD's verdicts scripted (the middle of three sentences is never taken for speech, as a quiet or muffled voice the
real VAD does not hear). The final of the third sentence also hears the earlier speech, the middle sentence in the
pause before it included; its words go with that final when the pause's audio is voiced, and nothing is added when
the pause is silent. Assertions are content-word shares and WER bounds, not exact words."""

from __future__ import annotations

import numpy as np
import pytest

from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.bench.common import normalize_text, wer
from tests.scripted_vad import finals_with_scripted_vad
from tests.speech import content_share, speech_clip

pytestmark = pytest.mark.real_model  # loads real models: .ci/run runs these under cpu-profile avx2 too

HEARD = "The weather today is sunny with a light breeze from the west."
MISSED = "She walked along the river and watched the boats drift slowly by."
LAST = "Please remember to bring your umbrella tomorrow morning."
MISSED_WORDS = ["walked", "river", "watched", "boats", "drift", "slowly"]


async def captions(clip: np.ndarray, speech: list[tuple[float, float]]) -> list[str]:
    """The final captions of ``clip`` (16 kHz int16) when the VAD hears speech only within ``speech`` (seconds).
    The final budget is generous so the last final hears all the earlier speech on any CPU."""
    config = TranscriberConfig(language="en", context_s=16.0, final_budget_ms=10_000)
    return (await finals_with_scripted_vad(clip, speech, config))[0]


async def test_the_next_final_carries_speech_the_vad_missed():
    clip, spans = speech_clip([HEARD, MISSED, LAST], gap_s=0.8, sample_rate=16000)
    finals = await captions(clip, [spans[0], spans[2]])
    text = " ".join(finals)
    assert content_share(text, MISSED_WORDS) >= 0.5, finals
    assert wer(" ".join([HEARD, MISSED, LAST]), text) <= 0.25, finals  # nothing said twice
    assert content_share(finals[0], ["weather", "sunny", "breeze", "west"]) >= 0.5, finals


async def test_a_silent_pause_adds_nothing():
    clip, spans = speech_clip([HEARD, MISSED, LAST], gap_s=0.8, sample_rate=16000)
    quiet = clip.copy()
    a, b = (round(t * 16000) for t in spans[1])
    quiet[a - 320:b + 320] = 0  # the middle sentence is silence, as long as it was
    finals = await captions(quiet, [spans[0], spans[2]])
    text = " ".join(finals)
    assert content_share(text, MISSED_WORDS) == 0, finals
    assert len(normalize_text(text).split()) <= len(normalize_text(f"{HEARD} {LAST}").split()) + 2, finals
    assert wer(f"{HEARD} {LAST}", text) <= 0.2, finals


async def test_speech_the_vad_missed_before_any_final_goes_with_the_first():
    clip, spans = speech_clip([MISSED, LAST], gap_s=0.8, sample_rate=16000)
    finals = await captions(clip, [spans[1]])  # a turn whose first sentence is too quiet for the VAD
    text = " ".join(finals)
    assert content_share(text, MISSED_WORDS) >= 0.5, finals
    assert wer(f"{MISSED} {LAST}", text) <= 0.25, finals
