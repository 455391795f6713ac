"""Audio formats of the OpenAI Realtime API: client audio in to 16 kHz mono, reply audio out.

Formats (GA ``audio.input.format`` / ``audio.output.format``): ``{"type": "audio/pcm", "rate": 24000}`` (PCM16
little-endian mono at 24 kHz), ``{"type": "audio/pcmu"}`` (G.711 mu-law, 8 kHz) and ``{"type": "audio/pcma"}``
(G.711 A-law, 8 kHz). G.711 is coded here with numpy tables (``audioop`` is gone from newer Pythons); rates are
converted with libswresample (``av.AudioResampler``), keeping its state across chunks so a stream of small
``input_audio_buffer.append`` chunks resamples as one signal.
"""

from __future__ import annotations

import base64
import binascii

import av
import numpy as np

from rtc_agent.rtc.resampler import audio_resampler

__all__ = ["FORMAT_RATES", "MODEL_RATE", "InputDecoder", "OutputEncoder", "Resampler", "alaw_decode",
           "alaw_encode", "decode_base64", "ulaw_decode", "ulaw_encode"]

MODEL_RATE = 16000  # what the apps take
FORMAT_RATES = {"audio/pcm": 24000, "audio/pcmu": 8000, "audio/pcma": 8000}


def _ulaw_table() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent, mantissa = (u >> 4) & 0x07, u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(u & 0x80, -magnitude, magnitude).astype(np.int16)


def _alaw_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    segment, value = (a & 0x70) >> 4, (a & 0x0F) << 4
    value = np.where(segment == 0, value + 8, value + 0x108)
    value = np.where(segment > 1, value << np.maximum(segment - 1, 0), value)
    return np.where(a & 0x80, value, -value).astype(np.int16)


_ULAW_DECODE = _ulaw_table()
_ALAW_DECODE = _alaw_table()


def _ulaw_encode_all() -> np.ndarray:
    s = np.arange(-32768, 32768, dtype=np.int32)
    sign = np.where(s < 0, 0x80, 0)
    magnitude = np.minimum(np.abs(s), 32635) + 0x84
    exponent = np.floor(np.log2(magnitude >> 7 | 1)).astype(np.int32)  # position of the top bit past 7
    mantissa = (magnitude >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8)


def _alaw_encode_all() -> np.ndarray:
    s = np.arange(-32768, 32768, dtype=np.int32) >> 3  # 13 bits
    mask = np.where(s >= 0, 0xD5, 0x55)
    s = np.where(s >= 0, s, -s - 1)
    ends = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])
    segment = np.searchsorted(ends, s)
    low = np.where(segment < 2, (s >> 1) & 0x0F, (s >> np.maximum(segment, 1)) & 0x0F)
    code = np.where(segment >= 8, 0x7F, (segment << 4) | low)
    return ((code ^ mask) & 0xFF).astype(np.uint8)


_ULAW_ENCODE = _ulaw_encode_all()
_ALAW_ENCODE = _alaw_encode_all()


def ulaw_decode(data: bytes) -> np.ndarray:
    """G.711 mu-law bytes -> int16 samples."""
    return _ULAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def alaw_decode(data: bytes) -> np.ndarray:
    """G.711 A-law bytes -> int16 samples."""
    return _ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def ulaw_encode(pcm: np.ndarray) -> bytes:
    """int16 samples -> G.711 mu-law bytes."""
    return _ULAW_ENCODE[np.asarray(pcm, dtype=np.int16).astype(np.int32) + 32768].tobytes()


def alaw_encode(pcm: np.ndarray) -> bytes:
    """int16 samples -> G.711 A-law bytes."""
    return _ALAW_ENCODE[np.asarray(pcm, dtype=np.int16).astype(np.int32) + 32768].tobytes()


def decode_base64(text: str) -> bytes:
    """Strict base64 (``ValueError`` for anything else: bad characters, bad padding)."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not valid base64: {exc}") from None


class Resampler:
    """int16 mono from ``src`` Hz to ``dst`` Hz, chunk by chunk, keeping the filter state between chunks."""

    def __init__(self, src: int, dst: int) -> None:
        self.src, self.dst = src, dst
        self._av = None if src == dst else audio_resampler(dst)

    def feed(self, pcm: np.ndarray) -> np.ndarray:
        pcm = np.ascontiguousarray(np.asarray(pcm, dtype=np.int16).reshape(-1))
        if self._av is None or pcm.size == 0:
            return pcm.copy()
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.src
        return self._join(self._av.resample(frame))

    def flush(self) -> np.ndarray:
        """The samples still held by the filter (the stream ends; a new one starts fresh)."""
        if self._av is None:
            return np.zeros(0, dtype=np.int16)
        tail = self._join(self._av.resample(None))
        self._av = audio_resampler(self.dst)
        return tail

    @staticmethod
    def _join(frames: list[av.AudioFrame]) -> np.ndarray:
        parts = [f.to_ndarray().reshape(-1) for f in frames]
        return np.concatenate(parts).astype(np.int16) if parts else np.zeros(0, dtype=np.int16)


class InputDecoder:
    """Client audio of one format (``audio/pcm`` 24 kHz, ``audio/pcmu``, ``audio/pcma``) -> 16 kHz int16.

    :meth:`decode` raises ``ValueError`` when the bytes cannot be that format (PCM16 needs an even length).
    An odd trailing byte is never carried over: each append must hold whole samples, as OpenAI requires.
    """

    def __init__(self, kind: str) -> None:
        if kind not in FORMAT_RATES:
            raise ValueError(f"unsupported audio format {kind!r}")
        self.kind = kind
        self.resampler = Resampler(FORMAT_RATES[kind], MODEL_RATE)

    def decode(self, data: bytes) -> np.ndarray:
        if self.kind == "audio/pcm":
            if len(data) % 2:
                raise ValueError(f"audio/pcm is 16-bit samples, but {len(data)} bytes is an odd length")
            pcm = np.frombuffer(data, dtype="<i2").astype(np.int16)
        elif self.kind == "audio/pcmu":
            pcm = ulaw_decode(data)
        else:
            pcm = alaw_decode(data)
        return self.resampler.feed(pcm)


class OutputEncoder:
    """Reply speech (int16 at the voice's rate) -> bytes of one output format, chunk by chunk."""

    def __init__(self, kind: str, src_rate: int) -> None:
        if kind not in FORMAT_RATES:
            raise ValueError(f"unsupported audio format {kind!r}")
        self.kind = kind
        self.src_rate = src_rate
        self.resampler = Resampler(src_rate, FORMAT_RATES[kind])

    def encode(self, pcm: np.ndarray) -> bytes:
        return self._pack(self.resampler.feed(self._int16(pcm)))

    def flush(self) -> bytes:
        return self._pack(self.resampler.flush())

    @staticmethod
    def _int16(pcm: np.ndarray) -> np.ndarray:
        pcm = np.asarray(pcm).reshape(-1)
        if pcm.dtype == np.int16:
            return pcm
        return (np.clip(pcm.astype(np.float32), -1.0, 1.0) * 32767.0).astype(np.int16)

    def _pack(self, pcm: np.ndarray) -> bytes:
        if self.kind == "audio/pcm":
            return pcm.astype("<i2").tobytes()
        return ulaw_encode(pcm) if self.kind == "audio/pcmu" else alaw_encode(pcm)
