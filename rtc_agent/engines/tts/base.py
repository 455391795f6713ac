"""The text-to-speech engine contract: requests, results, errors and the audio helpers both backends share.

A TTS engine is a worker :class:`~rtc_agent.worker.Engine` whose ``run_batch`` takes :class:`SynthesisRequest`
objects and returns one :class:`Synthesis` (or an ``Exception`` instance for a request that failed) per request,
in order.

Streaming: the unit of synthesis is one clause. An app that speaks a growing text (the agent's LLM answer, a
stream of translations) splits it with :class:`~rtc_agent.engines.tts.text.ClauseSplitter` and sends one request
per clause, so the first clause is spoken while the rest is still being generated, other sessions' clauses
interleave fairly in the worker queue, and barge-in cancels the clauses not yet synthesized (a running clause is
short). :class:`~rtc_agent.engines.tts.stream.SpeechSynthesizer` does exactly that on top of the worker.

Errors are :class:`~rtc_agent.errors.EngineError` instances with stable codes (the worker keeps them):
``empty_text`` and ``text_too_long`` (400, the request's fault), ``unknown_voice`` (400), ``unsupported_language``
(400: the engine has no voice of the request's language), and for the remote engine
``tts_unreachable``, ``engine_timeout``, ``tts_unauthorized``, ``tts_not_found``, ``tts_bad_request``, ``tts_busy``
(503 with ``retry_after``), ``tts_server_error``, ``tts_bad_audio``.
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
import struct
import wave
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from rtc_agent.errors import EngineError
from rtc_agent.worker.engine import run_each

__all__ = [
    "MAX_SPEED",
    "MAX_TEXT_CHARS",
    "MIN_SPEED",
    "OneAtATime",
    "Synthesis",
    "SynthesisRequest",
    "TTSEngine",
    "check_language",
    "check_text",
    "decode_wav",
    "effective_speed",
    "encode_wav",
    "language_code",
    "to_mono_int16",
    "unsupported_language",
]

MIN_SPEED = 0.25
MAX_SPEED = 4.0
MAX_TEXT_CHARS = 2000  # per request; callers speak long texts clause by clause
_LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})?")


@dataclass(frozen=True, slots=True)
class SynthesisRequest:
    """One piece of text to speak.

    - ``text``: what to say, already speakable (see :func:`~rtc_agent.engines.tts.text.speakable`); engines reject
      text with nothing to say (``empty_text``) or longer than their limit (``text_too_long``).
    - ``speed``: 1.0 is the voice's natural rate, 1.25 is 25% faster (shorter audio); ``MIN_SPEED``..``MAX_SPEED``
      (the OpenAI range). Interpretation raises it to catch up when its speech lags.
    - ``voice``: a voice name for engines that have several; ``None`` is the engine's configured voice (for a
      ``language``: the engine's voice of that language).
    - ``language``: the ISO 639-1 code of the text (``es``; a region such as ``es-MX`` is allowed); ``None`` is the
      engine's own language. An engine that does not speak the language fails the request with
      ``unsupported_language`` (400) rather than read it with a voice of another language; pick the engine with
      :func:`rtc_agent.engines.tts.voice_for`.

    Raises ``ValueError`` on a non-string text, a speed outside the range or a malformed language code.
    """

    text: str
    speed: float = 1.0
    voice: str | None = None
    language: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ValueError(f"SynthesisRequest.text must be a str, got {type(self.text).__name__}")
        if (isinstance(self.speed, bool) or not isinstance(self.speed, int | float) or not math.isfinite(self.speed)
                or not MIN_SPEED <= self.speed <= MAX_SPEED):
            raise ValueError(f"SynthesisRequest.speed must be a number in [{MIN_SPEED}, {MAX_SPEED}], "
                             f"got {self.speed!r}")
        if self.voice is not None and not isinstance(self.voice, str):
            raise ValueError(f"SynthesisRequest.voice must be a str or None, got {type(self.voice).__name__}")
        if self.language is not None and (not isinstance(self.language, str)
                                          or not _LANGUAGE_CODE.fullmatch(self.language)):
            raise ValueError(f"SynthesisRequest.language must be an ISO 639-1 code such as 'es' or 'pt-BR', or None, "
                             f"got {self.language!r}")


@dataclass(frozen=True, slots=True, eq=False)
class Synthesis:
    """The speech for one request.

    - ``pcm``: int16 mono samples (1-D, C-contiguous) at ``sample_rate``. Nothing is trimmed: it keeps the voice's
      own short lead-in and trailing pause (Piper: about 40 ms and 0.25 s per sentence), so consecutive clauses
      played back to back sound like one paced answer (:meth:`trimmed` shortens them). Write it to
      ``SpeechOutput.start_utterance(sample_rate)``; the track resamples to 48 kHz.
    - ``text``, ``voice``, ``speed``: what was spoken, by which voice, at which speed.
    - ``compute_s``: wall time the engine spent on this request (synthesis or the HTTP round trip).
    """

    pcm: np.ndarray
    sample_rate: int
    text: str
    voice: str
    speed: float = 1.0
    compute_s: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)

    def trimmed(self, *, lead_ms: float | None = None, tail_ms: float | None = None,
                level_dbfs: float = -50.0) -> Synthesis:
        """A copy with the silence before the first (after the last) sample louder than ``level_dbfs`` cut to at
        most ``lead_ms`` (``tail_ms``); ``None`` keeps that end as it is. All-quiet audio is returned unchanged."""
        pcm = self.pcm
        loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 32768 * 10 ** (level_dbfs / 20))
        if not len(loud):
            return self
        start, stop = 0, len(pcm)
        if lead_ms is not None:
            start = max(0, int(loud[0]) - int(self.sample_rate * lead_ms / 1000))
        if tail_ms is not None:
            stop = min(len(pcm), int(loud[-1]) + 1 + int(self.sample_rate * tail_ms / 1000))
        if (start, stop) == (0, len(pcm)):
            return self
        return dataclasses.replace(self, pcm=np.ascontiguousarray(pcm[start:stop]))

    @property
    def duration_s(self) -> float:
        """Length of the audio in seconds."""
        return self.pcm.size / self.sample_rate if self.sample_rate else 0.0

    @property
    def rtf(self) -> float:
        """Real-time factor: compute time / audio duration (below 1 is faster than real time)."""
        return self.compute_s / self.duration_s if self.duration_s else 0.0

    def float32(self) -> np.ndarray:
        """The samples as float32 in [-1, 1)."""
        return self.pcm.astype(np.float32) / 32768.0


@runtime_checkable
class TTSEngine(Protocol):
    """What both TTS backends implement (the worker ``Engine`` contract, typed for speech).

    ``voice`` is the default voice name; ``sample_rate`` the rate of its output (0 until known: the remote engine
    learns it from the first response). ``run_batch`` returns one ``Synthesis`` or ``Exception`` per request.
    """

    voice: str

    @property
    def sample_rate(self) -> int: ...

    def load(self, progress: Callable[[str], None]) -> None: ...

    def run_batch(self, requests: list[SynthesisRequest]) -> list[Synthesis | Exception]: ...

    def close(self) -> None: ...


class OneAtATime:
    """``synthesize`` and ``run_batch`` for an embedded engine that speaks one request at a time: a subclass sets
    ``loaded`` (True after ``load``) and implements ``_synthesize(request)``.

    ``checkpoint`` runs before each request of a batch: the worker replaces it with its priority hook when the
    engine is registered with ``yields_to`` (its clauses step aside while a translation decodes).
    """

    def checkpoint(self) -> float:
        """Wait for the engines this one yields to (none unless the worker set a hook); the seconds waited."""
        return 0.0

    @property
    def loaded(self) -> bool:
        raise NotImplementedError

    def _synthesize(self, request: SynthesisRequest) -> Synthesis:
        raise NotImplementedError

    def _require_loaded(self) -> None:
        if not self.loaded:
            raise RuntimeError(f"{type(self).__name__}.load() has not been called")

    def synthesize(self, request: SynthesisRequest) -> Synthesis:
        """Synthesize one request (blocking). ``EngineError`` for a bad request, ``RuntimeError`` before ``load``."""
        self._require_loaded()
        return self._synthesize(request)

    def run_batch(self, requests: list[SynthesisRequest]) -> list[Synthesis | Exception]:
        """One ``Synthesis`` or ``Exception`` per request, in order (run one after the other)."""
        self._require_loaded()

        def one(request: SynthesisRequest) -> Synthesis:
            self.checkpoint()
            return self._synthesize(request)

        return run_each(requests, one, kind=SynthesisRequest)


def check_text(text: str, max_chars: int = MAX_TEXT_CHARS) -> str:
    """``text`` stripped, or ``EngineError`` ``empty_text`` (nothing a voice can say: empty, whitespace, only
    punctuation/symbols) / ``text_too_long`` (more than ``max_chars`` characters), both with status 400."""
    stripped = text.strip()
    if not any(ch.isalnum() for ch in stripped):
        shown = repr(stripped[:40]) if stripped else "empty text"
        raise EngineError(f"nothing to synthesize: {shown} has no letters or digits", code="empty_text", status=400)
    if len(stripped) > max_chars:
        raise EngineError(
            f"text too long to synthesize in one request: {len(stripped)} characters (limit {max_chars}); "
            "split it into clauses (rtc_agent.engines.tts.text.ClauseSplitter)", code="text_too_long", status=400,
        )
    return stripped


def language_code(language: str) -> str:
    """The ISO 639-1 part of a language tag: ``es``, ``ES``, ``es-MX`` and ``es_mx`` all give ``es``."""
    return language.strip().lower().replace("_", "-").split("-")[0]


def unsupported_language(engine: str, language: str | None, spoken: Collection[str]) -> EngineError:
    """The error of a request in a language ``engine`` has no voice for (``unsupported_language``, 400)."""
    said = f"language {language!r}" if language else "a request without a language"
    return EngineError(f"the {engine} engine has no voice for {said} (it speaks {', '.join(spoken) or 'none'}); "
                       "pick the engine with rtc_agent.engines.tts.voice_for", code="unsupported_language",
                       status=400)


def check_language(engine: str, language: str | None, spoken: Collection[str]) -> str | None:
    """``language_code(language)`` when ``spoken`` holds it, ``None`` for a request without a language; else
    :func:`unsupported_language`."""
    if language is None:
        return None
    code = language_code(language)
    if code not in spoken:
        raise unsupported_language(engine, language, spoken)
    return code


def effective_speed(base: float, requested: float) -> float:
    """An engine's base speed times a request's speed, clamped to ``MIN_SPEED``..``MAX_SPEED``."""
    return round(min(MAX_SPEED, max(MIN_SPEED, base * requested)), 4)


# audio helpers ----------------------------------------------------------------------------------------------------


def to_mono_int16(samples: np.ndarray) -> np.ndarray:
    """int16 mono, C-contiguous: float input is taken as [-1, 1] and clipped; (n, channels) is averaged."""
    a = np.asarray(samples)
    if a.ndim not in (1, 2):
        raise ValueError(f"expected 1-D or (frames, channels) samples, got shape {a.shape}")
    if a.dtype.kind == "f":
        f = a.astype(np.float64)
        if f.ndim == 2:
            f = f.mean(axis=1)
        return np.ascontiguousarray(np.round(np.clip(f, -1.0, 1.0) * 32767.0).astype(np.int16))
    if a.dtype != np.int16:
        raise ValueError(f"expected int16 or float samples, got {a.dtype}")
    if a.ndim == 2:
        a = np.round(a.astype(np.float64).mean(axis=1)).astype(np.int16)
    return np.ascontiguousarray(a)


def encode_wav(pcm: np.ndarray, sample_rate: int) -> bytes:
    """A 16-bit mono WAV file holding ``pcm`` (int16 or float [-1, 1])."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(to_mono_int16(pcm).astype("<i2").tobytes())
    return buf.getvalue()


