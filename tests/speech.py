"""Real speech for tests: sentences spoken by the embedded Piper voice (en_US joe medium), cached on disk.

The first synthesis of a text costs ~0.1 s per second of audio (plus ~0.5 s to load the voice once per process);
the result is kept as a 22.05 kHz WAV under :func:`cache_dir` keyed by a hash of the text, speed and voice, so later
runs read it back in about a millisecond and get the very same samples (Piper itself is not deterministic).

- :func:`synthesize`: one text as int16 mono at any sample rate (:func:`synthesize_native`: at the voice's rate).
- :func:`speech_clip`: several sentences with exact silences between them and the (start_s, end_s) of each
  sentence's speech measured by energy, for captions, VAD, interpretation and agent tests.
- :func:`write_wav`, :func:`read_wav`, :func:`resample`, :func:`speech_extent`: the helpers behind them.
- :func:`content_share`: how much of a list of content words a model's text holds, for assertions that must hold
  on every CPU (int8/bf16 kernels differ, so Whisper and the LLM pick other words on other CPUs).

The cache folder is ``$RTC_AGENT_TEST_CACHE`` if set, else ``$XDG_CACHE_HOME/rtc-agent-tests/speech``, else
``~/.cache/rtc-agent-tests/speech``. Deleting it is always safe.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
import wave
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

import av
import numpy as np

from rtc_agent.engines.tts.base import SynthesisRequest, decode_wav, encode_wav
from rtc_agent.engines.tts.piper import PiperEngine, default_voice_paths
from rtc_agent.rtc.resampler import audio_resampler

__all__ = [
    "cache_dir",
    "content_share",
    "read_wav",
    "resample",
    "speech_clip",
    "speech_extent",
    "synthesize",
    "synthesize_native",
    "write_wav",
]

_CACHE_VERSION = 2  # 2: noise-free voice (the same audio on every machine)
_MEMORY_ITEMS = 64
_lock = threading.Lock()
_engine: PiperEngine | None = None
_memory: OrderedDict[str, tuple[np.ndarray, int]] = OrderedDict()


def cache_dir() -> Path:
    """Where synthesized sentences are kept (created on first use)."""
    explicit = os.environ.get("RTC_AGENT_TEST_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rtc-agent-tests" / "speech"


def _voice_id() -> str:
    model, _ = default_voice_paths()
    return f"{model.name}:{model.stat().st_size}"


def _get_engine() -> PiperEngine:
    global _engine
    if _engine is None:
        engine = PiperEngine(warmup=False, volume=0.9, noise=False)  # no random variation between runs
        engine.load()
        _engine = engine
    return _engine


def synthesize_native(text: str, *, speed: float = 1.0) -> tuple[np.ndarray, int]:
    """``(int16 samples, sample_rate)`` of ``text`` at the voice's own rate (22050 Hz), cached; read-only array."""
    return _native(text, speed)


def _native(text: str, speed: float) -> tuple[np.ndarray, int]:
    """The voice's own output for ``text`` (22.05 kHz int16), from memory, the disk cache or Piper."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text to synthesize must be a non-empty string, got {text!r}")
    key_source = json.dumps({"v": _CACHE_VERSION, "voice": _voice_id(), "text": text, "speed": speed},
                            sort_keys=True)
    key = hashlib.sha256(key_source.encode()).hexdigest()
    with _lock:
        if key in _memory:
            _memory.move_to_end(key)
            return _memory[key]
        slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "text"
        path = cache_dir() / f"{slug}-{key[:16]}.wav"
        if path.exists():
            try:
                pcm, rate = decode_wav(path.read_bytes())
            except ValueError:
                pcm = np.zeros(0, dtype=np.int16)
                rate = 0
        else:
            pcm, rate = np.zeros(0, dtype=np.int16), 0
        if pcm.size == 0:
            result = _get_engine().synthesize(SynthesisRequest(text, speed=speed))
            pcm, rate = result.pcm, result.sample_rate
            _atomic_write(path, encode_wav(pcm, rate))
        pcm.setflags(write=False)
        _memory[key] = (pcm, rate)
        while len(_memory) > _MEMORY_ITEMS:
            _memory.popitem(last=False)
        return pcm, rate


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def resample(pcm: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """int16 mono ``pcm`` from ``from_rate`` to ``to_rate`` (libswresample through PyAV, as the server does)."""
    pcm = np.ascontiguousarray(np.asarray(pcm, dtype=np.int16).reshape(-1))
    if from_rate == to_rate or pcm.size == 0:
        return pcm.copy()
    resampler = audio_resampler(to_rate)
    frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = from_rate
    frames = resampler.resample(frame) + resampler.resample(None)
    if not frames:
        return np.zeros(0, dtype=np.int16)
    return np.ascontiguousarray(np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.int16))


def synthesize(text: str, sample_rate: int = 16000, *, speed: float = 1.0) -> np.ndarray:
    """``text`` spoken by the joe voice as int16 mono at ``sample_rate``, including the voice's own short lead-in
    and trailing pause (nothing trimmed). Cached: repeated calls return equal samples."""
    pcm, rate = _native(text, speed)
    return resample(pcm, rate, sample_rate)


def write_wav(path: str | os.PathLike[str], pcm: np.ndarray, rate: int) -> Path:
    """Write int16 (or float [-1, 1]) mono samples as a 16-bit WAV; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_wav(pcm, rate))
    return path


