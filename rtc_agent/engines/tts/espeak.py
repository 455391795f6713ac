"""The espeak-ng voice: formant speech from the espeak-ng program (the Debian package ``espeak-ng``, which the
multilingual Kokoro voice already reads its phonemes with).

It sounds robotic, but it costs almost nothing (a 4 s Spanish sentence in about 20 ms of one core, against about
2.5 s for Kokoro on the 2-core development machine), so it is the catch-up voice of interpretation: a text whose
neural voice fell too far behind is spoken by it instead of being skipped
(:class:`~rtc_agent.apps.interpret.speech.TranslationSpeaker` ``fallback``). Worker engine ``"tts-espeak"``.

Each request runs ``espeak-ng --stdout -v <voice> -s <words per minute>`` with the text on stdin (never on the
command line) and reads the WAV it writes. Languages: those of :data:`VOICES`; another fails with
``unsupported_language`` (400).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable

from rtc_agent.engines.assets import MissingAsset
from rtc_agent.engines.tts.base import (
    MAX_TEXT_CHARS,
    OneAtATime,
    Synthesis,
    SynthesisRequest,
    check_language,
    check_text,
    decode_wav,
    effective_speed,
)
from rtc_agent.errors import EngineError

__all__ = ["ENGINE_NAME", "VOICES", "EspeakEngine"]

ENGINE_NAME = "tts-espeak"
#: ISO 639-1 language -> espeak-ng voice
VOICES: dict[str, str] = {"en": "en-us", "es": "es", "fr": "fr-fr", "de": "de", "it": "it", "pt": "pt-br",
                          "nl": "nl", "pl": "pl", "ru": "ru", "hi": "hi", "ja": "ja", "zh": "cmn"}
#: espeak-ng's words per minute at speed 1.0 (its default)
BASE_WPM = 175
#: the rate of espeak-ng's WAV output
SAMPLE_RATE = 22050


class EspeakEngine(OneAtATime):
    """Speech from espeak-ng (see the module docstring). ``executable``: the program (found on ``PATH``);
    ``timeout_s``: the most one run may take; ``speed``: the base rate (1.0 = 175 words per minute)."""

    def __init__(self, *, executable: str = "espeak-ng", timeout_s: float = 10.0, speed: float = 1.0,
                 max_chars: int = MAX_TEXT_CHARS) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.executable = executable
        self.timeout_s = timeout_s
        self.speed = speed
        self.max_chars = max_chars
        self.voice = VOICES["en"]
        self._path: str | None = None

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE

    @property
    def loaded(self) -> bool:
        return self._path is not None

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(VOICES)

    def load(self, progress: Callable[[str], None] = lambda _msg: None) -> None:
        """Find the program; ``MissingAsset`` naming the Debian package when it is not installed."""
        path = shutil.which(self.executable)
        if path is None:
            raise MissingAsset(f"the espeak-ng voice needs the espeak-ng program ({self.executable!r} is not on PATH): "
                               "apt install espeak-ng")
        self._path = path
        progress(f"espeak-ng at {path}")

    def _synthesize(self, request: SynthesisRequest) -> Synthesis:
        text = check_text(request.text, self.max_chars)
        language = check_language(ENGINE_NAME, request.language or "en", VOICES) or "en"
        voice = request.voice or VOICES[language]
        speed = effective_speed(self.speed, request.speed)
        assert self._path is not None
        start = time.perf_counter()
        try:
            done = subprocess.run([self._path, "--stdout", "-v", voice, "-s", str(round(BASE_WPM * speed))],
                                  input=text.encode(), capture_output=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise EngineError(f"espeak-ng took more than {self.timeout_s:g} s", code="engine_timeout") from None
        if done.returncode != 0 or not done.stdout:
            why = done.stderr.decode(errors="replace").strip()[:200] or f"exit status {done.returncode}"
            raise EngineError(f"espeak-ng failed for voice {voice!r}: {why}", code="engine_error")
        try:
            pcm, rate = decode_wav(done.stdout)
        except ValueError as exc:
            raise EngineError(f"espeak-ng wrote no readable WAV: {exc}", code="engine_error") from None
        return Synthesis(pcm=pcm, sample_rate=rate, text=text, voice=voice, speed=speed,
                         compute_s=time.perf_counter() - start, extra={"language": language})

    def close(self) -> None:
        """Nothing to release (one process per request)."""
