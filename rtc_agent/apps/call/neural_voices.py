"""Which interpretation languages get the neural voice: :class:`NeuralVoiceSlots`, one per server.

Kokoro is one worker engine that synthesizes one text at a time for every language of every room. On a small CPU
it keeps one language in time beside recognition and translation, not three: with three it falls behind, its
texts go to the espeak-ng catch-up voice one by one (the voice of a language flips between the two), and the
CPU it spends on texts it then speaks late slows the translations of every language (README, SFU rooms). So at
most ``limit`` languages (:func:`~rtc_agent.engines.tts.languages.neural_voices`) hold the neural voice at once;
the interpretation pairs into a language share its slot (speakers of a room take turns), and a language past the
limit is spoken by espeak-ng from its first text until its pairs stop.
"""

from __future__ import annotations

import weakref
from typing import Any

from rtc_agent.engines.tts.languages import neural_voices

__all__ = ["NeuralVoiceSlots", "voice_slots"]


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
