"""The speech set's synthesized voices: six espeak-ng accents (Debian ``espeak-ng``), each at its own speed."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ESPEAK_VOICES = [("en-us", 165), ("en-gb", 150), ("en-gb-x-rp", 160), ("en-gb-scotland", 150), ("en-029", 155),
                 ("en-us-nyc", 170)]
SENTENCES_PER_VOICE = 7


def require_espeak() -> None:
    if not shutil.which("espeak-ng"):
        raise SystemExit("the speech set needs espeak-ng (apt-get install espeak-ng)")


def synthesize(text: str, voice: str, speed: int, rate: int) -> np.ndarray:
    """``text`` spoken by espeak-ng's ``voice`` at ``speed`` words a minute, as int16 samples at ``rate``."""
    from rtc_agent.rtc.sources import load_audio

    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "s.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(wav), text], check=True,
                       capture_output=True, timeout=60)
        return load_audio(wav, rate)
