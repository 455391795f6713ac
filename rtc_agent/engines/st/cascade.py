"""Cascade speech translation: streaming ASR (Whisper transcribe + LocalAgreement) then an LLM translating text.

Works for any language pair the LLM knows. Each turn the dialogue's audio is transcribed (the ``asr`` engine,
words committed by LocalAgreement-2 as in :class:`~rtc_agent.engines.st.whisper_stream.WhisperStream`); committed source
words wait until they end a clause (``. , ; : ? !``) or ``max_pending_words`` pile up, and are then translated by
the LLM in one chat turn: EMIT. Turns that commit no such text are WAITs and make no LLM call. A flush takes every
recognized word (the tentative ones too) and translates it.

The LLM is any chat engine registered with the worker (the ``st`` engine when ``--st-url`` points at an
OpenAI-compatible server, else the ``llm`` engine); the whole dialogue since the last cut travels in each call as
user source / assistant translation turns, and ``usage`` gives the token counts for the policy's budget rule.
"""

from __future__ import annotations

from typing import Any

from rtc_agent.engines.llm.messages import ChatRequest, ChatResult
from rtc_agent.engines.st.base import TranslateRequest, Translation, Turn, language_name
from rtc_agent.engines.st.whisper_stream import WhisperStream

__all__ = ["CascadeTranslator"]

_CLAUSE_END = (".", ",", ";", ":", "?", "!", "\u2026", "\u3002", "\uff0c", "\uff1b", "\uff1a", "\uff1f", "\uff01")


class CascadeTranslator:
    """A :class:`~rtc_agent.engines.st.base.SpeechTranslator`: ASR engine ``asr_engine`` + chat engine
    ``llm_engine`` in the worker. ``max_model_len`` is the LLM's context for the budget rule."""

    def __init__(self, worker: Any, *, asr_engine: str = "asr", llm_engine: str = "llm", model: str = "",
                 max_model_len: int | None = 8192, max_tokens: int = 160, max_pending_words: int = 12,
                 timeout_s: float = 60.0) -> None:
        self.worker = worker
        self.asr_engine = asr_engine
        self.llm_engine = llm_engine
        self.model = model
        self.max_model_len = max_model_len
        self.max_tokens = max_tokens
        self.max_pending_words = max_pending_words
        self.timeout_s = timeout_s
        self.name = f"cascade:{llm_engine}"
        self.source = WhisperStream("transcribe")
        self.pending_words: list[str] = []
        self.pairs: list[tuple[str, str]] = []  # (source, translation) of this dialogue
        self._language: str | None = None
        self.llm_calls = 0

    @property
    def pending(self) -> bool:
        return bool(self.pending_words or self.source.pending)

    def reset(self) -> None:
        self.source.reset()
        self.pending_words = []
        self.pairs = []

    def _ready(self, flush: bool) -> list[str]:
        """The pending words to translate now (up to the last clause end), or none."""
        if flush:
            return self.pending_words
        for i in range(len(self.pending_words) - 1, -1, -1):
            if self.pending_words[i].endswith(_CLAUSE_END):
                return self.pending_words[:i + 1]
        return self.pending_words if len(self.pending_words) >= self.max_pending_words else []

    def chat_request(self, segment: str, source: str | None, target: str) -> ChatRequest:
        src, tgt = language_name(source), language_name(target)
        messages: list[dict[str, Any]] = [{"role": "system", "content": (
            f"You translate live speech from {src} into {tgt}. Each user message is the next piece of the "
            f"transcript; reply with its {tgt} translation only, continuing the earlier replies, nothing else.")}]
        for src_text, tgt_text in self.pairs:
            messages += [{"role": "user", "content": src_text}, {"role": "assistant", "content": tgt_text}]
        messages.append({"role": "user", "content": segment})
        return ChatRequest(messages=messages, max_tokens=self.max_tokens, temperature=0.0, model=self.model or None)

    async def translate(self, request: TranslateRequest) -> Translation:
        if request.source_language != self._language:
            self._language = request.source_language
            self.source.set_language(request.source_language)
        turns = list(request.history)
        if len(request.audio):
            turns.append(Turn(request.audio, request.start_ms, request.end_ms))
        asr_request = self.source.build(turns)
        new_words: list[str] = []
        if asr_request is not None:
            transcript = await self.worker.call(self.asr_engine, asr_request, timeout=self.timeout_s)
            new_words = self.source.apply(transcript, request.end_ms, flush=request.flush_mode)
        self.pending_words.extend(new_words)
        ready = self._ready(request.flush)
        source_text = " ".join(new_words)
        if not ready:
            return Translation("", source_text=source_text)
        segment = " ".join(ready)
        self.llm_calls += 1
        result: ChatResult = await self.worker.call(
            self.llm_engine, self.chat_request(segment, self.source.language, request.target_language),
            timeout=self.timeout_s)
        del self.pending_words[:len(ready)]
        text = result.text.strip()
        self.pairs.append((segment, text))
        usage = result.usage
        return Translation(text=text, source_text=source_text,
                           prompt_tokens=usage.prompt_tokens if usage else 0,
                           completion_tokens=usage.completion_tokens if usage else 0,
                           stop_reason=result.finish_reason)