_WAVE_FORMAT_PCM = 1
_WAVE_FORMAT_FLOAT = 3
_WAVE_FORMAT_EXTENSIBLE = 0xFFFE


def decode_wav(data: bytes) -> tuple[np.ndarray, int]:
    """``(int16 mono samples, sample_rate)`` of a RIFF/WAVE file.

    Accepts 16-bit, 24-bit and 32-bit integer PCM, 32/64-bit float and WAVE_FORMAT_EXTENSIBLE; several channels are
    averaged. Tolerates what streaming servers write: a RIFF or data size of 0 or 0xFFFFFFFF (the data runs to the
    end) and a truncated last frame. Raises ``ValueError`` naming what is wrong otherwise.
    """
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError(f"not a WAV file (starts with {data[:12]!r})")
    pos = 12
    fmt: tuple[int, int, int, int] | None = None
    while pos + 8 <= len(data):
        chunk_id = data[pos:pos + 4]
        (size,) = struct.unpack("<I", data[pos + 4:pos + 8])
        body = pos + 8
        if chunk_id == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise ValueError("WAV fmt chunk is too short")
            tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", data[body:body + 16])
            if tag == _WAVE_FORMAT_EXTENSIBLE and size >= 40 and body + 26 <= len(data):
                (tag,) = struct.unpack("<H", data[body + 24:body + 26])  # the sub-format GUID's first two bytes
            fmt = (tag, channels, rate, bits)
        elif chunk_id == b"data":
            if fmt is None:
                raise ValueError("WAV data chunk before the fmt chunk")
            end = len(data) if size in (0, 0xFFFFFFFF) or body + size > len(data) else body + size
            return _wav_samples(data[body:end], *fmt)
        pos = body + size + (size & 1)
    raise ValueError("WAV file has no data chunk" if fmt else "WAV file has no fmt chunk")


