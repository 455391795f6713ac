"""The speech-recognition engine contract shared by every ASR backend.

Requests and results are plain data so the streaming policy in ``apps/`` can be tested with a scripted recognizer.
All times are seconds relative to the start of the request's audio.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from rtc_agent.engines.asr.repetition import COMPRESSION_RATIO_LIMIT, compression_ratio, looping_run

SAMPLE_RATE = 16000


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    text: str


@dataclass(frozen=True)
class TranscribeRequest:
    """Recognize ``audio`` (float32 mono 16 kHz, -1..1).

    ``language`` None means detect it. ``task`` is ``transcribe`` or ``translate`` (to English). ``prompt`` is
    earlier text for context. ``prefix`` is text the result must continue (the words a streaming policy has
    already committed for this audio); engines that cannot force a prefix return the whole text and say so with
    ``Transcript.prefix_applied = False``. ``full_window`` asks for Whisper's 30 s window (the reference path).
    ``urgent`` marks a result a person is waiting for (a caption's final, an agent's turn): the worker serves it
    before the others (partials) in the engine's queue. ``cut_loops``: a decoder loop is cut to one copy instead
    of decoded again in a longer window (a caption's partial: the next decode replaces it within the interval,
    and a 16-30 s window costs several of them).
    ``context``: earlier speech at the start of ``audio`` whose text is known (a caption's earlier finals, times in
    seconds from the audio's start): the engine forces it, timestamped, as the decoder's prefix, so the model hears
    that audio without decoding it again, and returns only what follows (not with ``prefix``).
    """

    audio: np.ndarray
    language: str | None = None
    task: str = "transcribe"
    prompt: str = ""
    prefix: str = ""
    full_window: bool = False
    beam_size: int | None = None
    detect_language: bool = False
    urgent: bool = False
    cut_loops: bool = False
    context: tuple[Segment, ...] = ()

    @property
    def duration_s(self) -> float:
        return len(self.audio) / SAMPLE_RATE


@dataclass
class Transcript:
    """The recognized text after ``prefix`` (or all of it when ``prefix_applied`` is False), with quality signals.

    ``segments`` split ``text`` where the model placed timestamps. ``no_speech_prob`` and ``avg_logprob`` follow
    Whisper's definitions; ``compression_ratio`` above about 2.4 means repetitive (hallucinated) text, and so does
    a short unit repeated many times (:mod:`rtc_agent.engines.asr.repetition`): ``looks_repetitive``.
    ``language_probs`` is the detector's ranking (most likely first, a few entries) when it ran.
    ``decoded_again``: the engine's repetition guard decoded (a window of) it a second time, so its wall time says
    little about the engine's usual speed. ``context_forced``: the engine forced the request's ``context`` (the
    text and segments are only what follows it); False where the request had none or the engine cannot force one
    (then the text covers the context's audio too).
    """

    text: str
    segments: list[Segment] = field(default_factory=list)
    language: str | None = None
    language_prob: float | None = None
    language_probs: list[tuple[str, float]] = field(default_factory=list)
    no_speech_prob: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 1.0
    prefix_applied: bool = False
    audio_s: float = 0.0
    window_s: float = 0.0
    decode_s: float = 0.0
    decoded_again: bool = False
    context_forced: bool = False

    @property
    def looks_like_silence(self) -> bool:
        """Whisper's own rule for 'nothing was said' (no-speech token likely and low confidence)."""
        return self.no_speech_prob > 0.6 and self.avg_logprob < -1.0

    @property
    def looks_repetitive(self) -> bool:
        """A decoder loop: the text compresses too well or repeats a short unit back to back."""
        return self.compression_ratio > COMPRESSION_RATIO_LIMIT or looping_run(self.text, self.audio_s) is not None

    def without_loop(self) -> Transcript:
        """This transcript with its earliest loop cut to one copy of the unit and everything after the loop dropped
        (the decoder does not recover inside one decode). Segments are cut to match; the compression ratio is that
        of the new text. A transcript without a loop comes back unchanged (the same object)."""
        joined = "".join(s.text for s in self.segments) if self.segments else self.text
        loop = looping_run(joined, self.audio_s)
        if loop is None:
            return self
        keep = loop.start + loop.unit
        segments: list[Segment] = []
        at = 0
        for segment in self.segments:
            if at >= keep:
                break
            piece = segment.text[: keep - at]
            if piece.strip():
                segments.append(Segment(segment.start, segment.end, piece))
            at += len(segment.text)
        text = joined[:keep].strip()
        return replace(self, text=text, segments=segments, compression_ratio=compression_ratio(text))
