"""Foreign-language test speech from espeak-ng (``/usr/bin/espeak-ng``), cached on disk like :mod:`tests.speech`.

:func:`espeak_clip` speaks sentences in an espeak-ng voice (``es``, ``de``, ...) with exact pauses between them and
returns 16 kHz int16 samples; the WAV is kept under ``tests.speech.cache_dir() / "espeak"`` keyed by a hash of
the sentences and options, so later runs read it back. :func:`have_espeak` tells whether the tool is installed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from rtc_agent.rtc.sources import load_audio
from tests.speech import cache_dir, read_wav, write_wav

__all__ = ["espeak_clip", "have_espeak"]

SAMPLE_RATE = 16000


def have_espeak() -> bool:
    return shutil.which("espeak-ng") is not None


def espeak_clip(sentences: list[str], voice: str, *, gap_s: float = 0.8, lead_s: float = 0.5, tail_s: float = 1.0,
                speed: int = 150) -> np.ndarray:
    """The sentences spoken by espeak-ng voice ``voice`` at ``speed`` words per minute, ``gap_s`` apart, as 16 kHz
    int16 mono (``lead_s`` of silence before, ``tail_s`` after)."""
    key = hashlib.sha256(json.dumps([sentences, voice, gap_s, lead_s, tail_s, speed]).encode()).hexdigest()[:20]
    path = cache_dir() / "espeak" / f"{voice}-{key}.wav"
    if path.exists():
        pcm, rate = read_wav(path)
        if rate == SAMPLE_RATE and pcm.size:
            return pcm
    parts = [np.zeros(int(lead_s * SAMPLE_RATE), dtype=np.int16)]
    with tempfile.TemporaryDirectory() as tmp:
        for i, sentence in enumerate(sentences):
            wav = Path(tmp) / f"{i}.wav"
            subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(wav), sentence], check=True,
                           capture_output=True, timeout=30)
            parts.append(load_audio(wav, SAMPLE_RATE))
            pause = gap_s if i < len(sentences) - 1 else tail_s
            parts.append(np.zeros(int(pause * SAMPLE_RATE), dtype=np.int16))
    pcm = np.concatenate(parts)
    write_wav(path, pcm, SAMPLE_RATE)
    return pcm
