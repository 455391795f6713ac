"""``WhisperStream``: LocalAgreement over Whisper hypotheses of a growing dialogue's audio, for one task.

Whisper never chooses to wait, so the decision comes from LocalAgreement (as in whisper_streaming): every turn the
dialogue's audio is decoded again and the words that the new hypothesis shares with a recent one (by default
either of the two before it) beyond those already emitted are committed; when nothing new is agreed, nothing is. A
sentence Whisper finished and timestamped is committed without waiting for agreement when a pause of at least
``PAUSE_COMMIT_S`` ends the audio. A final flush commits the whole latest hypothesis; a partial one commits it
through the last sentence Whisper finished and timestamped, so a flush does not chop a sentence where the chunk
grid falls. A flush of exactly the audio decoded last can reuse that hypothesis (:meth:`WhisperStream.cached`).

Each hypothesis decodes the whole buffer from scratch (``force_prefix=False``, whisper_streaming's way): Whisper
base translates much better with the earlier sentences in its window than with the emitted text forced as a
decoder prefix (measured on espeak-ng Spanish and German: about 0.8 against 0.7 of offline chrF). The buffer is the
dialogue's audio after the *trim point*; once it is longer than ``trim_after_s`` the trim point moves to the end of
the last emitted sentence that Whisper timestamped (untimed ends are never trusted: Whisper often leaves out the
last words of cut-off audio). ``force_prefix=True`` forces the emitted words instead and trims at every timestamped
sentence end: shorter decodes and lower latency, lower quality.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rtc_agent.engines.asr.base import TranscribeRequest, Transcript
from rtc_agent.engines.st.base import SAMPLE_RATE, Turn
from rtc_agent.words import common_prefix, normalized

__all__ = ["PAUSE_COMMIT_S", "WhisperStream", "agreed_prefix", "ends_sentence", "quiet_tail_s"]

_SENTENCE_END = re.compile("[.!?\u2026\u3002\uff01\uff1f][\"')\\]\u00bb\u201d\u2019]*$")


agreed_prefix = common_prefix  # LocalAgreement: how many leading words two consecutive hypotheses share
PAUSE_COMMIT_S = 0.4  # a quiet buffer end this long after a finished sentence commits that sentence
SENTENCE_PAUSE_SLACK_S = 0.5  # how far before the pause Whisper's timestamp of the sentence end may lie
QUIET_DBFS = -40.0


def quiet_tail_s(audio: np.ndarray, frame_s: float = 0.02) -> float:
    """Seconds of quiet (every 20 ms frame below ``QUIET_DBFS``) at the end of ``audio`` (float, -1..1)."""
    frame = int(SAMPLE_RATE * frame_s)
    frames = len(audio) // frame
    if frames == 0:
        return 0.0
    tail = np.asarray(audio[len(audio) - frames * frame:], dtype=np.float32).reshape(frames, frame)
    loud = np.flatnonzero(np.sqrt(np.mean(tail * tail, axis=1)) >= 10 ** (QUIET_DBFS / 20))
    return (frames - (loud[-1] + 1 if len(loud) else 0)) * frame_s


def ends_sentence(text: str) -> bool:
    return bool(_SENTENCE_END.search(text.strip()))


@dataclass
class _Layout:
    """Where each turn's audio sits in a stream's decode buffer (to map Whisper's times back to the clock)."""

    pieces: list[tuple[int, int, int]] = field(default_factory=list)  # (start_ms on the clock, offset, samples)

    def clock_ms(self, seconds: float) -> int:
        """The source-clock ms of a time (seconds into the buffer)."""
        at = round(seconds * SAMPLE_RATE)
        for start_ms, offset, samples in self.pieces:
            if at <= offset + samples:
                return start_ms + max(0, at - offset) * 1000 // SAMPLE_RATE
        if not self.pieces:
            return 0
        start_ms, _, samples = self.pieces[-1]
        return start_ms + samples * 1000 // SAMPLE_RATE


class WhisperStream:
    """LocalAgreement over Whisper hypotheses of a dialogue's audio, for one task (``translate``/``transcribe``).

    Use: ``request = stream.build(turns)`` -> decode it (the caller batches) -> ``stream.apply(transcript, end_ms,
    flush)`` returns the newly committed words. ``reset()`` forgets the dialogue.

    Language: every decode is in ``language`` (the caller's choice, see :meth:`set_language`; ``None``: Whisper
    detects it per decode). The stream keeps no detection of its own: choosing the session's language from the
    detections is the caller's policy (the interpret app's ``LanguageRule``); ``detected_language`` is only what
    the last decode found.

    - ``agreement``: how many earlier hypotheses the newest is compared with (1 = classic LocalAgreement-2; 2 =
      agreement with either of the two before it).
    - ``min_commit_ms``: a hypothesis of less audio commits nothing (Whisper invents text for short snippets).
      Results that look like silence (Whisper's no-speech rule) or loops commit nothing either.
    - ``force_prefix``/``trim_after_s``: see the module docstring. ``max_audio_s``: the buffer's hard limit
      (Whisper's window is 30 s; the oldest audio is dropped beyond it).
    """

    def __init__(self, task: str, *, language: str | None = None, agreement: int = 2, min_commit_ms: int = 1000,
                 force_prefix: bool = False, trim_after_s: float = 15.0, max_audio_s: float = 28.0) -> None:
        if task not in ("translate", "transcribe"):
            raise ValueError(f"task must be translate or transcribe, got {task!r}")
        if agreement < 1:
            raise ValueError(f"agreement must be >= 1, got {agreement}")
        if not 0 < trim_after_s < max_audio_s <= 30:
            raise ValueError("need 0 < trim_after_s < max_audio_s <= 30")
        self.task = task
        self.fixed_language = language
        self.detected_language: str | None = None  # what the last decode found (not used for the next one)
        self.min_commit_ms = min_commit_ms
        self.force_prefix = force_prefix
        self.trim_after_s = trim_after_s
        self.max_audio_s = max_audio_s
        self.committed: list[str] = []  # emitted words of the audio after the trim point
        self._hyps: deque[list[str]] = deque(maxlen=agreement)  # recent whole hypotheses of the buffer
        self.trim_ms: int | None = None  # audio before this point of the clock is not decoded again
        self._layout = _Layout()
        self._buffer_s = 0.0
        self._quiet_tail_s = 0.0
        self._built: tuple[Any, ...] | None = None  # what the request built last covers
        self._decoded: tuple[Any, Transcript] | None = None  # (what it covered, hypothesis) of the last decode
        self.decodes = 0

    @property
    def language(self) -> str | None:
        """The language the next decode is in (``None``: detect it)."""
        return self.fixed_language

    def set_language(self, language: str | None) -> None:
        self.fixed_language = language

    @property
    def pending(self) -> bool:
        """True when the latest hypothesis holds words not emitted yet."""
        return bool(self.previous)

    @property
    def previous(self) -> list[str]:
        """The tentative words: the latest hypothesis after the committed ones."""
        if not self._hyps:
            return []
        latest = self._hyps[-1]
        n = len(self.committed)
        return latest[n:] if agreed_prefix(latest, self.committed) >= n else []

    def reset(self) -> None:
        self.committed = []
        self._hyps.clear()
        self.trim_ms = None
        self._decoded = None

    def build(self, turns: list[Turn], *, detect: bool = False) -> TranscribeRequest | None:
        """The decode request for the dialogue's audio after the trim point (``None`` when there is none);
        ``detect``: run the language detector even when the language is given."""
        parts: list[np.ndarray] = []
        layout = _Layout()
        offset = 0
        for turn in turns:
            audio = turn.audio
            start_ms = turn.start_ms
            if self.trim_ms is not None:
                if turn.end_ms <= self.trim_ms:
                    continue
                if start_ms < self.trim_ms:
                    audio = audio[(self.trim_ms - start_ms) * SAMPLE_RATE // 1000:]
                    start_ms = self.trim_ms
            if len(audio) == 0:
                continue
            parts.append(audio)
            layout.pieces.append((start_ms, offset, len(audio)))
            offset += len(audio)
        if not parts:
            return None
        audio = np.concatenate(parts).astype(np.float32, copy=False)
        limit = int(self.max_audio_s * SAMPLE_RATE)
        if len(audio) > limit:  # safety net: trimming and the policy's window cut normally come first
            drop = len(audio) - limit
            audio = audio[drop:]
            layout.pieces = [(s + max(0, drop - o) * 1000 // SAMPLE_RATE, max(0, o - drop), n - max(0, drop - o))
                             for s, o, n in layout.pieces if o + n > drop]
        self._layout = layout
        self._buffer_s = len(audio) / SAMPLE_RATE
        self._quiet_tail_s = quiet_tail_s(audio)
        request = TranscribeRequest(audio=audio, language=self.language, task=self.task,
                                    prefix=" ".join(self.committed) if self.force_prefix else "",
                                    detect_language=detect)
        digest = hashlib.blake2b(audio.tobytes(), digest_size=16).digest()
        self._built = (len(audio), digest, request.language, request.prefix)
        return request

    def cached(self) -> Transcript | None:
        """The hypothesis of the last decode when the request built last is the same (a flush right after a
        turn re-translates the audio that was just decoded: no second decode)."""
        if self._decoded is not None and self._decoded[0] == self._built:
            return self._decoded[1]
        return None

    def _usable(self, t: Transcript) -> bool:
        if t.looks_repetitive:
            return False
        return not (t.looks_like_silence and not self.committed)

    def apply(self, t: Transcript, end_ms: int, *, flush: str | None = None) -> list[str]:
        """Take one hypothesis of the buffer built last; returns the words it commits (in order).

        ``flush``: ``None`` (agreement decides), ``"partial"`` (commit through the last sentence Whisper finished
        and timestamped, or everything when there is none) or ``"final"`` (commit everything).
        """
        if flush not in (None, "partial", "final"):
            raise ValueError(f"flush must be None, 'partial' or 'final', got {flush!r}")
        self.decodes += 1
        self._decoded = (self._built, t)
        self.detected_language = t.language or self.fixed_language
        words = t.text.split() if self._usable(t) else []
        base = len(self.committed)
        prefixed = self.force_prefix and t.prefix_applied  # the text continues the committed words
        if prefixed:
            full = self.committed + words
            first = base  # where the transcript's segments start, in words of ``full``
        else:
            full = self.committed + self._after_committed(words)
            first = len(full) - len(words)
        sentence_end = None
        if flush == "final":
            newly = full[base:]
        elif flush == "partial":
            sentence_end = self._sentence_end(t, first, len(full))
            newly = full[base:max(base, sentence_end[0] if sentence_end else len(full))]
        elif self._buffer_s * 1000 < self.min_commit_ms:
            newly = []
        else:
            best, source = 0, full
            for old in self._hyps:
                n = agreed_prefix(old, full)
                if n > best:
                    best, source = n, old
            # the surface form of the newer hypothesis, except for its last word (Whisper likes to end a
            # hypothesis of cut-off audio with a period that is not there once more audio arrives)
            newly = [source[i] if i == len(full) - 1 else full[i] for i in range(base, max(base, best))]
            finished = self._finished_sentence(t, first, len(full))
            if finished > base + len(newly):  # a sentence followed by a pause is as stable as it gets
                newly = full[base:finished]
        self._hyps.append(full)
        self.committed.extend(newly)
        if flush == "final":
            self._trim_at(end_ms, len(self.committed))
        elif sentence_end is not None and sentence_end[1] >= 0.3:
            self._trim_at(self._layout.clock_ms(sentence_end[1]), sentence_end[0])  # the flushed sentence is done
        elif prefixed or self._buffer_s > self.trim_after_s:
            self._maybe_trim(t, max(0, first), base if prefixed else 0)
        return newly

    def _after_committed(self, words: list[str]) -> list[str]:
        """The part of a whole-buffer hypothesis after the committed words.

        Usually the hypothesis starts with them; when Whisper put that part differently, the hypothesis is cut
        after the last place where the committed text's last three (else two) words appear, or else after as many
        words as were committed, so emitted text is neither repeated nor (as far as the text tells) skipped."""
        base = len(self.committed)
        if agreed_prefix(self.committed, words) == base:
            return words[base:]
        norm = normalized(words)
        for size in (3, 2):
            if base < size:
                continue
            tail = normalized(self.committed[-size:])
            for p in range(len(words) - size, -1, -1):
                if norm[p:p + size] == tail:
                    return words[p + size:]
        return words[base:]

    def _finished_sentence(self, t: Transcript, first: int, total: int) -> int:
        """Words of the hypothesis through the last sentence that ends where a pause of at least
        ``PAUSE_COMMIT_S`` closes the buffer (0 when there is none)."""
        if self._quiet_tail_s < PAUSE_COMMIT_S:
            return 0
        end = self._sentence_end(t, first, total)
        pause_start = self._buffer_s - self._quiet_tail_s
        return end[0] if end is not None and end[1] >= pause_start - SENTENCE_PAUSE_SLACK_S else 0

    def _sentence_end(self, t: Transcript, first: int, total: int) -> tuple[int, float] | None:
        """``(words, seconds)``: where the last sentence Whisper finished and timestamped ends in the hypothesis
        (its segments start at word ``first``; ``total`` words in all), or ``None``."""
        count = first
        best = None
        for segment in t.segments:
            count += len(segment.text.split())
            if count > total:
                break
            if ends_sentence(segment.text) and segment.end < self._buffer_s - 0.1:
                best = (count, segment.end)
        return best

    def _maybe_trim(self, t: Transcript, first: int, prefix_words: int) -> None:
        """Move the trim point to the end of the last committed sentence that Whisper timestamped."""
        if not t.segments or not self.committed:
            return
        best = self._sentence_end(t, first, len(self.committed))
        if best is None and prefix_words and ends_sentence(self.committed[prefix_words - 1]) \
                and t.segments[0].start > 0:
            best = (prefix_words, t.segments[0].start)  # Whisper closed the prefix's sentence with a timestamp
        if best is not None and best[1] >= 0.3:
            words, at_s = best
            self._trim_at(self._layout.clock_ms(at_s), words)

    def _trim_at(self, clock_ms: int, words: int) -> None:
        done, self.committed = self.committed[:words], self.committed[words:]
        # earlier hypotheses stay comparable only if they said the words that were trimmed away
        self._hyps = deque((h[words:] for h in self._hyps if agreed_prefix(h, done) >= words),
                           maxlen=self._hyps.maxlen)
        self.trim_ms = clock_ms if self.trim_ms is None else max(self.trim_ms, clock_ms)

