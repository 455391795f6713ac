"""Audio longer than Whisper's 30 s window, decoded one window after the other (openai-whisper's seek loop).

Whisper hears at most ``WINDOW_S`` at once. :class:`LongAudio` walks one request's audio: each window is decoded
as its own request, and the next window starts where the window's text is settled: at the end of its last
segment closed by a timestamp. An unclosed tail (cut by the window's end) is dropped, and a sentence the decoder
left out at the window's end is not lost: the next window hears both whole. A window with no closed segment past
``MIN_ADVANCE_S`` keeps all its text and the next one starts after it. Windows after the first get the text so far
as their prompt and the first window's language, as Whisper's own ``transcribe`` does, and the full 30 s window
(the last, shorter one too: with a short window and that prompt, Whisper heard the last sentence twice, once in
the padding); a window that sounds like silence adds no text. A request of at most ``WINDOW_S`` is one window
and comes back exactly as decoded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rtc_agent.engines.asr.base import SAMPLE_RATE, Segment, TranscribeRequest, Transcript

WINDOW_S = 30
MIN_ADVANCE_S = 1.0  # a window whose settled text ends earlier than this moves on by the whole window

__all__ = ["MIN_ADVANCE_S", "WINDOW_S", "DecodedWindow", "LongAudio"]


@dataclass(frozen=True)
class DecodedWindow:
    """One decoded window: its transcript (times relative to the window) and ``settled_s``, the time up to which
    its segments are final (the end of the last segment closed by a timestamp; 0 when none was closed)."""

    transcript: Transcript
    settled_s: float


class LongAudio:
    """One request's way through its audio, ``WINDOW_S`` at a time: ``next_request()`` while not ``done``, each
    decoded window back through ``add()``, then ``merged()``."""

    def __init__(self, request: TranscribeRequest) -> None:
        self.request = request
        self.total = len(request.audio)
        self.seek = 0  # samples
        self.parts: list[tuple[float, DecodedWindow]] = []  # (offset in seconds, window)
        self._segments: list[Segment] = []

    @property
    def done(self) -> bool:
        return bool(self.parts) and self.seek >= self.total

    def next_request(self) -> TranscribeRequest:
        """The request for the next window (the request itself when it fits in one window)."""
        if not self.parts:
            if self.total <= WINDOW_S * SAMPLE_RATE:
                return self.request
            return replace(self.request, audio=self.request.audio[: WINDOW_S * SAMPLE_RATE])
        first = self.parts[0][1].transcript
        so_far = "".join(s.text for s in self._segments).strip()
        prompt = " ".join(t for t in (self.request.prompt.strip(), self.request.prefix.strip(), so_far) if t)
        return replace(self.request, audio=self.request.audio[self.seek: self.seek + WINDOW_S * SAMPLE_RATE],
                       prompt=prompt, prefix="", context=(), language=first.language or self.request.language,
                       detect_language=False, full_window=True)

    def add(self, window: DecodedWindow) -> None:
        """Take the decoded window of the last ``next_request()`` and move on."""
        offset = self.seek / SAMPLE_RATE
        length = min(self.total - self.seek, WINDOW_S * SAMPLE_RATE)
        last = self.seek + length >= self.total
        t = window.transcript
        segments = [] if (t.looks_like_silence and self.total > WINDOW_S * SAMPLE_RATE) else list(t.segments)
        advance = length
        unsettled = segments and window.settled_s < length / SAMPLE_RATE - 1e-6
        if not last and unsettled and window.settled_s >= MIN_ADVANCE_S:
            advance = round(window.settled_s * SAMPLE_RATE)
            segments = [s for s in segments if s.end <= window.settled_s + 1e-6]
        self._segments += [Segment(s.start + offset, s.end + offset, s.text) for s in segments]
        self.parts.append((offset, window))
        self.seek = min(self.total, self.seek + max(1, advance))

    def merged(self) -> Transcript:
        """The whole request's transcript: a one-window request's as decoded; else the windows' segments in order
        (times from the start of the audio), the first window's language and prefix handling, ``no_speech_prob``
        the lowest of the windows (silent only when every window is), ``avg_logprob`` the windows' mean weighted
        by duration, ``compression_ratio`` the highest (each window is judged by the engine), decode times
        summed, ``decoded_again`` when any window was."""
        if len(self.parts) == 1:
            return self.parts[0][1].transcript
        windows = [w.transcript for _, w in self.parts]
        first = windows[0]
        weights = [max(1e-3, t.audio_s) for t in windows]
        text = "".join(s.text for s in self._segments).strip()
        return replace(
            first, text=text, segments=list(self._segments),
            no_speech_prob=min(t.no_speech_prob for t in windows),
            avg_logprob=sum(w * t.avg_logprob for w, t in zip(weights, windows, strict=True)) / sum(weights),
            compression_ratio=max(t.compression_ratio for t in windows),
            audio_s=self.request.duration_s, window_s=max(t.window_s for t in windows),
            decode_s=sum(t.decode_s for t in windows), decoded_again=any(t.decoded_again for t in windows),
        )
