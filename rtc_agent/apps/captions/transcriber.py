"""``StreamingTranscriber``: live captions of one audio stream, independent of the recognizer behind it.

Like whisper_streaming's ``OnlineASRProcessor``, it owns the audio buffer and the commit rule and calls an ASR
backend only through ``recognize(TranscribeRequest) -> Transcript``. Speech boundaries come from outside (the
VAD segmenter), so silence is never sent to the recognizer.

Within an utterance the growing buffer is decoded as soon as the VAD confirms speech, then every
``decode_interval_ms`` of audio, one decode at a time, with the committed words forced as the decoder prefix;
LocalAgreement-2 commits what two consecutive continuations agree on. Every decode yields a ``caption.partial``
(committed text never changes once sent). At the first quiet window a decode starts at once, so when the VAD
confirms the end of speech the final text is usually ready: ``caption.final`` is the committed words plus the
last continuation. Past ``trim_after_s`` the buffer is cut at the end of a committed segment (a final caption
for what precedes it); past ``hard_limit_s`` without such a boundary everything recognized so far becomes final.
Results that look like silence (Whisper's no-speech rule) or loops (compression ratio) are dropped. An utterance
that starts while the previous one still waits for its last decode (a busy engine) begins once that final is out;
its audio is kept meanwhile (up to ``RECENT_S``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np

from rtc_agent.apps.audio_ring import AudioRing
from rtc_agent.apps.captions.local_agreement import LocalAgreement, strip_committed
from rtc_agent.apps.captions.speech_segmenter import SpeechEvent
from rtc_agent.engines.asr.base import SAMPLE_RATE, TranscribeRequest, Transcript
from rtc_agent.errors import AgentError
from rtc_agent.protocol import ServerEvent, error_event
from rtc_agent.protocol.events import CaptionFinal, CaptionPartial, SpeechStarted, SpeechStopped

log = logging.getLogger(__name__)

Recognize = Callable[[TranscribeRequest], Awaitable[Transcript]]
Spawn = Callable[[Coroutine[Any, Any, Any], str], asyncio.Task]

_segment_ids = itertools.count(1)
#: Audio kept outside utterances: the next one's pre-roll, or all of it while the previous one is finishing.
RECENT_S = 6.0


@dataclass
class TranscriberConfig:
    language: str | None = None  # None: detect per utterance
    task: str = "transcribe"
    decode_interval_ms: int = 400
    min_decode_ms: int = 300  # don't decode less audio than this
    min_commit_ms: int = 1500  # hypotheses of less audio are shown as tentative but never committed
    trim_after_s: float = 15.0
    hard_limit_s: float = 28.0
    preroll_ms: int = 200
    tail_ms: int = 150  # audio kept after the end of speech for the last decode
    no_speech_threshold: float = 0.6
    logprob_threshold: float = -1.0
    max_finals: int = 10_000  # kept for export


@dataclass
class FinalCaption:
    segment_id: str
    text: str
    start_ms: int
    end_ms: int
    language: str | None


class StreamingTranscriber:
    def __init__(self, recognize: Recognize, emit: Callable[[ServerEvent], None], spawn: Spawn,
                 config: TranscriberConfig | None = None) -> None:
        self.recognize = recognize
        self.emit = emit
        self.spawn = spawn
        self.config = config or TranscriberConfig()
        self.finals: deque[FinalCaption] = deque(maxlen=self.config.max_finals)
        self.language: str | None = self.config.language
        # the pre-roll of the next utterance, and its start while the previous one waits for its last decode
        self._recent = AudioRing(RECENT_S)
        self._pending_start: int | None = None
        self._chunks: list[np.ndarray] = []
        self._samples = 0
        self._buffer_start_ms = 0
        self._la = LocalAgreement()
        self._boundary: tuple[int, float] | None = None  # (committed words, seconds into the buffer)
        self._segment_id: str | None = None
        self._segment_start_ms = 0
        self._utterance = 0  # generation: results of an older utterance are ignored
        self._active = False
        self._ending_at: int | None = None
        self._decoding: asyncio.Task | None = None
        self._want_decode = False
        self._last_decode_at_ms = 0
        self._last_decode_wall_ms = 0.0
        self._covered_until_ms: int | None = None
        self._partials_sent = 0
        self._error_reported = False
        self._utterance_language: str | None = None
        # numbers for stats()
        self.decodes = 0
        self.dropped_results = 0
        self.decode_seconds = 0.0

    # --- input ---

    @property
    def buffer_ms(self) -> int:
        return self._samples * 1000 // SAMPLE_RATE

    def push_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        """16 kHz mono float32 audio in order; kept for the pre-roll and, during speech, in the buffer."""
        self._recent.push(pcm, start_ms)
        if self._active and self._ending_at is None:
            self._append(pcm)

    def _append(self, pcm: np.ndarray) -> None:
        self._chunks.append(pcm)
        self._samples += len(pcm)

    def on_speech(self, event: SpeechEvent, now_ms: int) -> None:
        """A boundary from the VAD segmenter."""
        if event.kind == "start":
            if self._active and self._ending_at is not None:
                self._pending_start = event.ms  # begins when the previous final is out; its audio is kept
            else:
                self._begin(event.ms)
        elif event.kind == "pause" and self._active:
            self._want_decode = True
        elif event.kind == "end" and self._active:
            self.emit(SpeechStopped(audio_end_ms=event.ms))
            self._ending_at = event.ms
            self._cut_after(event.ms + self.config.tail_ms)
        self.poll(now_ms)

    def _begin(self, start_ms: int) -> None:
        self._pending_start = None
        if self._active:  # a start without an end: close the previous utterance first
            self._finalize()
        self._utterance += 1
        self._active = True
        self._ending_at = None
        self._la.reset()
        self._boundary = None
        self._covered_until_ms = None
        self._partials_sent = 0
        self._error_reported = False
        self._utterance_language = self.config.language
        self._segment_id = f"seg_{next(_segment_ids)}"
        from_ms = start_ms - self.config.preroll_ms
        preroll = self._recent.slice(from_ms, self._recent.end_ms)
        self._chunks, self._samples = ([preroll], len(preroll)) if len(preroll) else ([], 0)
        self._buffer_start_ms = max(from_ms, self._recent.start_ms) if len(preroll) else start_ms
        self._segment_start_ms = start_ms
        self._last_decode_at_ms = start_ms
        # the VAD confirms speech after its minimum duration: decode what is there at once, so the first
        # partial is not a whole interval later than the ones after it (unless decodes are slow: a busy engine)
        self._want_decode = self.decode_interval_ms <= self.config.decode_interval_ms
        self.emit(SpeechStarted(audio_start_ms=start_ms))

    def _cut_after(self, end_ms: int) -> None:
        keep = max(0, (end_ms - self._buffer_start_ms) * SAMPLE_RATE // 1000)
        if keep < self._samples:
            audio = self._audio()[:keep]
            self._chunks, self._samples = [audio], len(audio)

    def _audio(self) -> np.ndarray:
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0] if self._chunks else np.zeros(0, dtype=np.float32)

    # --- scheduling ---

    def poll(self, now_ms: int) -> None:
        """Start a decode when one is due; finish an utterance whose end is known (then begin one that
        started meanwhile)."""
        self._begin_pending()
        if not self._active or (self._decoding is not None and not self._decoding.done()):
            return
        if self._ending_at is not None:
            if self._covered_until_ms is not None and self._covered_until_ms >= self._ending_at:
                self._finalize()
                self._begin_pending()
            else:
                self._start_decode(now_ms)
            return
        due = now_ms - self._last_decode_at_ms >= self.decode_interval_ms
        if (due or self._want_decode) and self.buffer_ms >= self.config.min_decode_ms:
            self._start_decode(now_ms)

    def _begin_pending(self) -> None:
        """Begin the utterance that started while the previous one was finishing, once that one is final (or at
        once when its last decode takes so long that the kept audio would run out: then its text is final as
        it is)."""
        if self._pending_start is None:
            return
        if not self._active or self._recent.end_ms - self._pending_start > (RECENT_S - 1) * 1000:
            self._begin(self._pending_start)

    @property
    def decode_interval_ms(self) -> float:
        """The configured interval, stretched when decodes come back slowly (a busy engine shared by many
        sessions): partials then come less often, but every session stays real time."""
        return max(self.config.decode_interval_ms, 1.5 * self._last_decode_wall_ms)

    def _start_decode(self, now_ms: int) -> None:
        self._want_decode = False
        self._last_decode_at_ms = now_ms
        self._decoding = self.spawn(self._decode(now_ms), "captions-decode")

    async def _decode(self, now_ms: int) -> None:
        audio = self._audio()
        covered = self._buffer_start_ms + len(audio) * 1000 // SAMPLE_RATE
        utterance = self._utterance
        request = TranscribeRequest(audio=audio, language=self._utterance_language, task=self.config.task,
                                    prefix=" ".join(self._la.committed))
        started = time.monotonic()
        try:
            transcript = await self.recognize(request)
            self._last_decode_wall_ms = (time.monotonic() - started) * 1000
        except AgentError as exc:
            if not self._error_reported:
                self._error_reported = True
                self.emit(error_event(exc))
            transcript = None
        finally:
            self._decoding = None
        if utterance != self._utterance:
            return
        if transcript is not None:
            self.decodes += 1
            self.decode_seconds += transcript.decode_s
            self._apply(transcript, covered)
        elif self._ending_at is not None:
            self._covered_until_ms = covered  # give up on this utterance's tail rather than retry forever
        self.poll(max(now_ms, covered))

    # --- results ---

    def _usable(self, t: Transcript) -> bool:
        if t.looks_repetitive:
            return False
        silent = t.no_speech_prob > self.config.no_speech_threshold and t.avg_logprob < self.config.logprob_threshold
        return not (silent and not self._la.committed)

    def _apply(self, t: Transcript, covered_ms: int) -> None:
        self._covered_until_ms = covered_ms
        if self._utterance_language is None and t.language and (t.language_prob or 0) >= 0.5 and t.audio_s >= 1.0:
            self._utterance_language = t.language
        if t.language:
            self.language = t.language
        if not self._usable(t):
            self.dropped_results += 1
            self._la.previous = []
            return
        words = t.text.split()
        continuation = words if t.prefix_applied else strip_committed(words, self._la.committed)
        if t.audio_s * 1000 < self.config.min_commit_ms:
            self._la.previous = continuation  # too little audio to trust: compare against it, commit nothing
            newly: list[str] = []
        else:
            newly = self._la.update(continuation)
        if newly and t.prefix_applied:
            self._note_boundary(t, len(newly))
        if not self._la.committed and not self._la.tentative:
            return
        self._partials_sent += 1
        self.emit(CaptionPartial(
            segment_id=self._segment_id or "", committed=" ".join(self._la.committed),
            tentative=" ".join(self._la.tentative), audio_start_ms=self._segment_start_ms,
            audio_end_ms=covered_ms, language=self.language,
        ))
        self._trim()

    def _note_boundary(self, t: Transcript, committed_now: int) -> None:
        """Remember the last timestamped segment end that lies within the committed words."""
        count = 0
        best: tuple[int, float] | None = None
        for segment in t.segments[:-1]:  # the last segment may still grow
            count += len(segment.text.split())
            if count > committed_now:
                break
            best = (count, segment.end)
        if best is not None:
            before = len(self._la.committed) - committed_now
            self._boundary = (before + best[0], best[1])

    def _trim(self) -> None:
        seconds = self._samples / SAMPLE_RATE
        if seconds <= self.config.trim_after_s:
            return
        if self._boundary is not None and self._boundary[1] >= 1.0:
            words, at_s = self._boundary
            end_ms = self._buffer_start_ms + int(at_s * 1000)
            self._emit_final(" ".join(self._la.drop_committed(words)), self._segment_start_ms, end_ms)
            cut = int(at_s * SAMPLE_RATE)
            audio = self._audio()[cut:]
            self._chunks, self._samples = [audio], len(audio)
            self._buffer_start_ms = end_ms
        elif seconds > self.config.hard_limit_s:
            text = " ".join([*self._la.committed, *self._la.tentative])
            end_ms = self._buffer_start_ms + self.buffer_ms
            self._emit_final(text, self._segment_start_ms, end_ms)
            self._la.reset()
            self._chunks, self._samples = [], 0
            self._buffer_start_ms = end_ms
        else:
            return
        self._boundary = None
        self._segment_id = f"seg_{next(_segment_ids)}"
        self._segment_start_ms = self._buffer_start_ms
        self._partials_sent = 0

    def _finalize(self) -> None:
        end_ms = self._ending_at if self._ending_at is not None else self._buffer_start_ms + self.buffer_ms
        text = " ".join([*self._la.committed, *self._la.tentative])
        if text or self._partials_sent:
            self._emit_final(text, self._segment_start_ms, end_ms)
        self._active = False
        self._ending_at = None
        self._utterance += 1
        self._la.reset()
        self._chunks, self._samples = [], 0
        self._segment_id = None

    def _emit_final(self, text: str, start_ms: int, end_ms: int) -> None:
        segment_id = self._segment_id or f"seg_{next(_segment_ids)}"
        self.emit(CaptionFinal(segment_id=segment_id, text=text, audio_start_ms=start_ms, audio_end_ms=end_ms,
                               language=self.language))
        if text:
            self.finals.append(FinalCaption(segment_id, text, start_ms, end_ms, self.language))

    def flush(self, now_ms: int) -> None:
        """The audio ended: treat it as the end of speech."""
        if self._pending_start is not None:
            self._begin(self._pending_start)
        if self._active and self._ending_at is None:
            self.on_speech(SpeechEvent("end", now_ms), now_ms)

    def stats(self) -> dict[str, Any]:
        return {
            "language": self.language,
            "decodes": self.decodes,
            "mean_decode_ms": round(1000 * self.decode_seconds / self.decodes, 1) if self.decodes else None,
            "dropped_results": self.dropped_results,
            "finals": len(self.finals),
            "buffer_ms": self.buffer_ms if self._active else 0,
        }
