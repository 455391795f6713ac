"""Utterances hard to hear, told by their partials: the real transcriber and the packaged Whisper base, with the
VAD's verdicts scripted on the sentences' spans. Whisper's partials are sure of clean speech and unsure of the same
speech in heavy noise, so the noisy utterances' finals take the larger budget (``hard_finals``) and the clean ones'
do not. Assertions are counts with margins and a WER bound, not exact words or log-probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.bench.common import wer
from tests.scripted_vad import finals_with_scripted_vad
from tests.speech import speech_clip

pytestmark = pytest.mark.real_model  # loads real models: .ci/run runs these under cpu-profile avx2 too

SENTENCES = ["The weather today is sunny with a light breeze from the west.",
             "She walked along the river and watched the boats drift slowly by.",
             "Please remember to bring your umbrella tomorrow morning."]


def noisy(clip: np.ndarray, snr_db: float, seed: int = 7) -> np.ndarray:
    """``clip`` with white noise ``snr_db`` below its speech's level, over the whole clip (the pauses too)."""
    x = clip.astype(np.float64)
    level = float(np.sqrt(np.mean(x[np.abs(x) > 100] ** 2)))
    noise = np.random.default_rng(seed).normal(0.0, level / 10 ** (snr_db / 20), len(x))
    return np.clip(x + noise, -32768, 32767).astype(np.int16)


async def test_utterances_in_heavy_noise_take_the_larger_budget_and_clean_ones_do_not():
    """Natively the clean sentences' partials average -0.3 to -0.6 (the threshold is -0.7) and the same sentences at
    -5 dB SNR -0.85 to -1.2; the counts leave one sentence of margin either way."""
    clip, spans = speech_clip(SENTENCES, gap_s=0.8, sample_rate=16000)
    finals, stats = await finals_with_scripted_vad(clip, spans, TranscriberConfig(language="en"))
    assert stats["hard_finals"] <= 1, (stats, finals)
    assert wer(" ".join(SENTENCES), " ".join(finals)) <= 0.15, finals
    finals, stats = await finals_with_scripted_vad(noisy(clip, -5.0), spans, TranscriberConfig(language="en"))
    assert stats["hard_finals"] >= 2, (stats, finals)
    assert len(finals) >= 2, finals  # still captioned, as well as Whisper hears it
