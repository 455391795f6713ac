"""``SpeechSegmenter``: VAD probabilities in, utterance boundaries out (hysteresis and minimum durations).

Pure logic, fed one probability per 32 ms window. ``pause`` fires at the first quiet window after speech (the
caller may start a speculative decode then); ``end`` fires once the quiet has lasted ``min_silence_ms`` and
reports where the quiet began, which is where the speech ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class SpeechEvent:
    kind: Literal["start", "pause", "resume", "end"]
    ms: int  # start: where speech began; pause/end: where the quiet began; resume: where speech came back


class SpeechSegmenter:
    def __init__(self, *, threshold: float = 0.5, neg_threshold: float | None = None, min_speech_ms: int = 200,
                 min_silence_ms: int = 250) -> None:
        if not 0.0 < threshold < 1.0:
            raise ValueError("threshold must be between 0 and 1")
        self.threshold = threshold
        self.neg_threshold = max(0.01, threshold - 0.15) if neg_threshold is None else neg_threshold
        self.min_speech_ms = min_speech_ms
        self.min_silence_ms = min_silence_ms
        self.in_speech = False
        self._candidate: int | None = None  # start of a run of loud windows not yet long enough
        self._quiet_since: int | None = None

    def feed(self, prob: float, start_ms: int, end_ms: int) -> list[SpeechEvent]:
        """One window's speech probability; returns the boundaries it completes, in order."""
        events: list[SpeechEvent] = []
        if not self.in_speech:
            if prob >= self.threshold:
                if self._candidate is None:
                    self._candidate = start_ms
                if end_ms - self._candidate >= self.min_speech_ms:
                    self.in_speech = True
                    events.append(SpeechEvent("start", self._candidate))
                    self._candidate = None
            elif prob < self.neg_threshold:
                self._candidate = None
            return events
        if prob < self.neg_threshold:
            if self._quiet_since is None:
                self._quiet_since = start_ms
                events.append(SpeechEvent("pause", start_ms))
            if end_ms - self._quiet_since >= self.min_silence_ms:
                events.append(SpeechEvent("end", self._quiet_since))
                self.in_speech = False
                self._quiet_since = None
        elif prob >= self.threshold and self._quiet_since is not None:
            events.append(SpeechEvent("resume", start_ms))
            self._quiet_since = None
        return events

    def flush(self, end_ms: int) -> list[SpeechEvent]:
        """The audio ended: close an open utterance."""
        if not self.in_speech:
            self._candidate = None
            return []
        self.in_speech = False
        at = self._quiet_since if self._quiet_since is not None else end_ms
        self._quiet_since = None
        return [SpeechEvent("end", at)]
