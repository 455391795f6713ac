"""The speech-translation contract between the interpretation policy and the engines behind it.

The SimulInfer policy (:mod:`rtc_agent.apps.interpret.policy`) owns the dialogue: every turn it hands a
:class:`SpeechTranslator` the whole history (every audio chunk since the last context cut with the translation
emitted after it) plus the new chunk, and the translator answers what it can commit now: non-empty text is an EMIT,
empty text a WAIT. A ``flush`` request asks for everything not yet translated, at once.

Translators are per-session objects (they may keep state between turns, e.g. the previous hypothesis for
LocalAgreement) that make their model calls through the worker, so they never block the event loop and never load
a model themselves. ``reset()`` is called on a context cut: it clears the dialogue state only (a detected language,
for example, survives).

All audio is float32 mono at 16 kHz in -1..1; all positions are ms on the session's source clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from rtc_agent.engines.languages import LANGUAGE_NAMES, language_name

__all__ = [
    "LANGUAGE_NAMES",
    "SAMPLE_RATE",
    "SpeechTranslator",
    "TranslateRequest",
    "Translation",
    "Turn",
    "estimate_tokens",
    "language_name",
]

SAMPLE_RATE = 16000


@dataclass
class Turn:
    """One audio chunk of the dialogue and what was emitted after it.

    ``text`` is the translation emitted for this turn (an EMIT, or a flush that ended at this turn), ``""`` for a
    WAIT. ``source_text`` is the recognized source speech reported with it, when the engine gives one.
    """

    audio: np.ndarray
    start_ms: int
    end_ms: int
    text: str = ""
    source_text: str = ""
    flushed: bool = False

    @property
    def duration_ms(self) -> int:
        return len(self.audio) * 1000 // SAMPLE_RATE


@dataclass(frozen=True)
class TranslateRequest:
    """One policy turn.

    - ``history``: every earlier turn of the dialogue (since the last cut), oldest first.
    - ``audio`` (``start_ms``..``end_ms``): the new chunk; for a flush, the backlog (the audio of the WAIT turns
      since the last answer, concatenated; may be empty when only the engine's own pending text is left) and
      ``history`` holds the turns before it.
    - ``flush``: translate the backlog now, without waiting for more audio. ``final``: the speech ended (end of
      audio, a long silence, or a context cut follows): say everything, even an unfinished sentence. A flush that
      is not final (``empty_chunks``) may keep an unfinished last sentence pending.
    - ``source_language``: ``None`` means detect it; ``target_language`` a language code.
    - ``detect_language``: report the language detector's ranking (``Translation.extra["language_probs"]``) even
      when ``source_language`` is given (the caller's language rule watches for a switch). Engines that cannot
      ignore it.
    """

    history: tuple[Turn, ...]
    audio: np.ndarray
    start_ms: int
    end_ms: int
    source_language: str | None = None
    target_language: str = "en"
    flush: bool = False
    final: bool = False
    detect_language: bool = False

    @property
    def flush_mode(self) -> str | None:
        """``None``, ``"partial"`` or ``"final"`` (see ``flush`` and ``final``)."""
        if not self.flush:
            return None
        return "final" if self.final else "partial"

    @property
    def duration_ms(self) -> int:
        return len(self.audio) * 1000 // SAMPLE_RATE


@dataclass
class Translation:
    """A translator's answer to one turn.

    ``text`` empty means WAIT. ``prompt_tokens``/``completion_tokens`` are the model's own counts where it reports
    them (remote engines: ``usage``), estimates otherwise. ``stop_reason`` is the model's finish reason (``stop``,
    ``length``, ...); ``length`` makes the policy cut the context. ``extra`` may hold ``language`` (the source
    language of this answer), ``language_probs`` (the detector's ranking ``[(code, prob), ...]`` of a fresh decode,
    most likely first) and ``language_audio_s`` (the seconds of audio that decode judged).
    """

    text: str
    source_text: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stop_reason: str | None = "stop"
    extra: dict[str, object] = field(default_factory=dict)


@runtime_checkable
class SpeechTranslator(Protocol):
    """What the policy needs from an engine.

    - ``name``: reported in ``session.created`` and stats.
    - ``max_model_len``: context length in tokens for the policy's budget rule (``None``: no budget).
    - ``pending``: True when the translator holds text it heard but has not emitted yet (a flush would say more).
    - ``translate(request)``: one turn; raises :class:`~rtc_agent.errors.AgentError` subclasses on failure.
    - ``reset()``: forget the dialogue (a context cut).
    """

    name: str
    max_model_len: int | None

    @property
    def pending(self) -> bool: ...

    async def translate(self, request: TranslateRequest) -> Translation: ...

    def reset(self) -> None: ...


def estimate_tokens(text: str) -> int:
    """A rough token count (about 4 UTF-8 bytes per token) for engines that do not report one."""
    size = len(text.strip().encode())
    return 0 if size == 0 else max(1, round(size / 4))
