"""The apps' front end to the TTS engine: one request per clause through the worker, results in order.

:class:`SpeechSynthesizer` is what the voice agent and interpretation use: ``stream()`` takes the text as it is
generated (LLM deltas, translations), cuts it into clauses with a :class:`ClauseSplitter`, submits each clause to
the worker as soon as it is complete and yields the speech clause by clause, in order, so the first clause plays
while the rest of the answer is still being generated and synthesized. Closing the stream (barge-in) cancels the
clauses not yet synthesized.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any

from rtc_agent.engines.tts.base import Synthesis, SynthesisRequest
from rtc_agent.engines.tts.text import ClauseSplitter

__all__ = ["SpeechSynthesizer", "spoken_text"]

Speed = float | Callable[[], float]


class _End:
    """Queue sentinel: the producer is done (``error`` set when it failed)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class SpeechSynthesizer:
    """Synthesizes speech through a :class:`~rtc_agent.worker.Worker` engine (``engine``, default ``"tts"``).

    - ``timeout_s``: per clause, covering queueing and synthesis (``EngineError(code="engine_timeout")``).
    - ``lookahead``: how many synthesized or pending clauses may wait for the consumer; when they are all
      waiting, reading more text waits too (backpressure: at most ``lookahead + 2`` clauses are in flight).
    - ``voice``: default voice for requests (``None``: the engine's own).
    - ``language``: default ISO 639-1 language of the text (``None``: the engine's own); pick ``engine`` for it
      with :func:`rtc_agent.engines.tts.voice_for` (an engine that does not speak it fails each clause with
      ``unsupported_language``).

    Errors are the worker's: ``EngineError`` (with the engine's code, e.g. ``empty_text``), ``AtCapacity``.
    """

    def __init__(self, worker: Any, engine: str = "tts", *, timeout_s: float = 30.0, lookahead: int = 3,
                 voice: str | None = None, language: str | None = None) -> None:
        if lookahead < 1:
            raise ValueError(f"lookahead must be >= 1, got {lookahead!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.worker = worker
        self.engine = engine
        self.timeout_s = timeout_s
        self.lookahead = lookahead
        self.voice = voice
        self.language = language

    async def synthesize(self, text: str, *, speed: float = 1.0, voice: str | None = None,
                         language: str | None = None) -> Synthesis:
        """Speech for ``text`` in one request (send speakable text: see ``text.speakable``); ``voice`` and
        ``language`` default to the synthesizer's."""
        request = SynthesisRequest(text, speed=speed, voice=voice if voice is not None else self.voice,
                                   language=language if language is not None else self.language)
        return await self.worker.call(self.engine, request, timeout=self.timeout_s)

    def backlog_ms(self) -> float:
        """About how long a clause asked for now waits for its speech: the clauses queued and in flight on the
        engine, and this one, at the engine's mean time per clause; infinite while the engine is busy before it
        finished its first clause (its speed is unknown), 0 when it is idle then or the worker has no ``stats``."""
        stats = getattr(self.worker, "stats", None)
        row = stats().get(self.engine, {}) if callable(stats) else {}
        ahead = int(row.get("queue_depth") or 0) + int(row.get("in_flight") or 0)
        if not row.get("batches"):
            return float("inf") if ahead else 0.0
        return float(row.get("mean_run_ms") or 0.0) / max(1.0, float(row.get("mean_batch_size") or 1.0)) * (ahead + 1)

    async def stream(self, text: str | Iterable[str] | AsyncIterable[str], *, speed: Speed = 1.0,
                     voice: str | None = None, splitter: ClauseSplitter | None = None,
                     language: str | None = None) -> AsyncIterator[Synthesis]:
        """Yield one :class:`Synthesis` per clause of ``text`` (a string, or an iterable / async iterable of deltas),
        in order. ``Synthesis.text`` is the clause as spoken.

        ``speed`` is a number or a callable read when each clause is submitted (interpretation raises it while its
        speech lags). ``splitter`` defaults to a fresh ``ClauseSplitter()``. The text source is read concurrently
        with synthesis; an error from it, or from a clause, is raised here after the clauses before it were
        yielded. Closing the generator (``aclose()``, or cancelling the task iterating it) cancels the reading and
        every clause not yet yielded. Use ``contextlib.aclosing`` when you may stop early.
        """
        splitter = splitter or ClauseSplitter()
        queue: asyncio.Queue[asyncio.Task[Synthesis] | _End] = asyncio.Queue(maxsize=self.lookahead)
        voice = voice if voice is not None else self.voice
        language = language if language is not None else self.language

        def submit(clause: str) -> asyncio.Task[Synthesis]:
            current = speed() if callable(speed) else speed
            return asyncio.ensure_future(self.synthesize(clause, speed=current, voice=voice, language=language))

        async def enqueue(clause: str) -> None:
            task = submit(clause)
            try:
                await queue.put(task)  # waits while ``lookahead`` clauses are queued
            except asyncio.CancelledError:
                task.cancel()
                raise

        async def produce() -> None:
            try:
                async for delta in _deltas(text):
                    for clause in splitter.feed(delta):
                        await enqueue(clause)
                for clause in splitter.flush():
                    await enqueue(clause)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                await queue.put(_End(exc))
                return
            await queue.put(_End())

        producer = asyncio.ensure_future(produce())
        current: asyncio.Task[Synthesis] | None = None
        try:
            while True:
                item = await queue.get()
                if isinstance(item, _End):
                    if item.error is not None:
                        raise item.error
                    return
                current = item
                result = await item
                current = None
                yield result
        finally:
            pending: list[asyncio.Future[Any]] = [producer]
            if current is not None:
                pending.append(current)
            while not queue.empty():
                item = queue.get_nowait()
                if isinstance(item, asyncio.Task):
                    pending.append(item)
            for future in pending:
                future.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


async def _deltas(text: str | Iterable[str] | AsyncIterable[str]) -> AsyncIterator[str]:
    if isinstance(text, str):
        yield text
    elif isinstance(text, AsyncIterable):
        async for delta in text:
            yield delta
    else:
        for delta in text:
            yield delta


def spoken_text(clauses: Iterable[Synthesis], played_s: float) -> str:
    """The text heard when playback of ``clauses`` (in order, back to back) stopped after ``played_s`` seconds.

    For barge-in truncation (``conversation.item.truncated``): whole clauses that finished playing, plus the words
    of the interrupted clause in proportion to how much of its audio was played (a word counts once half of its
    characters' share of the audio was played). Approximate inside a clause: Piper does not report word timings.
    """
    words: list[str] = []
    remaining = max(0.0, played_s)
    for clause in clauses:
        if remaining <= 0:
            break
        duration = clause.duration_s
        if remaining >= duration:
            words.extend(clause.text.split())
            remaining -= duration
            continue
        fraction = remaining / duration if duration else 0.0
        total = len(clause.text)
        position = 0
        for word in clause.text.split():
            start = clause.text.index(word, position)
            position = start + len(word)
            if total and (start + len(word) / 2) / total <= fraction:
                words.append(word)
            else:
                break
        break
    return " ".join(words)
