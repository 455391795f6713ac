"""Whisper's timestamped token streams: generated tokens split into segments, and segments written as tokens (a
forced context). ``tok`` is a faster-whisper tokenizer (``timestamp_begin``, ``eot``, ``encode``, ``decode``)."""

from __future__ import annotations

from typing import Any

from rtc_agent.engines.asr.base import Segment

__all__ = ["LATE_SEGMENT_S", "TIME_PRECISION", "context_tokens", "split_segments"]

LATE_SEGMENT_S = 0.3
TIME_PRECISION = 0.02


def split_segments(tok: Any, tokens: list[int], duration: float,
                   start: float = 0.0) -> tuple[list[Segment], float]:
    """Split generated tokens at timestamp tokens; an unfinished last segment ends at the audio's end; text
    before the first timestamp starts at ``start`` (where a forced context ended).

    A segment that starts in the last ``LATE_SEGMENT_S`` of the audio is dropped: in a window padded past the
    audio, Whisper often "hears" the sentence again there (no word can be complete in that time anyway). Also
    returns the time up to which the segments are settled
    (:class:`~rtc_agent.engines.asr.long_audio.DecodedWindow`): the end of the last kept segment closed by a
    timestamp (0 when none was). Not the window's end even when the decode ended on a closing timestamp: the
    decoder often stops before a sentence that the window's end cuts, and the next window must hear that sentence.
    """
    pieces: list[tuple[Segment, bool]] = []  # (segment, closed by a timestamp)
    current: list[int] = []
    seg_start = start
    for token in tokens:
        if token >= tok.timestamp_begin:
            at = (token - tok.timestamp_begin) * TIME_PRECISION
            if current:
                pieces.append((Segment(seg_start, min(at, duration), tok.decode(current)), True))
                current = []
            seg_start = at
        elif token < tok.eot:
            current.append(token)
    if current:
        pieces.append((Segment(seg_start, duration, tok.decode(current)), False))
    kept = [(s, closed) for s, closed in pieces if s.text.strip() and s.start < duration - LATE_SEGMENT_S]
    return [s for s, _ in kept], max((s.end for s, closed in kept if closed), default=0.0)


def context_tokens(tok: Any, context: tuple[Segment, ...], window_s: float) -> tuple[list[int], float]:
    """A request's context as Whisper writes its own segments (start timestamp, text, end timestamp), each
    timestamp rounded to ``TIME_PRECISION``, never before the previous one nor past the window; with where the
    last one ends (seconds)."""
    tokens: list[int] = []
    last = 0
    top = int(window_s / TIME_PRECISION)
    for segment in context:
        words = tok.encode(" " + segment.text.strip()) if segment.text.strip() else []
        if not words:
            continue
        start = min(top, max(last, round(segment.start / TIME_PRECISION)))
        end = min(top, max(start, round(segment.end / TIME_PRECISION)))
        tokens += [tok.timestamp_begin + start, *words, tok.timestamp_begin + end]
        last = end
    return tokens, last * TIME_PRECISION