def _wav_samples(raw: bytes, tag: int, channels: int, rate: int, bits: int) -> tuple[np.ndarray, int]:
    if channels < 1 or rate < 1:
        raise ValueError(f"WAV header is invalid: {channels} channels at {rate} Hz")
    width = bits // 8
    frame = width * channels
    if frame == 0:
        raise ValueError(f"WAV sample width of {bits} bits is not supported")
    raw = raw[:len(raw) - len(raw) % frame]
    if tag == _WAVE_FORMAT_PCM and bits == 16:  # the common case: exact, no float round trip
        ints = np.frombuffer(raw, dtype="<i2").astype(np.int16)
        return to_mono_int16(ints.reshape(-1, channels) if channels > 1 else ints), rate
    if tag == _WAVE_FORMAT_PCM and bits == 24:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        ints = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        ints = np.where(ints >= 1 << 23, ints - (1 << 24), ints)
        samples = ints.astype(np.float64) / float(1 << 23)
    elif tag == _WAVE_FORMAT_PCM and bits == 32:
        samples = np.frombuffer(raw, dtype="<i4").astype(np.float64) / float(1 << 31)
    elif tag == _WAVE_FORMAT_PCM and bits == 8:
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.float64) - 128.0) / 128.0
    elif tag == _WAVE_FORMAT_FLOAT and bits in (32, 64):
        samples = np.frombuffer(raw, dtype="<f4" if bits == 32 else "<f8").astype(np.float64)
    else:
        raise ValueError(f"WAV format {tag} with {bits}-bit samples is not supported (PCM 8/16/24/32 or float)")
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    return to_mono_int16(samples), rate
