"""Which interpretation languages get the neural voice: :class:`NeuralVoiceSlots`, one per server.

Kokoro is one worker engine that synthesizes one text at a time for every language of every room. On a small CPU
it keeps one language in time beside recognition and translation, not three: with three it falls behind, its
texts go to the espeak-ng catch-up voice one by one (the voice of a language flips between the two), and the
CPU it spends on texts it then speaks late slows the translations of every language (README, SFU rooms). So at
most ``limit`` languages (:func:`~rtc_agent.engines.tts.languages.neural_voices`) hold the neural voice at once,
server-wide: the call rooms' interpretation pairs and the ``interpret`` app's sessions alike. The speakers into a
language share its slot (a room's speakers take turns; two interpret sessions into one language are two holders of
it), and a language past the limit is spoken by espeak-ng from its first text until its speakers stop
(:func:`claim_voice`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

from rtc_agent.engines.tts.base import language_code
from rtc_agent.engines.tts.languages import neural_voices
from rtc_agent.engines.tts.stream import SpeechSynthesizer

__all__ = ["NeuralVoiceSlots", "claim_voice", "voice_slots"]


class NeuralVoiceSlots:
    """At most ``limit`` languages hold the neural voice; each holder counts its pairs."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.limit = limit
        self.held: dict[str, int] = {}  # language -> pairs speaking it with the neural voice

    def acquire(self, language: str) -> bool:
        """True when a pair into ``language`` may use the neural voice (then :meth:`release` it once)."""
        if language not in self.held and len(self.held) >= self.limit:
            return False
        self.held[language] = self.held.get(language, 0) + 1
        return True

    def release(self, language: str) -> None:
        """One pair into ``language`` that :meth:`acquire` admitted has stopped."""
        count = self.held.get(language, 0) - 1
        if count > 0:
            self.held[language] = count
        else:
            self.held.pop(language, None)


_slots: weakref.WeakKeyDictionary[Any, NeuralVoiceSlots] = weakref.WeakKeyDictionary()


def voice_slots(worker: Any, settings: Any) -> NeuralVoiceSlots:
    """The server's slots: one per ``worker`` (a server has one), sized by ``settings`` when first asked."""
    slots = _slots.get(worker)
    if slots is None:
        slots = _slots[worker] = NeuralVoiceSlots(neural_voices(settings))
    return slots


def claim_voice(worker: Any, settings: Any, language: str, voice: SpeechSynthesizer,
                fallback: SpeechSynthesizer | None,
                ) -> tuple[SpeechSynthesizer, SpeechSynthesizer | None, Callable[[], None] | None]:
    """The voice of a speaker into ``language`` whose own voice is ``voice`` (``fallback``: the espeak-ng voice
    behind a neural one, :func:`~rtc_agent.apps.interpret.speech.catchup_synthesizer`; None: not a neural voice):
    ``(voice, fallback, release)`` when the language holds a neural voice slot (``release`` gives it back once the
    speaker stops), else ``(fallback, None, None)``: espeak-ng from the first text. A voice without a fallback
    takes no slot: ``(voice, None, None)``."""
    if fallback is None:
        return voice, None, None
    slots, code = voice_slots(worker, settings), language_code(language)
    if slots.acquire(code):
        return voice, fallback, functools.partial(slots.release, code)
    return fallback, None, None
