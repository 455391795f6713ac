"""Text translation by a chat model: the remote OpenAI-compatible one (``openai``) or the packaged LLM
(``embedded``), with one translation prompt (:func:`translation_messages`).

The chat engine is one of :mod:`rtc_agent.engines.llm`'s (``OpenAIChatEngine`` or ``SmolLMEngine``), run inside this
engine's worker thread; nothing here speaks HTTP or loads weights itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rtc_agent.engines.llm.engine import ChatEngine
from rtc_agent.engines.llm.messages import ChatRequest, ChatResult
from rtc_agent.engines.mt.base import DEFAULT_MAX_CHARS, TextTranslateRequest, TextTranslationEngine
from rtc_agent.engines.mt.languages import AUTO, LANGUAGE_NAMES
from rtc_agent.errors import EngineError

__all__ = ["ChatTranslationEngine", "clean_reply", "translation_messages"]

#: most context pairs a prompt carries (the newest ones)
MAX_CONTEXT_PAIRS = 4
_LABEL = re.compile(r"^\s*(?:translation|traducci[oó]n|traduction|traduzione)\s*(?:\([^)]*\))?\s*:\s*", re.I)


def translation_messages(request: TextTranslateRequest, *,
                         max_context: int = MAX_CONTEXT_PAIRS) -> list[dict[str, Any]]:
    """The chat of one translation: a system prompt naming both languages, the newest ``max_context`` context
    pairs as earlier user/assistant turns, then the text."""
    target = LANGUAGE_NAMES[request.target]
    source = "the language it is written in" if request.source == AUTO else LANGUAGE_NAMES[request.source]
    # a 0.5B model translates a long list of rules as if it were the text: keep the instruction short
    system = f"Translate the user's text from {source} into {target}. Answer with the {target} translation only."
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for src, tgt in request.context[-max_context:] if max_context else ():
        messages += [{"role": "user", "content": src}, {"role": "assistant", "content": tgt}]
    messages.append({"role": "user", "content": request.text})
    return messages


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


class ChatTranslationEngine(TextTranslationEngine):
    """An ``mt`` engine over a :class:`~rtc_agent.engines.llm.engine.ChatEngine` (``chat``, built by the factory,
    not loaded yet). ``kind`` prefixes the label (``openai:MODEL``, ``embedded:MODEL``); ``model`` is sent to a
    remote server (empty: the engine's own). Greedy decoding; at most ``32 + len(text)`` new tokens.

    A reply that ends for length, or is empty, fails the request (``EngineError`` ``mt_bad_output``).
    ``checkpoint``/``step_done`` pass through to the chat engine, so the worker's priority hooks reach it.
    """

    def __init__(self, chat: ChatEngine, *, kind: str, model: str = "", max_chars: int = DEFAULT_MAX_CHARS) -> None:
        super().__init__(max_chars=max_chars)
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
        return ChatRequest(messages=translation_messages(request), max_tokens=32 + len(request.text),
                           temperature=0.0, model=self.model or None)

    def translate(self, request: TextTranslateRequest) -> str:
        [result] = self.chat.run_batch([self.chat_request(request)])
        if isinstance(result, BaseException):
            raise result
        assert isinstance(result, ChatResult)
        text = clean_reply(result.text, request.text)
        if result.finish_reason == "length" or not text:
            why = "ran past its token limit" if text else "was empty"
            raise EngineError(f"{self.label}: the translation {why}", code="mt_bad_output")
        return text
