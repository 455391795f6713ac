"""Utterances hard to hear, told by their partials: the real transcriber and the packaged Whisper base, with the
VAD's verdicts scripted on the sentences' spans. Whisper's partials are sure of clean speech and unsure of the same
speech in heavy noise, so the noisy utterances' finals take the larger budget (``hard_finals``) and the clean ones'
do not. Assertions are counts with margins and a WER bound, not exact words or log-probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.bench.common import wer
from rtc_agent.bench.speech_set import add_noise
from tests.scripted_vad import finals_with_scripted_vad
from tests.speech import speech_clip

pytestmark = pytest.mark.real_model  # loads real models: .ci/run runs these under cpu-profile avx2 too

SENTENCES = ["The weather today is sunny with a light breeze from the west.",
             "She walked along the river and watched the boats drift slowly by.",
             "Please remember to bring your umbrella tomorrow morning."]


def noisy(clip: np.ndarray, spans: list[tuple[float, float]], snr_db: float) -> np.ndarray:
    """``clip`` (16 kHz) with the speech set's room noise ``snr_db`` below the level of its speech in ``spans``."""
    return add_noise(clip, snr_db, [{"start_s": a, "end_s": b} for a, b in spans], seed=7)


async def test_utterances_in_heavy_noise_take_the_larger_budget_and_clean_ones_do_not():
    """Natively the clean sentences' partials average -0.3 to -0.6 (the threshold is -0.7) and the same sentences at
    -5 dB SNR (the speech set's room noise) -1.07 to -1.22; the counts leave one sentence of margin either way."""
    clip, spans = speech_clip(SENTENCES, gap_s=0.8, sample_rate=16000)
    finals, stats = await finals_with_scripted_vad(clip, spans, TranscriberConfig(language="en"))
    assert stats["hard_finals"] <= 1, (stats, finals)
    assert wer(" ".join(SENTENCES), " ".join(finals)) <= 0.15, finals
    finals, stats = await finals_with_scripted_vad(noisy(clip, spans, -5.0), spans, TranscriberConfig(language="en"))
    assert stats["hard_finals"] >= 2, (stats, finals)
    assert len(finals) >= 2, finals  # still captioned, as well as Whisper hears it
