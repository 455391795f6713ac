"""Remote speech translation: an OpenAI-compatible ``/v1/chat/completions`` server with audio input (vLLM serving
a speech LLM such as Hy-SimulMT, Qwen2-Audio or Qwen2.5-Omni), driven the SimulInfer way.

Every turn sends the whole dialogue as a multi-turn chat: a system message with the instructions, then for each
earlier chunk a user message with its audio and an assistant message with what was emitted after it (empty for a
WAIT), then a user message with the new chunk's audio. The model answers what it can commit now; empty = WAIT.
A flush sends the backlog (the WAIT chunks since the last answer) as one audio part with an instruction to
translate everything not yet translated.

- Audio parts: ``{"type": "input_audio", "input_audio": {"data": <base64 WAV>, "format": "wav"}}`` (OpenAI's form,
  which vLLM accepts), or ``{"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,..."}}`` with
  ``audio_part="audio_url"``.
- Continuation prefix: with ``prefix`` set, the request ends with an assistant message holding the prefix and
  ``continue_final_message: true, add_generation_prompt: false`` (vLLM's chat-template switches), so the model
  continues it; earlier assistant turns carry the same prefix so the dialogue is consistent.
- Modes: ``target`` (the reply is the translation only) and ``source+target`` (the reply is ``SRC: <source
  transcript>`` then a line ``TGT: <translation or nothing>``; the prefix defaults to ``SRC:``).
- Tokens: ``usage.prompt_tokens`` / ``usage.completion_tokens`` of each response; ``finish_reason`` is the stop
  reason (``length`` makes the policy cut the context).

The HTTP exchange is the LLM engine's (:class:`~rtc_agent.engines.llm.openai.OpenAIChatEngine`), registered with
the worker as the ``st`` engine; this class builds the messages, parses the answers and keeps no model state.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from rtc_agent.engines.asr.openai import wav_bytes
from rtc_agent.engines.llm.messages import ChatRequest, ChatResult
from rtc_agent.engines.st.base import TranslateRequest, Translation, Turn, language_name

__all__ = ["MODES", "ChatTranslator"]

MODES = ("target", "source+target")
SOURCE_TAG = "SRC:"
TARGET_TAG = "TGT:"


def _system_prompt(mode: str, source: str | None, target: str) -> str:
    src, tgt = language_name(source), language_name(target)
    text = (
        f"You are a simultaneous interpreter from {src} into {tgt}. The user's speech arrives in short audio "
        f"chunks, one per message. After each chunk, reply with the {tgt} translation of the new speech that you "
        "can already translate with confidence, continuing your earlier replies without repeating them. If you "
        "need to hear more before translating, reply with nothing."
    )
    if mode == "source+target":
        text += (f" Format every reply as two lines: '{SOURCE_TAG} ' followed by the transcript of the new "
                 f"speech, then '{TARGET_TAG} ' followed by the translation (or nothing).")
    return text


FLUSH_INSTRUCTION = ("The speaker has paused or stopped. Translate everything said so far that you have not "
                     "translated yet, completely, now.")


class ChatTranslator:
    """A :class:`~rtc_agent.engines.st.base.SpeechTranslator` over a chat-completions engine in the worker.

    - ``engine``: the worker engine name (``st``); it takes :class:`~rtc_agent.engines.llm.base.ChatRequest` and
      returns :class:`~rtc_agent.engines.llm.base.ChatResult` (the LLM engine contract).
    - ``mode``: ``target`` or ``source+target``; ``prefix``: the continuation prefix (``None``: none in target
      mode, ``SRC:`` in source+target mode).
    - ``max_model_len``: the model's context in tokens (the policy's budget rule); ``max_tokens`` per answer.
    - ``system_prompt``: replaces the built-in instructions (``{source}``/``{target}`` are filled in).

    Errors are the worker's and the chat engine's (``EngineError`` with codes such as ``llm_unreachable``,
    ``llm_http_error``, ``engine_timeout``).
    """

    pending = False  # the model decides itself what to hold back; the policy flushes its WAIT backlog

    def __init__(self, worker: Any, engine: str = "st", *, model: str = "", mode: str = "target",
                 prefix: str | None = None, max_model_len: int | None = 8192, max_tokens: int = 128,
                 temperature: float | None = 0.0, audio_part: str = "input_audio", system_prompt: str | None = None,
                 timeout_s: float = 60.0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if audio_part not in ("input_audio", "audio_url"):
            raise ValueError(f"audio_part must be input_audio or audio_url, got {audio_part!r}")
        if max_model_len is not None and max_model_len < 512:
            raise ValueError(f"max_model_len must be at least 512 tokens, got {max_model_len}")
        self.worker = worker
        self.engine = engine
        self.model = model
        self.mode = mode
        self.prefix = (SOURCE_TAG if mode == "source+target" else "") if prefix is None else prefix
        self.max_model_len = max_model_len
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.audio_part = audio_part
        self.system_prompt = system_prompt
        self.timeout_s = timeout_s
        self.name = f"chat:{model}" if model else "chat"
        self.calls = 0

    def reset(self) -> None:
        """Nothing to forget: the dialogue travels in each request."""

    # --- messages -------------------------------------------------------------------------------------------

    def audio_content(self, audio: np.ndarray) -> dict[str, Any]:
        data = base64.b64encode(wav_bytes(audio)).decode("ascii")
        if self.audio_part == "audio_url":
            return {"type": "audio_url", "audio_url": {"url": f"data:audio/wav;base64,{data}"}}
        return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}

    def _assistant_text(self, turn: Turn) -> str:
        if self.mode == "source+target":
            body = f"{SOURCE_TAG} {turn.source_text}".rstrip() + f"\n{TARGET_TAG} {turn.text}".rstrip()
            return body if not self.prefix or body.startswith(self.prefix) else self.prefix + " " + body
        return (self.prefix + " " + turn.text).strip() if self.prefix else turn.text

    def messages(self, request: TranslateRequest) -> list[dict[str, Any]]:
        """The chat for one turn (public for tests and debugging)."""
        system = self.system_prompt or _system_prompt(self.mode, request.source_language, request.target_language)
        system = system.replace("{source}", language_name(request.source_language)).replace(
            "{target}", language_name(request.target_language))
        out: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for turn in request.history:
            out.append({"role": "user", "content": [self.audio_content(turn.audio)]})
            out.append({"role": "assistant", "content": self._assistant_text(turn)})
        content: list[dict[str, Any]] = []
        if len(request.audio):
            content.append(self.audio_content(request.audio))
        if request.flush:
            content.append({"type": "text", "text": FLUSH_INSTRUCTION})
        if content:
            out.append({"role": "user", "content": content})
        if self.prefix:
            out.append({"role": "assistant", "content": self.prefix})
        return out

    def chat_request(self, request: TranslateRequest) -> ChatRequest:
        extra: dict[str, Any] = {}
        if self.prefix:
            extra = {"continue_final_message": True, "add_generation_prompt": False}
        return ChatRequest(messages=self.messages(request), max_tokens=self.max_tokens, temperature=self.temperature,
                           model=self.model or None, extra=extra)

    # --- answers --------------------------------------------------------------------------------------------

    def parse(self, text: str) -> tuple[str, str | None]:
        """``(translation, source or None)`` of a reply (the continuation after the prefix)."""
        body = text.strip()
        if self.mode == "target":
            return body, None
        if self.prefix and not self.prefix.startswith(SOURCE_TAG) and body.startswith(self.prefix):
            body = body[len(self.prefix):].strip()
        body = body.removeprefix(SOURCE_TAG).strip()
        source, sep, target = body.partition(TARGET_TAG)
        if not sep:
            return "", source.strip()
        return target.strip(), source.strip()

    async def translate(self, request: TranslateRequest) -> Translation:
        self.calls += 1
        result: ChatResult = await self.worker.call(self.engine, self.chat_request(request), timeout=self.timeout_s)
        text, source = self.parse(result.text)
        usage = result.usage
        return Translation(
            text=text, source_text=source,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            stop_reason=result.finish_reason,
        )
