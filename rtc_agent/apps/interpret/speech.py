"""Speaking the translation: TTS clause by clause onto the session's outgoing track, in order, with catch-up.

:class:`TranslationSpeaker` takes each emitted translation with the source position it translates
(``source_end_ms``) and speaks it through :class:`~rtc_agent.engines.tts.stream.SpeechSynthesizer` on the session's
:class:`~rtc_agent.apps.base.SpeechSink` (utterances play in order and never overlap).

The speech lag of a piece of text is how far behind the speaker it will be heard: ``now + speech already queued
ahead of it - source_end_ms``. When it exceeds ``max_lag_ms`` the speaker catches up:

- faster speech: the TTS speed rises with the lag (up to ``max_speed``), read again for every clause;
- skipping stale text: a piece whose lag exceeds ``skip_lag_ms`` is not spoken at all (it stays on screen) when
  newer text waits behind it. The newest text is always spoken (at the speed its lag asks for): skipping it wins
  no time back when the text itself arrives late (a machine slower than the speech), it only silences the
  listener.
- a fallback voice: with a ``fallback`` synthesizer (a cheap voice: espeak-ng), a piece that would be more than
  ``skip_lag_ms`` late once the voice had synthesized it (its lag now plus the voice's recent wait for a first
  clause, :meth:`TranslationSpeaker.expected_synthesis_ms`) is spoken by the fallback instead, at the fastest
  speed, and nothing is skipped: a neural voice that cannot keep up on a small CPU (three Kokoro voices on two
  cores) then loses no text and no time, only its sound for those pieces. A piece the voice takes on goes to the
  fallback all the same when the voice's first clause has not come by the time the piece would be ``skip_lag_ms``
  late (the voice slowed down under it); that wait counts in the voice's expected wait.

Every change is announced with a :class:`TranslationSpeechCatchup` event (``action``: ``speed`` when speeding up
or changing speed, ``skip`` for skipped text, ``fallback`` for text the fallback voice speaks, ``normal`` when back
to normal speed).

Each spoken text is framed by ``translation.speech.started`` (when its first clause is queued, with the speech
queued ahead of it) and ``translation.speech.done`` (when its last clause has played), so a page ducks the
original voice only while the interpretation plays. A clause that fails (an engine error, a listener's track that
ended under it) is counted and logged; the speaker goes on with the next text.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtc_agent.apps.base import SpeechSink, UtteranceHandle
from rtc_agent.apps.interpret.work_queue import WorkQueue
from rtc_agent.engines.tts.base import language_code
from rtc_agent.engines.tts.espeak import ENGINE_NAME as ESPEAK_ENGINE
from rtc_agent.engines.tts.espeak import VOICES as ESPEAK_VOICES
from rtc_agent.engines.tts.languages import KOKORO_ENGINE_NAME
from rtc_agent.engines.tts.stream import SpeechSynthesizer
from rtc_agent.engines.tts.text import speakable
from rtc_agent.errors import AgentError
from rtc_agent.protocol import ServerEvent, error_event
from rtc_agent.protocol.events import TranslationSpeechCatchup, TranslationSpeechDone, TranslationSpeechStarted

log = logging.getLogger(__name__)

__all__ = ["TranslationSpeaker", "TranslationSpeechCatchup", "catchup_synthesizer"]

_ids = itertools.count(1)
#: the voice's expected synthesis time halves every this many ms it does not speak
SYNTHESIS_HALF_LIFE_MS = 10_000


def catchup_synthesizer(worker: Any, engine: str, language: str) -> SpeechSynthesizer | None:
    """The ``fallback`` of a :class:`TranslationSpeaker` whose voice is ``engine`` speaking ``language``: the
    espeak-ng voice behind the Kokoro voice, when the worker has it (``tts_catchup_voice``) and it speaks the
    language; None otherwise (Piper and remote voices keep up on their own, or are not ours to replace)."""
    names = worker.names() if hasattr(worker, "names") else []
    if engine != KOKORO_ENGINE_NAME or ESPEAK_ENGINE not in names or language_code(language) not in ESPEAK_VOICES:
        return None
    return SpeechSynthesizer(worker, ESPEAK_ENGINE, language=language)


@dataclass
class _Piece:
    text: str
    source_end_ms: int
    segment_id: str | None = None


class TranslationSpeaker:
    """Speaks translations with catch-up; see the module docstring. Run :meth:`run` as a session task.

    - ``max_lag_ms``: above this lag speech speeds up; ``skip_lag_ms`` (default twice that): text this late is
      skipped when newer text waits. ``max_speed``: the fastest TTS speed. ``max_ahead_ms``: most synthesized
      speech queued ahead of the playhead (synthesis waits beyond it). ``max_pieces``: texts waiting for synthesis
      (the oldest are skipped).
    - ``speaker`` / ``language``: set on every speech event (app ``call``: whose interpretation, into what).
    - ``fallback``: the synthesizer that speaks a piece its voice would speak too late (see the module docstring;
      None: pieces past ``skip_lag_ms`` are skipped).
    - ``on_stop``: called once by :meth:`stop` (e.g. to give back the voice's slot).
    """

    def __init__(self, sink: SpeechSink, synthesizer: SpeechSynthesizer, emit: Callable[[ServerEvent], None],
                 now_ms: Callable[[], int], *, max_lag_ms: int = 3000, skip_lag_ms: int | None = None,
                 max_speed: float = 1.6, max_ahead_ms: int = 15_000, max_pieces: int = 64,
                 speaker: dict[str, str] | None = None, language: str | None = None,
                 fallback: SpeechSynthesizer | None = None, on_stop: Callable[[], None] | None = None) -> None:
        if max_lag_ms < 0:
            raise ValueError("max_lag_ms must be >= 0")
        if not 1.0 <= max_speed <= 4.0:
            raise ValueError("max_speed must be within 1..4")
        self.sink = sink
        self.synthesizer = synthesizer
        self.fallback = fallback
        self._on_stop = on_stop
        self.emit = emit
        self.now_ms = now_ms
        self.max_lag_ms = max_lag_ms
        self.skip_lag_ms = skip_lag_ms if skip_lag_ms is not None else 2 * max_lag_ms
        self.max_speed = max_speed
        self.max_ahead_ms = max_ahead_ms
        self.speaker = speaker
        self.language = language
        self._pieces: WorkQueue[_Piece] = WorkQueue(max_pieces)
        self._playing: deque[tuple[UtteranceHandle, int]] = deque()  # (utterance, duration ms)
        self._current_end_ms = 0  # source position of the piece being synthesized
        self.speed = 1.0
        self.enabled = True
        # stats
        self.spoken = 0
        self.spoken_ms = 0
        self.skipped = 0
        self.skipped_chars = 0
        self.fallbacks = 0  # pieces the fallback voice spoke
        self._synthesis_ms = 0.0  # recent wait for the voice's first clause of a text (0: none yet)
        self._synthesis_at = 0
        self.errors = 0
        self.last_lag_ms = 0

    # --- input ----------------------------------------------------------------------------------------------

    def say(self, text: str, source_end_ms: int, *, segment_id: str | None = None) -> None:
        """Queue a translation for speech (non-blocking). When ``max_pieces`` wait, the oldest is skipped."""
        if not self.enabled or not text.strip():
            return
        old = self._pieces.put(_Piece(text, source_end_ms, segment_id))
        if old is not None:
            self._announce_skip(old, self.lag_ms(old.source_end_ms))

    def clear(self) -> None:
        """Stop speaking now and forget waiting text (e.g. the user turned speech off)."""
        self._pieces.clear()
        self.sink.clear()
        self._playing.clear()

    # --- lag ------------------------------------------------------------------------------------------------

    def queued_ms(self) -> int:
        """Speech written to the track and not played yet."""
        while self._playing and self._playing[0][0].done.done():
            self._playing.popleft()
        return sum(max(0, duration - handle.sent_ms) for handle, duration in self._playing)

    def lag_ms(self, source_end_ms: int) -> int:
        return self.now_ms() + self.queued_ms() - source_end_ms

    def _speed_for(self, lag: int) -> float:
        if lag <= self.max_lag_ms or self.max_lag_ms == 0:
            return 1.0
        over = (lag - self.max_lag_ms) / max(1, self.max_lag_ms)
        return round(min(self.max_speed, 1.0 + 0.25 + 0.5 * over), 2)

    def _current_speed(self) -> float:
        lag = self.lag_ms(self._current_end_ms)
        self.last_lag_ms = lag
        speed = self._speed_for(lag)
        if speed != self.speed:
            self.speed = speed
            action = "normal" if speed == 1.0 else "speed"
            self.emit(TranslationSpeechCatchup(action=action, lag_ms=lag, speed=speed, speaker=self.speaker))
        return speed

    def _announce_skip(self, piece: _Piece, lag: int) -> None:
        self.skipped += 1
        self.skipped_chars += len(piece.text)
        self.emit(TranslationSpeechCatchup(action="skip", lag_ms=lag, speed=self.speed, skipped_text=piece.text,
                                           audio_end_ms=piece.source_end_ms, speaker=self.speaker,
                                           segment_id=piece.segment_id))

    def stop(self) -> None:
        """Say nothing more (the text waiting is dropped with its task) and call ``on_stop`` once."""
        self.enabled = False
        on_stop, self._on_stop = self._on_stop, None
        if on_stop is not None:
            on_stop()

    # --- the task -------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Session task: synthesize and queue each piece, in order, forever."""
        while True:
            piece = await self._pieces.get()
            lag = self.lag_ms(piece.source_end_ms)
            self.last_lag_ms = lag
            if self.fallback is not None:  # would it still be in time once its voice has synthesized it?
                late = lag + self.expected_synthesis_ms() > self.skip_lag_ms > 0
            else:
                late = lag > self.skip_lag_ms and len(self._pieces) > 0
            if late and self.fallback is None:
                self._announce_skip(piece, lag)
                continue
            text = speakable(piece.text)
            if not any(ch.isalnum() for ch in text):
                continue
            self._current_end_ms = piece.source_end_ms
            try:
                if late:
                    await self._speak_late(piece, text, lag)
                elif not await self._speak(text, piece.segment_id, first_within_ms=self._budget_ms(lag)):
                    await self._speak_late(piece, text, self.lag_ms(piece.source_end_ms))
            except AgentError as exc:
                self.errors += 1
                log.warning("speaking a translation failed: %s", exc)
                if self.errors == 1:
                    self.emit(error_event(exc))
            except Exception:  # e.g. a track that ended under the clause: the next text still gets spoken
                self.errors += 1
                log.exception("speaking a translation failed")
            await self._wait_for_room()

    async def _speak_late(self, piece: _Piece, text: str, lag: int) -> None:
        """Speak ``piece`` (too late for the voice) with the fallback voice at the fastest speed."""
        assert self.fallback is not None
        self.fallbacks += 1
        self.emit(TranslationSpeechCatchup(action="fallback", lag_ms=lag, speed=self.max_speed,
                                           audio_end_ms=piece.source_end_ms, speaker=self.speaker,
                                           segment_id=piece.segment_id))
        await self._speak(text, piece.segment_id, self.fallback, lambda: self.max_speed)

    def expected_synthesis_ms(self) -> float:
        """How long the voice's next text may take to start: the larger of the engine's backlog now
        (:meth:`~rtc_agent.engines.tts.stream.SpeechSynthesizer.backlog_ms`: other listeners' languages queue on the
        same voice) and this speaker's recent wait for a text's first clause, which halves every
        ``SYNTHESIS_HALF_LIFE_MS`` the voice did not speak (its load may have gone)."""
        idle = max(0, self.now_ms() - self._synthesis_at)
        backlog = getattr(self.synthesizer, "backlog_ms", None)
        return max(self._synthesis_ms * 0.5 ** (idle / SYNTHESIS_HALF_LIFE_MS), backlog() if backlog else 0.0)

    def _budget_ms(self, lag: int) -> float | None:
        """How long the voice's first clause of a piece now ``lag`` ms late may take before the fallback speaks
        the piece instead (None: no fallback, or no skip lag: wait for the voice)."""
        if self.fallback is None or self.skip_lag_ms <= 0:
            return None
        return max(0.0, float(self.skip_lag_ms - lag))

    async def _speak(self, text: str, segment_id: str | None = None, synthesizer: SpeechSynthesizer | None = None,
                     speed: Callable[[], float] | None = None, first_within_ms: float | None = None) -> bool:
        """Speak ``text``; False (nothing played) when the first clause did not come within ``first_within_ms``."""
        asked = self.now_ms()
        stream = (synthesizer or self.synthesizer).stream(text, speed=speed or self._current_speed)
        clauses = aiter(stream)
        first: str | None = None
        last: UtteranceHandle | None = None
        try:
            async with contextlib.aclosing(stream):
                while True:
                    try:
                        if first is None and first_within_ms is not None:
                            synthesis = await asyncio.wait_for(anext(clauses), first_within_ms / 1000)
                        else:
                            synthesis = await anext(clauses)
                    except StopAsyncIteration:
                        break
                    except TimeoutError:
                        self._synthesis_at = self.now_ms()
                        self._synthesis_ms = max(self._synthesis_ms, float(self._synthesis_at - asked))
                        return False
                    utterance_id = f"tr_{next(_ids)}"
                    ahead = self.queued_ms()
                    handle = self.sink.play(synthesis.pcm, synthesis.sample_rate, utterance_id=utterance_id)
                    if first is None:
                        first = utterance_id
                        if synthesizer is None:  # the voice's own time, for expected_synthesis_ms
                            self._synthesis_at = self.now_ms()
                            waited = self._synthesis_at - asked
                            self._synthesis_ms = waited if not self._synthesis_ms else \
                                (self._synthesis_ms + waited) / 2
                        voice = getattr(synthesizer or self.synthesizer, "engine", None)
                        self.emit(TranslationSpeechStarted(utterance_id=first, starts_in_ms=ahead, text=text,
                                                           language=self.language, segment_id=segment_id,
                                                           speaker=self.speaker, engine=voice))
                    duration = int(synthesis.duration_s * 1000)
                    self._playing.append((handle, duration))
                    self.spoken_ms += duration
                    last = handle
        finally:
            if first is not None and last is not None:
                self._announce_done(first, last, segment_id)
        self.spoken += 1
        return True

    def _announce_done(self, utterance_id: str, last: UtteranceHandle, segment_id: str | None) -> None:
        """``translation.speech.done`` once ``last`` (the text's last clause) has played or was cut."""

        def done(fut: asyncio.Future) -> None:
            failed = fut.cancelled() or fut.exception() is not None
            cleared = failed or any(getattr(h, "cleared", False) for h in getattr(last, "handles", [last]))
            self.emit(TranslationSpeechDone(utterance_id=utterance_id, sent_ms=0 if failed else int(fut.result() or 0),
                                            cleared=cleared, language=self.language, segment_id=segment_id,
                                            speaker=self.speaker))

        last.done.add_done_callback(done)

    async def _wait_for_room(self) -> None:
        while self.queued_ms() > self.max_ahead_ms and self._playing:
            await asyncio.wait({asyncio.ensure_future(self._playing[0][0].done)}, timeout=1.0)

    def stats(self) -> dict[str, Any]:
        return {"spoken": self.spoken, "spoken_ms": self.spoken_ms, "skipped": self.skipped,
                "skipped_chars": self.skipped_chars, "fallbacks": self.fallbacks, "speed": self.speed,
                "lag_ms": self.last_lag_ms, "queued_ms": self.queued_ms(), "errors": self.errors,
                "enabled": self.enabled, "engine": getattr(self.synthesizer, "engine", None)}
