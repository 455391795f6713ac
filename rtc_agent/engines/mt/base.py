"""The text-translation contract: the request the worker's ``mt`` engine takes, its answer, and the engine base.

A caller (a call room, the interpret app) sends ``await worker.call("mt", TextTranslateRequest(...))`` and gets a
:class:`TextTranslation`. The request checks itself at construction (non-empty text, known language codes:
``InvalidRequest``); the engine checks what depends on its settings and model (``mt_max_chars``, a target or
source the model cannot handle) and fails that one request with an ``EngineError`` of status 400 whose code says
why (``text_too_long``, ``unsupported_language``), which the worker hands to the caller unchanged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from rtc_agent.engines.mt.languages import AUTO, check_language
from rtc_agent.errors import EngineError, InvalidRequest
from rtc_agent.worker import run_each
from rtc_agent.worker.engine import deliver_early

__all__ = [
    "DEFAULT_MAX_CHARS", "ContextPrimeRequest", "TextTranslateRequest", "TextTranslation", "TextTranslationEngine",
]

DEFAULT_MAX_CHARS = 2000


@dataclass(frozen=True)
class TextTranslateRequest:
    """Translate ``text`` from ``source`` (an ISO 639-1 code, or ``"auto"``) into ``target``.

    ``context`` holds recent ``(source, translation)`` pairs of the same conversation, oldest first; an engine
    may use them to keep names and terms consistent, or ignore them. Raises ``InvalidRequest`` for text that is
    not a non-empty string, an unknown language, ``auto`` as target, or malformed context. Codes are stored
    lower-cased.
    """

    text: str
    source: str
    target: str
    context: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise InvalidRequest("text to translate must be a non-empty string", code="invalid_text", param="text")
        _check_conversation(self)

    @property
    def same_language(self) -> bool:
        """The source is the target: nothing to translate."""
        return self.source == self.target and self.source != AUTO


def _check_conversation(request: TextTranslateRequest | ContextPrimeRequest) -> None:
    """Check and normalise ``source``, ``target`` and ``context`` of a frozen request (``InvalidRequest``)."""
    object.__setattr__(request, "source", check_language(request.source, "source", allow_auto=True))
    object.__setattr__(request, "target", check_language(request.target, "target"))
    context = tuple(request.context)
    if not all(isinstance(p, tuple | list) and len(p) == 2 and all(isinstance(s, str) for s in p)
               for p in context):
        raise InvalidRequest("context must be (source, translation) string pairs", param="context")
    object.__setattr__(request, "context", tuple((str(a), str(b)) for a, b in context))


@dataclass(frozen=True)
class ContextPrimeRequest:
    """Prepare for the next translations of a conversation (``source`` -> ``target``) whose context will be
    ``context`` (as in :class:`TextTranslateRequest`): an engine that keeps computed prompt prefixes (the embedded
    LLM) computes this context's prompt now, while it would otherwise idle, so the next translation with it
    computes only its own text. ``text``, when not empty, is the start of that next text (the words a speaker has
    already said of a sentence not finished yet): the engine computes the prompt up to it, so the translation of
    the whole sentence computes only what was said after it (the prompt's start is reused as far as the two texts'
    tokens agree). The answer is a bool: whether the engine did anything (engines that keep nothing answer False at
    once). Checked as :class:`TextTranslateRequest` is."""

    source: str
    target: str
    context: tuple[tuple[str, str], ...] = ()
    text: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidRequest("the text a prime starts must be a string", code="invalid_text", param="text")
        _check_conversation(self)


@dataclass
class TextTranslation:
    """The translation of one request; ``engine`` names what made it (``ctranslate2:opus-mt-en-es``,
    ``openai:MODEL``, ``embedded:MODEL``)."""

    text: str
    engine: str


class TextTranslationEngine(ABC):
    """Base of ``mt`` engines (the worker's ``Engine`` contract): ``run_batch`` checks each request and calls
    :meth:`translate` for it; a failure fails only that request.

    - ``max_chars``: the longest ``text`` accepted (``mt_max_chars``); longer fails with ``text_too_long``.
    - ``targets``: the target languages the engine can produce (``None``: any language we know);
      ``sources``: the source languages it reads (``None``: any, ``auto`` included).
    - Text already in the target language comes back as it is, without a model call.
    """

    #: what ``TextTranslation.engine`` says; subclasses set it (after ``load`` when it names a model)
    label: str = "mt"
    targets: frozenset[str] | None = None
    sources: frozenset[str] | None = None

    def __init__(self, *, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.max_chars = max_chars

    def load(self, progress: Callable[[str], None]) -> None:  # noqa: B027 - optional hook
        """Load weights or check the server; blocking."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; blocking."""

    def check(self, request: TextTranslateRequest) -> None:
        """Raise the 400 ``EngineError`` for a request this engine refuses (see the module docstring)."""
        if len(request.text) > self.max_chars:
            raise EngineError(f"text to translate is {len(request.text)} characters, more than mt_max_chars "
                              f"({self.max_chars})", code="text_too_long", status=400)
        if self.targets is not None and request.target not in self.targets:
            raise EngineError(f"{self.label} cannot translate into {request.target!r}; it produces "
                              f"{', '.join(sorted(self.targets)) or 'nothing'}", code="unsupported_language",
                              status=400)
        if self.sources is not None and request.source not in self.sources:
            raise EngineError(f"{self.label} translates from {', '.join(sorted(self.sources))}, not "
                              f"{request.source!r}", code="unsupported_language", status=400)

    def run_batch(self, requests: list[object]) -> list[object]:
        """One result per request: for a translation a :class:`TextTranslation`, for a
        :class:`ContextPrimeRequest` its bool (:meth:`prime_many`), or the exception that failed that request.
        The translations run first (a prime only prepares later ones), and each one :meth:`translate_many`
        finishes before the others is handed on at once (``deliver_early``)."""
        primes = [i for i, r in enumerate(requests) if isinstance(r, ContextPrimeRequest)]
        others = [i for i, r in enumerate(requests) if not isinstance(r, ContextPrimeRequest)]
        results: list[object] = list(requests)
        checked = run_each([requests[i] for i in others], self._checked, kind=TextTranslateRequest)
        for i, result in zip(others, checked, strict=True):
            results[i] = result
        todo = [i for i in others if isinstance(results[i], TextTranslateRequest)]

        def settle(j: int, text: str | Exception) -> None:
            results[todo[j]] = text if isinstance(text, BaseException) else TextTranslation(text.strip(), self.label)

        def finished(j: int, text: str | Exception) -> None:
            settle(j, text)
            deliver_early(todo[j], results[todo[j]])

        texts = self.translate_many([results[i] for i in todo], finished) if todo else []  # type: ignore[misc]
        for j, text in enumerate(texts):
            if isinstance(results[todo[j]], TextTranslateRequest):  # not handed on early: what the caller gets
                settle(j, text)
        if primes:
            try:
                primed: list[object] = list(self.prime_many([requests[i] for i in primes]))  # type: ignore[misc]
            except Exception as exc:
                primed = [exc] * len(primes)
            for i, outcome in zip(primes, primed, strict=True):
                results[i] = outcome
        return results

    def prime_many(self, requests: list[ContextPrimeRequest]) -> list[bool]:
        """Compute what the next translations of each conversation will share (see :class:`ContextPrimeRequest`);
        whether each did anything. The default keeps nothing: all False."""
        return [False] * len(requests)

    def _checked(self, request: TextTranslateRequest) -> TextTranslateRequest | TextTranslation:
        self.check(request)
        return TextTranslation(request.text, self.label) if request.same_language else request

    def translate_many(self, requests: list[TextTranslateRequest],
                       finished: Callable[[int, str | Exception], object] | None = None) -> list[str | Exception]:
        """The translations of checked requests, in order (an ``Exception`` item fails one); ``finished(j, text)``,
        when given, may hear of request ``j``'s before the others are done. The default runs :meth:`translate` on
        each (and tells ``finished`` of each). Engines that batch natively override it."""
        out: list[str | Exception] = []
        for request in requests:
            try:
                out.append(self.translate(request))
            except Exception as exc:
                out.append(exc)
            if finished is not None:
                finished(len(out) - 1, out[-1])
        return out

    @abstractmethod
    def translate(self, request: TextTranslateRequest) -> str:
        """The translation of one checked request; blocking, in a worker thread. Errors are ``EngineError``."""
