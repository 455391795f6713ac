"""Text translation by a chat model: the remote OpenAI-compatible one (``openai``) or the packaged LLM
(``embedded``), with one translation prompt (:func:`translation_messages`).

The chat engine is one of :mod:`rtc_agent.engines.llm`'s (``OpenAIChatEngine`` or ``SmolLMEngine``), run inside this
engine's worker thread; nothing here speaks HTTP or loads weights itself.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from rtc_agent.engines.llm.engine import ChatEngine
from rtc_agent.engines.llm.messages import ChatRequest, ChatResult
from rtc_agent.engines.mt.base import (
    DEFAULT_MAX_CHARS,
    ContextPrimeRequest,
    TextTranslateRequest,
    TextTranslationEngine,
)
from rtc_agent.engines.mt.languages import AUTO, LANGUAGE_NAMES
from rtc_agent.errors import EngineError

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_BATCH", "ChatTranslationEngine", "clean_reply", "context_messages", "prime_messages", "token_limit",
    "translation_messages",
]

#: most context pairs a prompt carries (the newest ones)
MAX_CONTEXT_PAIRS = 4
#: most translations one batched chat call carries (the ``mt_max_batch`` default)
DEFAULT_MAX_BATCH = 4
_LABEL = re.compile(r"^\s*(?:translation|traducci[oó]n|traduction|traduzione)\s*(?:\([^)]*\))?\s*:\s*", re.I)


def translation_messages(request: TextTranslateRequest, *,
                         max_context: int = MAX_CONTEXT_PAIRS) -> list[dict[str, Any]]:
    """The chat of one translation: a system prompt naming both languages, the newest ``max_context`` context
    pairs as earlier user/assistant turns, then the text."""
    return [*context_messages(request, max_context=max_context), {"role": "user", "content": request.text}]


def context_messages(request: TextTranslateRequest | ContextPrimeRequest, *,
                     max_context: int = MAX_CONTEXT_PAIRS) -> list[dict[str, Any]]:
    """What every translation of ``request``'s conversation with its context starts with: the system prompt and
    the newest ``max_context`` context pairs (:func:`translation_messages` without the text)."""
    target = LANGUAGE_NAMES[request.target]
    source = "the language it is written in" if request.source == AUTO else LANGUAGE_NAMES[request.source]
    # a 0.5B model translates a long list of rules as if it were the text: keep the instruction short
    system = f"Translate the user's text from {source} into {target}. Answer with the {target} translation only."
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for src, tgt in request.context[-max_context:] if max_context else ():
        messages += [{"role": "user", "content": src}, {"role": "assistant", "content": tgt}]
    return messages


def prime_messages(request: ContextPrimeRequest) -> list[dict[str, Any]]:
    """What a prime computes: :func:`context_messages`, then the start of the next text as the user's turn when
    the request has one (the next translation's messages up to that text's first words)."""
    messages = context_messages(request)
    return [*messages, {"role": "user", "content": request.text}] if request.text.strip() else messages


def token_limit(text: str) -> int:
    """The most tokens a translation of ``text`` may take: 16 + 2/3 token per character of the source.

    A translation into es, fr or it takes 0.28-0.31 Qwen tokens per English character (median over the Asterisk
    prompts; at most 0.69, on short ones): the limit leaves twice that and more, while a reply that loops (a
    0.5B model now and then repeats a phrase until its limit) ends after a third of the tokens it took with
    ``32 + len(text)``, and with it the batch its row holds up.
    """
    return 16 + 2 * len(text) // 3


def clean_reply(reply: str, source_text: str) -> str:
    """The translation inside a chat reply: without a leading "Translation:" label, wrapping quotes, or lines past
    the source's own line count (a small model's notes)."""
    text = _LABEL.sub("", reply.strip())
    lines = [line for line in text.splitlines() if line.strip()]
    keep = max(1, len([line for line in source_text.splitlines() if line.strip()]))
    text = "\n".join(lines[:keep]).strip()
    if (len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'«»“”") or (text[:1] in "“«" and text[-1:] in "”»"):
        text = text[1:-1].strip()
    return text


def cut_loop(text: str, min_repeats: int = 3, max_unit: int = 12) -> str | None:
    """The text of a reply that ran to its token limit repeating itself, up to the end of the repeated phrase's
    first occurrence: a small model's greedy loop (``"la casa, la casa, la casa, la ca"`` -> ``"la casa,"``); None
    when its end is no phrase of 1-``max_unit`` words said ``min_repeats`` times in a row (the last one possibly
    cut short by the limit). Words are whitespace-separated and compared without case, and joined by single spaces."""
    original = text.split()
    words = [w.casefold() for w in original]
    best: int | None = None
    for unit in range(1, max_unit + 1):
        for tail in range(unit):  # words after the last whole repetition: the start of one more, cut by the limit
            end = len(words) - tail
            if end < min_repeats * unit:
                break
            phrase = words[end - unit:end]
            if tail and not (words[end:-1] == phrase[:tail - 1] and phrase[tail - 1].startswith(words[-1])):
                continue
            repeats = 1
            while end - (repeats + 1) * unit >= 0 and words[end - (repeats + 1) * unit:end - repeats * unit] == phrase:
                repeats += 1
            if repeats < min_repeats:
                continue
            start = end - repeats * unit
            while start > 0 and words[start - 1] == words[start - 1 + unit]:  # the loop began mid-phrase
                start -= 1
            keep = start + unit
            best = keep if best is None else min(best, keep)
    return " ".join(original[:best]) if best else None


class ChatTranslationEngine(TextTranslationEngine):
    """An ``mt`` engine over a :class:`~rtc_agent.engines.llm.engine.ChatEngine` (``chat``, built by the factory,
    not loaded yet). ``kind`` prefixes the label (``openai:MODEL``, ``embedded:MODEL``); ``model`` is sent to a
    remote server (empty: the engine's own). Greedy decoding; at most :func:`token_limit` new tokens.

    A reply that ends for length (the embedded engine ends one that loops early: ``stop_loops``) keeps its text up to
    its repeated phrase (:func:`cut_loop`) when it looped, else it fails the request (``EngineError``
    ``mt_bad_output``), as an empty reply does.
    ``checkpoint``/``step_done`` pass through to the chat engine, so the worker's priority hooks reach it.

    Batches: :meth:`translate_many` (what ``run_batch`` calls with the requests the worker handed over together)
    sends up to ``max_batch`` (``mt_max_batch``) translations as one ``chat.generate_many(requests)`` when the
    chat engine has that method (the embedded engine: one batched decode), else one chat call per translation.
    """

    def __init__(self, chat: ChatEngine, *, kind: str, model: str = "", max_chars: int = DEFAULT_MAX_CHARS,
                 max_batch: int = DEFAULT_MAX_BATCH) -> None:
        super().__init__(max_chars=max_chars)
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
        self.max_batch = max_batch
        self.chat = chat
        self.kind = kind
        self.model = model
        self.label = f"{kind}:{model or chat.model_name or 'default'}"
        if hasattr(chat, "checkpoint"):
            self.checkpoint = chat.checkpoint
            self.step_done = getattr(chat, "step_done", lambda: None)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in ("checkpoint", "step_done") and "chat" in self.__dict__:
            setattr(self.chat, name, value)

    def load(self, progress: Callable[[str], None]) -> None:
        self.chat.load(progress)
        self.label = f"{self.kind}:{self.model or self.chat.model_name or 'default'}"

    def close(self) -> None:
        self.chat.close()

    def chat_request(self, request: TextTranslateRequest) -> ChatRequest:
        return ChatRequest(messages=translation_messages(request), max_tokens=token_limit(request.text),
                           temperature=0.0, model=self.model or None, stop_loops=True)

    def translate(self, request: TextTranslateRequest) -> str:
        [result] = self.chat.run_batch([self.chat_request(request)])
        return self._reply_text(request, result)

    def translate_many(self, requests: list[TextTranslateRequest],
                       finished: Callable[[int, str | Exception], object] | None = None) -> list[str | Exception]:
        """See the class docstring: batches of at most ``max_batch`` through ``chat.generate_many`` when the chat
        engine has it (an error of a whole batch fails each of its requests), else one at a time. With
        ``finished``, the chat engine's ``on_result`` hands each translation on as its row ends."""
        many = getattr(self.chat, "generate_many", None)
        if many is None or len(requests) < 2:
            return super().translate_many(requests, finished)
        out: list[str | Exception] = []
        handed_on: dict[int, str | Exception] = {}  # request index -> the text ``finished`` was given
        for start in range(0, len(requests), self.max_batch):
            chunk = requests[start:start + self.max_batch]
            chats = [self.chat_request(r) for r in chunk]
            try:
                if finished is None:
                    results: list[Any] = list(many(chats))
                else:
                    def on_result(j: int, result: object, start: int = start, chunk: list = chunk) -> None:
                        handed_on[start + j] = self._text_or_error(chunk[j], result)
                        finished(start + j, handed_on[start + j])

                    results = list(many(chats, on_result=on_result))
                if len(results) != len(chunk):
                    raise EngineError(f"{self.label}: {len(results)} replies for {len(chunk)} requests")
            except Exception as exc:
                results = [exc] * len(chunk)
            out += [handed_on[start + j] if start + j in handed_on else self._text_or_error(request, result)
                    for j, (request, result) in enumerate(zip(chunk, results, strict=True))]
        return out

    def prime_many(self, requests: list[ContextPrimeRequest]) -> list[bool]:
        """With a chat engine that keeps computed prompts (``generate_many`` with a prefix cache: the embedded LLM),
        one batched call that reads each conversation's :func:`prime_messages` and writes one token (the
        prompt's keys and values stay in the engine's caches: its row cache for a batch, its prefix cache for a
        lone prompt, the paths the next translations of the same conversations take); all True. Else (a remote
        model) nothing: all False. (The chat template ends the prompt with the end of the last turn and the
        generation prompt, which the next prompt does not share; a prime that stopped at the text was tried: the
        finals after it took 9 % more decode steps over 32 sentences into three languages, their keys computed in
        a shorter prefill, which can take the engine's quantized short-input path, rounded otherwise.)"""
        many = getattr(self.chat, "generate_many", None)
        if many is None or not getattr(self.chat, "prefix_cache", False):
            return [False] * len(requests)
        for start in range(0, len(requests), self.max_batch):
            many([ChatRequest(messages=prime_messages(r), max_tokens=1, temperature=0.0, model=self.model or None)
                  for r in requests[start:start + self.max_batch]])
        return [True] * len(requests)

    def _text_or_error(self, request: TextTranslateRequest, result: object) -> str | Exception:
        """:meth:`_reply_text`, or the exception it raised."""
        try:
            return self._reply_text(request, result)
        except Exception as exc:
            return exc

    def _reply_text(self, request: TextTranslateRequest, result: object) -> str:
        """The translation in the chat ``result`` of ``request`` (raises the result when it is an exception)."""
        if isinstance(result, BaseException):
            raise result
        assert isinstance(result, ChatResult)
        text = clean_reply(result.text, request.text)
        if result.finish_reason == "length" and text:
            looped = cut_loop(text)
            if looped:
                log.info("%s: a translation looped until its token limit; kept it up to the repeated phrase",
                         self.label)
                return looped
        if result.finish_reason == "length" or not text:
            why = "ran past its token limit" if text else "was empty"
            raise EngineError(f"{self.label}: the translation {why}", code="mt_bad_output")
        return text
