"""The scripted text translator: a worker engine of the ``mt`` kind (a :class:`TextTranslationEngine`) that answers
from a script, for code that calls ``worker.call("mt", TextTranslateRequest(...))``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from rtc_agent.engines.mt import ContextPrimeRequest, TextTranslateRequest, TextTranslationEngine

__all__ = ["ScriptedMT"]


class ScriptedMT(TextTranslationEngine):
    """Translates by ``answer(request)`` (default: ``"[es] text"``, the target in brackets before the source text);
    ``replies`` first, when given, are played in order (a ``str`` is the translation, an ``Exception`` fails that
    request). Records every request that reached :meth:`translate` in ``requests``, and every
``ContextPrimeRequest`` in ``primed`` (answered True, as an engine that keeps prompt prefixes does; ``prime_error``
fails them instead); ``calls`` is the order of both (``"translate"``/``"prime"``).

    The real base checks each request (``max_chars``, ``targets``: a set limits what it produces, ``None`` any);
    text already in the target language comes back unchanged without reaching the script. ``gate`` (set to a
    ``threading.Event``) makes each translation wait until it is set, ``prime_gate`` each prime: a test can hold them in
    flight.
    """

    label = "scripted"

    def __init__(self, *replies: str | Exception, answer: Callable[[TextTranslateRequest], str] | None = None,
                 targets: Iterable[str] | None = None, max_chars: int = 2000) -> None:
        super().__init__(max_chars=max_chars)
        self.replies = list(replies)
        self.answer = answer or (lambda r: f"[{r.target}] {r.text}")
        self.targets = frozenset(targets) if targets is not None else None
        self.requests: list[TextTranslateRequest] = []
        self.primed: list[ContextPrimeRequest] = []
        self.prime_error: Exception | None = None
        self.calls: list[str] = []
        self.gate: threading.Event | None = None
        self.prime_gate: threading.Event | None = None
        self._lock = threading.Lock()

    def translate(self, request: TextTranslateRequest) -> str:
        """The next scripted reply, or ``answer(request)``."""
        if self.gate is not None:
            self.gate.wait(30)
        with self._lock:
            self.requests.append(request)
            self.calls.append("translate")
            reply = self.replies.pop(0) if self.replies else None
        if isinstance(reply, Exception):
            raise reply
        return reply if reply is not None else self.answer(request)

    def prime_many(self, requests: list[ContextPrimeRequest]) -> list[bool]:
        with self._lock:
            self.primed += requests
            self.calls += ["prime"] * len(requests)
        if self.prime_gate is not None:
            self.prime_gate.wait(30)
        if self.prime_error is not None:
            raise self.prime_error
        return [True] * len(requests)