def read_wav(path: str | os.PathLike[str]) -> tuple[np.ndarray, int]:
    """``(int16 mono samples, sample_rate)`` of a WAV file (channels averaged)."""
    data = Path(path).read_bytes()
    try:
        return decode_wav(data)
    except ValueError:
        with wave.open(str(path), "rb") as w:  # let the stdlib name the problem
            w.readframes(1)
        raise


def speech_extent(pcm: np.ndarray, sample_rate: int, *, threshold_db: float = -35.0,
                  frame_s: float = 0.01) -> tuple[int, int]:
    """``(start, end)`` sample indices of the speech in ``pcm``: from the first to the last end of a 10 ms frame
    whose RMS is within ``threshold_db`` of the loudest frame (and above -60 dBFS). ``(0, 0)`` for silence."""
    x = np.asarray(pcm, dtype=np.float64).reshape(-1) / 32768.0
    hop = max(1, round(frame_s * sample_rate))
    n = x.size // hop
    if n == 0:
        return 0, 0
    rms = np.sqrt(np.mean(x[:n * hop].reshape(n, hop) ** 2, axis=1))
    threshold = max(10 ** (-60 / 20), rms.max() * 10 ** (threshold_db / 20))
    active = np.nonzero(rms >= threshold)[0]
    if active.size == 0:
        return 0, 0
    return int(active[0] * hop), int(min(x.size, (active[-1] + 1) * hop))


def speech_clip(sentences: list[str], gap_s: float = 0.8, lead_s: float = 0.5, tail_s: float = 1.0,
                sample_rate: int = 48000, *, speed: float = 1.0) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """The sentences spoken one after the other, as int16 mono at ``sample_rate``, and the ``(start_s, end_s)`` of
    each sentence's speech in the clip.

    Silences are exact and measured between speech, not between padded synthesis outputs: the first sentence's
    speech starts ``lead_s`` into the clip, each next one ``gap_s`` after the previous one's speech ends (as
    measured by :func:`speech_extent`), and the clip ends ``tail_s`` after the last speech. Each sentence keeps
    20 ms of its own fade around the measured extent; the rest of the clip is digital silence.
    """
    if not sentences:
        raise ValueError("speech_clip needs at least one sentence")
    if min(gap_s, lead_s, tail_s) < 0:
        raise ValueError("gap_s, lead_s and tail_s must be >= 0")
    margin = int(0.02 * sample_rate)
    placed: list[tuple[np.ndarray, int]] = []  # (audio piece, clip offset)
    spans: list[tuple[float, float]] = []
    last_end = 0
    cursor = round(lead_s * sample_rate)  # where the next sentence's speech starts
    for sentence in sentences:
        audio = synthesize(sentence, sample_rate, speed=speed)
        start, end = speech_extent(audio, sample_rate)
        if end <= start:
            raise ValueError(f"no speech synthesized for {sentence!r}")
        a = max(0, start - margin, start - cursor)
        b = min(audio.size, end + margin)
        placed.append((audio[a:b], cursor - (start - a)))
        spans.append((cursor / sample_rate, (cursor + end - start) / sample_rate))
        last_end = cursor + end - start
        cursor = last_end + round(gap_s * sample_rate)
    total = last_end + round(tail_s * sample_rate)
    mix = np.zeros(max(total, max(off + p.size for p, off in placed)), dtype=np.int32)
    for piece, offset in placed:
        mix[offset:offset + piece.size] += piece
    clip = np.clip(mix[:total], -32768, 32767).astype(np.int16)
    return clip, spans


def content_share(text: str, words: Iterable[str | Iterable[str]]) -> float:
    """The share of ``words`` found in ``text`` (both normalized as WER is: lower case, no punctuation). An entry
    may be a set of alternatives (``{"school", "schools"}``, ``{"9", "nine"}``): found when any of them is.

    Tests of what a model says assert such a share over several sentences (at least 2 of 3 content words, most of
    20), never one sentence's exact words: the words differ between CPUs' numerical paths."""
    from rtc_agent.bench.common import normalize_text

    heard = set(normalize_text(text).split())
    entries = [{w} if isinstance(w, str) else set(w) for w in words]
    if not entries:
        raise ValueError("content_share needs at least one word")
    found = sum(1 for alternatives in entries if {normalize_text(a) for a in alternatives} & heard)
    return found / len(entries)
