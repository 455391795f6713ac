"""The text route of interpretation: caption finals of the source speech, translated by the worker's ``mt`` engine.

Where speech translation cannot produce a listener's language (the embedded Whisper translate task gives English
only), the interpret app and the call rooms recognise the speech (the captions pipeline's finals) and translate each
final's text (the cascade): :class:`FinalsTranslator` takes the finals in order, sends each as
``TextTranslateRequest(text, source, target, context)`` (the context being the previous finals and their
translations: it grows final by final up to ``CONTEXT_MAX_FINALS`` and is then cut back to the newest
``CONTEXT_FINALS``, so that while it grows each prompt is the previous one plus its translation and the new final,
and the engine computes only that: the embedded LLM's row cache; a sliding window would change the prompt's start
every time; after a cut, when no final waits, a ``ContextPrimeRequest`` has the engine compute the cut context while
the speaker still talks, so the next final's translation does not) and emits, for each, the ``translation.chunk``
the speech route sends (``EMIT`` with ``source_text``); ``on_text`` gets every translation (to speak it, to file it
as a ``caption.translation``).

While a sentence is still being said, :meth:`FinalsTranslator.hint` hears its committed words (a caption partial's
``committed``): each time ``prime_words`` more of them are known and no final waits, the translator has the engine
compute the next prompt up to them (a ``ContextPrimeRequest`` with ``text``), so when the final comes its
translation computes only the words after them (and the prompt's end) before it writes: the prompt of three
listen languages' translations of a final is computed while the speaker talks, not after.

Finals wait in a bounded queue (``max_pending``, the ``room_mt_backlog`` setting); past it the oldest is dropped,
and so is any the owner sheds with :meth:`FinalsTranslator.drop_oldest` (a call room's muted speaker's first), each
announced as ``translation.speech.catchup`` with ``action: "drop"``. A failed translation is logged and counted; the
first one is sent as an ``error`` event, and the next final is translated as usual.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtc_agent.apps.interpret.deliverable import prime_engine, prime_request, text_request
from rtc_agent.apps.interpret.work_queue import WorkQueue
from rtc_agent.errors import AgentError
from rtc_agent.protocol import ServerEvent, error_event
from rtc_agent.protocol.events import CaptionFinal, CaptionPartial, TranslationChunk, TranslationSpeechCatchup

__all__ = ["CONTEXT_FINALS", "CONTEXT_MAX_FINALS", "FinalTranslation", "FinalsTranslator"]

log = logging.getLogger(__name__)

CONTEXT_FINALS = 2  # previous finals (with their translations) a translation's context keeps after a cut
CONTEXT_MAX_FINALS = 4  # the most it holds (the mt engine's chat prompt takes 4 pairs)
DEFAULT_BACKLOG = 8
#: committed words of a sentence not finished yet, since the last prime of it, that start the next prime (the
#: ``mt_prime_words`` setting's default; 0: none)
DEFAULT_PRIME_WORDS = 4


@dataclass(frozen=True)
class FinalTranslation:
    """One translated final: ``text`` in the translator's target, from ``source_text`` (the final's words) in
    ``source_language`` (None: not known); ``latency_ms``: the ``mt`` call; ``lag_ms``: from the end of the speech
    to the translation."""

    final: CaptionFinal
    text: str
    source_text: str
    source_language: str | None
    latency_ms: float
    lag_ms: int


class FinalsTranslator:
    """Translates caption finals into ``target`` through ``worker``'s ``mt`` engine, in order; see the module
    docstring. Run :meth:`run` as a session task.

    - ``emit``: where its events go (``translation.chunk``, the ``drop`` catch-ups, the first ``error``);
      ``speaker``: set on those events (app ``call``: whose speech this is).
    - ``now_ms``: the session clock of the finals' ``audio_end_ms``.
    - ``source_language``: the speaker's language when a final names none (None: ``auto``).
    - ``timeout_s``: per translation (``mt_timeout_s``); ``max_pending``: finals waiting (``room_mt_backlog``).
    - ``prime_words``: see :meth:`hint` (``mt_prime_words``; 0: hints are ignored).
    """

    @classmethod
    def from_settings(cls, settings: Any, worker: Any, target: str, emit: Callable[[ServerEvent], None],
                      now_ms: Callable[[], int], *, on_text: Callable[[FinalTranslation], None] | None = None,
                      speaker: dict[str, str] | None = None, source_language: str | None = None) -> FinalsTranslator:
        """A translator with the server's limits: ``mt_timeout_s`` (30 when unset or 0), ``room_mt_backlog``
        (:data:`DEFAULT_BACKLOG` when unset or 0) and ``mt_prime_words`` (:data:`DEFAULT_PRIME_WORDS` when unset;
        0 turns the primes off). ``source_language`` "auto" or None: each final's own language."""
        return cls(worker, target, emit, now_ms, on_text=on_text, speaker=speaker,
                   source_language=None if source_language in (None, "auto") else source_language,
                   timeout_s=float(getattr(settings, "mt_timeout_s", 30.0) or 30.0),
                   max_pending=int(getattr(settings, "room_mt_backlog", DEFAULT_BACKLOG) or DEFAULT_BACKLOG),
                   prime_words=int(getattr(settings, "mt_prime_words", DEFAULT_PRIME_WORDS)))

    def __init__(self, worker: Any, target: str, emit: Callable[[ServerEvent], None], now_ms: Callable[[], int], *,
                 on_text: Callable[[FinalTranslation], None] | None = None, speaker: dict[str, str] | None = None,
                 source_language: str | None = None, timeout_s: float = 30.0,
                 max_pending: int = DEFAULT_BACKLOG, engine: str = "mt",
                 prime_words: int = DEFAULT_PRIME_WORDS) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending!r}")
        if prime_words < 0:
            raise ValueError(f"prime_words must be >= 0, got {prime_words!r}")
        self.worker = worker
        self.target = target
        self.emit = emit
        self.now_ms = now_ms
        self.on_text = on_text
        self.speaker = speaker
        self.source_language = source_language
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self.engine = engine
        self.pending: WorkQueue[CaptionFinal] = WorkQueue(max_pending)
        self.context: list[tuple[str, str]] = []
        self.index = 0
        self.texts = 0
        self.dropped = 0
        self.errors = 0
        self.last_lag_ms = 0
        self.last_latency_ms = 0.0
        self._in_flight = False
        self._cut = False  # the last translation cut the context back
        self._source = source_language  # the language of the last final translated
        self.primes = self.primes_dropped = 0
        self.prime_words = prime_words
        self._said = ""  # the committed words of the sentence being said (its segment: _said_segment)
        self._said_segment: str | None = None
        self._said_language: str | None = None
        self._said_primed = 0  # how many of them the last prime computed
        self._translated_segment: str | None = None  # the last final's (a late partial of it is no hint)
        self._hinted = asyncio.Event()
        self.said_primes = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def _settle(self) -> None:
        if not self.pending and not self._in_flight:
            self._idle.set()

    async def drained(self) -> None:
        """Return once no final waits or is being translated (with :meth:`run` running)."""
        await self._idle.wait()

    def on_caption(self, event: CaptionPartial | CaptionFinal) -> None:
        """A caption of the source speech (non-blocking): a final is queued (:meth:`push`), a partial's committed
        words are a :meth:`hint` (partials are never translated: their words may still change)."""
        if isinstance(event, CaptionFinal):
            self.push(event)
        elif event.committed.strip():
            self.hint(event.committed, event.segment_id, event.language)

    def push(self, final: CaptionFinal) -> None:
        """Queue a final for translation (non-blocking); an empty one is ignored; past ``max_pending`` the oldest
        waiting final is dropped."""
        if not final.text.strip():
            return
        pushed_out = self.pending.put(final)
        self._idle.clear()
        if pushed_out is not None:
            self._announce_drop(pushed_out, "behind")

    def drop_oldest(self, reason: str) -> None:
        """Forget the oldest waiting final, telling the listeners (``translation.speech.catchup`` ``drop``)."""
        if self.pending:
            self._announce_drop(self.pending.popleft(), reason)

    def _announce_drop(self, old: CaptionFinal, reason: str) -> None:
        self.dropped += 1
        lag = max(0, self.now_ms() - old.audio_end_ms)
        self.emit(TranslationSpeechCatchup(action="drop", lag_ms=lag, skipped_text=old.text.strip(),
                                           audio_end_ms=old.audio_end_ms, speaker=self.speaker,
                                           segment_id=old.segment_id, reason=reason))
        self._settle()

    def hint(self, committed: str, segment_id: str, language: str | None = None) -> None:
        """The committed words of sentence ``segment_id`` (a caption partial's, in ``language`` when known;
        non-blocking): once ``prime_words`` more of them than the last prime of that sentence computed are known,
        and while no final waits, :meth:`run` has the engine compute the next translation's prompt up to them
        (:meth:`prime` with ``text``)."""
        if not self.prime_words or segment_id == self._translated_segment:
            return
        if segment_id != self._said_segment:
            self._said_segment, self._said_primed = segment_id, 0
        self._said = " ".join(committed.split())
        self._said_language = language or self._said_language
        if self._said_due():
            self._hinted.set()

    def _said_due(self) -> bool:
        return bool(self.prime_words) and len(self._said.split()) - self._said_primed >= self.prime_words

    def set_target(self, target: str) -> None:
        """Translate into ``target`` from the next final on (the context of another language is forgotten)."""
        if target != self.target:
            self.target = target
            self.context.clear()
            self._cut = False  # (nothing to compute ahead for an empty context)
            self._said_primed = 0

    def clear(self) -> None:
        """Forget the waiting finals (the owner stopped wanting them)."""
        self.pending.clear()
        self._settle()

    async def run(self) -> None:
        """Session task: translate the waiting finals in order, forever (priming the words said meanwhile)."""
        while True:
            await self._wait_for_a_final()
            final = self.pending.popleft()
            self._in_flight = True
            try:
                await self.translate(final)
                if self._cut and not self.pending and not self._said_due():  # (a waiting final's translation,
                    await self._prime_until_a_final()  # or a prime of the words said, computes it anyway)
            except AgentError as exc:
                self.errors += 1
                log.warning("text interpretation into %s failed: %s", self.target, exc)
                if self.errors == 1:
                    self.emit(error_event(exc))
            finally:
                self._in_flight = False
                self._settle()

    async def translate(self, final: CaptionFinal) -> FinalTranslation | None:
        """Translate one final now: emit its ``translation.chunk`` and hand it to ``on_text``; None when the
        engine gave no text. Raises the worker's ``AgentError``."""
        source = final.text.strip()
        if final.segment_id == self._said_segment:  # (its words, said and primed, are in the final)
            self._said, self._said_segment, self._said_primed = "", None, 0
        self._translated_segment = final.segment_id
        language = final.language or self.source_language
        self._source = language
        target = self.target
        started = time.perf_counter()
        result = await self.worker.call(self.engine, text_request(source, language, target, list(self.context)),
                                        timeout=self.timeout_s)
        text = str(getattr(result, "text", result) or "").strip()
        if not text or target != self.target:  # nothing, or the listener changed language meanwhile
            return None
        self.context.append((source, text))
        self._cut = len(self.context) > CONTEXT_MAX_FINALS
        if self._cut:
            del self.context[:-CONTEXT_FINALS]
        self.last_latency_ms = round((time.perf_counter() - started) * 1000, 1)
        self.last_lag_ms = max(0, self.now_ms() - final.audio_end_ms)
        self.texts += 1
        self.emit(TranslationChunk(index=self.index, action="EMIT", text=text, source_text=source,
                                   audio_start_ms=final.audio_start_ms, audio_end_ms=final.audio_end_ms,
                                   speaker=self.speaker, source_language=language, latency_ms=self.last_latency_ms))
        self.index += 1
        done = FinalTranslation(final, text, source, language, self.last_latency_ms, self.last_lag_ms)
        if self.on_text is not None:
            self.on_text(done)
        return done

    async def prime(self, text: str = "") -> None:
        """Have the engine compute the prompt the next translation starts with (its context, just cut back: no
        prefix of any earlier prompt; with ``text``, up to those first words of the next final) now, while the
        speaker is still talking (``ContextPrimeRequest``, to the engine's background twin where it has one:
        ``deliverable.prime_engine``). Raises the worker's ``AgentError``."""
        self._cut = False
        source = (self._said_language or self._source) if text else self._source  # (the final's, as it will be)
        await self.worker.call(prime_engine(self.worker, self.engine),
                               prime_request(source, self.target, list(self.context), text),
                               timeout=self.timeout_s)
        self.primes += 1
        self.said_primes += bool(text)

    async def _wait_for_a_final(self) -> None:
        """Return once a final waits; meanwhile prime the words said whenever :meth:`hint` has made it due."""
        while not self.pending:
            if self._said_due():
                self._said_primed = len(self._said.split())
                await self._prime_until_a_final(self._said)
                continue
            self._hinted.clear()
            arrived = asyncio.ensure_future(self.pending.wait())
            hinted = asyncio.ensure_future(self._hinted.wait())
            try:
                await asyncio.wait((arrived, hinted), return_when=asyncio.FIRST_COMPLETED)
            finally:
                arrived.cancel()
                hinted.cancel()

    async def _prime_until_a_final(self, text: str = "") -> None:
        """:meth:`prime` until a final arrives: then its translation computes the context itself, so the prime is
        given up (``primes_dropped``; one still queued never runs, one running finishes its batch unheard). A
        failure is logged only (nothing a listener misses: the next translation computes it)."""
        prime = asyncio.ensure_future(self.prime(text))
        arrived = asyncio.ensure_future(self.pending.wait())
        try:
            await asyncio.wait((prime, arrived), return_when=asyncio.FIRST_COMPLETED)
        finally:
            final_came = arrived.done() and not arrived.cancelled()  # (else the session ends)
            arrived.cancel()
            if not prime.done():
                prime.cancel()
                self.primes_dropped += final_came
            outcome = (await asyncio.gather(prime, arrived, return_exceptions=True))[0]
        if isinstance(outcome, AgentError):
            log.info("priming the translation context into %s failed: %s", self.target, outcome)
        elif isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
            raise outcome

    def stats(self) -> dict[str, Any]:
        return {"target": self.target, "texts": self.texts, "pending": len(self.pending), "dropped": self.dropped,
                "errors": self.errors, "primes": self.primes, "said_primes": self.said_primes,
                "primes_dropped": self.primes_dropped, "lag_ms": self.last_lag_ms,
                "latency_ms": self.last_latency_ms}
