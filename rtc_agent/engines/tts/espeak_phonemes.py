"""Text to Kokoro phonemes through the espeak-ng program (the Debian package ``espeak-ng``).

Kokoro reads IPA symbols from its own vocabulary. For the languages other than English and the CJK ones it was
trained on espeak-ng's IPA, with the multi-letter phonemes that espeak writes with a tie (``a^ɪ``) folded into
single symbols (``I``). :class:`EspeakPhonemizer` does that:

1. the text is cut at its punctuation (a mark followed by a space or the end: ``3.5`` stays one number), because
   espeak's ``--ipa`` output drops punctuation, and Kokoro pauses and intones by it;
2. each piece runs through ``espeak-ng -q --ipa --tie=^ -v <voice>`` (text on stdin, never on the command line;
   one process per piece, about 15 ms);
3. espeak's language-switch flags (``(en)``, ``(^f^r)``) and hyphens go, tied pairs become Kokoro's symbols, and
   every symbol that is not in the vocabulary is dropped and counted (:attr:`Phonemized.dropped`).

Thread-safe: no state besides the vocabulary.
"""

# ruff: noqa: RUF001, RUF002  (IPA symbols that look like Latin letters are the point of this module)
from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from rtc_agent.engines.assets import MissingAsset
from rtc_agent.engines.tts.base import language_code
from rtc_agent.errors import EngineError

__all__ = ["ESPEAK_VOICES", "EspeakPhonemizer", "Phonemized", "espeak_voice", "split_punctuation", "to_vocabulary"]

# ISO 639-1 language -> espeak-ng voice (the variant Kokoro's training data used: Parisian French, Brazilian
# Portuguese). Only languages whose espeak voice gives Kokoro good input are listed; see engines/tts/kokoro.py
# for the ones measured to be read well.
ESPEAK_VOICES: dict[str, str] = {
    "es": "es",
    "fr": "fr-fr",
    "de": "de",
    "it": "it",
    "pt": "pt-br",
    "hi": "hi",
}

# espeak's tied phonemes -> Kokoro's one-symbol spellings of them
_TIED = {
    "a^ɪ": "I", "a^ʊ": "W", "d^z": "ʣ", "d^ʒ": "ʤ", "e^ɪ": "A", "o^ʊ": "O", "ə^ʊ": "Q", "s^s": "S",
    "t^s": "ʦ", "t^ʃ": "ʧ", "ɔ^ɪ": "Y",
}
_TIED_RE = re.compile("|".join(re.escape(k) for k in sorted(_TIED, key=len, reverse=True)))
_LANGUAGE_FLAG = re.compile(r"\([a-z^\-]+\)")
# a clause mark: one or more of these followed by white space or the end of the text
_MARKS = ",;:.!?…"
_PIECE = re.compile(rf"(.*?)([{re.escape(_MARKS)}]+)(?=\s|$)|(.+)$", re.DOTALL)
_NOT_SPOKEN = str.maketrans({c: " " for c in "¿¡«»\"“”„‟()[]{}<>*_~|#"})


@dataclass(frozen=True, slots=True)
class Phonemized:
    """Phonemes for one text: ``phonemes`` uses only vocabulary symbols; ``dropped`` counts the symbols espeak
    wrote that the vocabulary lacks (by symbol)."""

    phonemes: str
    dropped: Counter[str] = field(default_factory=Counter)

    @property
    def dropped_count(self) -> int:
        return sum(self.dropped.values())


def espeak_voice(language: str) -> str | None:
    """The espeak-ng voice for an ISO 639-1 code (``es``, ``pt-BR`` and ``pt_br`` all read as their language), or
    ``None`` when the language is not one Kokoro reads through espeak."""
    return ESPEAK_VOICES.get(language_code(language))


def split_punctuation(text: str) -> list[tuple[str, str]]:
    """``text`` as ``(words, marks)`` pieces: ``marks`` are the clause punctuation after ``words`` (``", "``,
    ``"."``, ``"?!"`` or ``""`` at the end). Marks inside a word or number (``3.5``, ``e.g``) stay in the words;
    quotes, brackets and inverted marks are removed (espeak does not speak them either)."""
    pieces: list[tuple[str, str]] = []
    for match in _PIECE.finditer(" ".join(text.translate(_NOT_SPOKEN).split())):
        words = (match.group(1) if match.group(3) is None else match.group(3)).strip()
        marks = match.group(2) or ""
        if words or marks:
            pieces.append((words, marks))
    return pieces


def to_vocabulary(ipa: str, vocabulary: Mapping[str, int]) -> Phonemized:
    """espeak ``--ipa --tie=^`` output in Kokoro's symbols: language flags and hyphens removed, tied phonemes
    folded, white space collapsed to one space, symbols outside ``vocabulary`` dropped and counted."""
    text = _LANGUAGE_FLAG.sub("", ipa)
    text = _TIED_RE.sub(lambda m: _TIED[m.group(0)], text)
    text = " ".join(text.replace("^", "").replace("-", "").split())
    kept: list[str] = []
    dropped: Counter[str] = Counter()
    for symbol in text:
        if symbol in vocabulary:
            kept.append(symbol)
        else:
            dropped[symbol] += 1
    return Phonemized("".join(kept).strip(), dropped)


class EspeakPhonemizer:
    """Kokoro phonemes for text in a language espeak-ng speaks (see :data:`ESPEAK_VOICES`).

    - ``vocabulary``: Kokoro's symbol -> token id table (only its keys are used here).
    - ``executable``: the espeak-ng program (found on ``PATH``); ``timeout_s``: the most one espeak run may take.

    :meth:`check` raises ``MissingAsset`` when espeak-ng is not installed. :meth:`phonemize` raises
    ``EngineError`` ``unsupported_language`` (400) for a language without an espeak voice here and
    ``phonemizer_failed`` (500) when espeak fails or times out.
    """

    def __init__(self, vocabulary: Mapping[str, int], *, executable: str = "espeak-ng",
                 timeout_s: float = 10.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.vocabulary = vocabulary
        self.executable = executable
        self.timeout_s = timeout_s

    def check(self) -> str:
        """The path of the espeak-ng program; ``MissingAsset`` naming the package when it is not installed."""
        path = shutil.which(self.executable)
        if path is None:
            raise MissingAsset(f"the {self.executable!r} program is not installed (Debian/Ubuntu: apt-get install "
                               "espeak-ng); the Kokoro voice reads its phonemes")
        return path

    def phonemize(self, text: str, language: str) -> Phonemized:
        """Phonemes of ``text`` read in ``language`` (ISO 639-1), with its clause punctuation kept."""
        voice = espeak_voice(language)
        if voice is None:
            raise EngineError(f"no espeak-ng reading for language {language!r} here (known: "
                              f"{', '.join(sorted(ESPEAK_VOICES))})", code="unsupported_language", status=400)
        parts: list[str] = []
        dropped: Counter[str] = Counter()
        for words, marks in split_punctuation(text):
            piece = to_vocabulary(self._ipa(words, voice), self.vocabulary) if words else Phonemized("")
            dropped.update(piece.dropped)
            kept_marks = "".join(m for m in marks if m in self.vocabulary)
            dropped.update(m for m in marks if m not in self.vocabulary)
            if piece.phonemes or kept_marks:
                parts.append(piece.phonemes + kept_marks)
        return Phonemized(" ".join(parts).strip(), dropped)

    def _ipa(self, words: str, voice: str) -> str:
        try:
            done = subprocess.run([self.executable, "-q", "--ipa", "--tie=^", "-v", voice], input=words,
                                  capture_output=True, text=True, encoding="utf-8", timeout=self.timeout_s,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise EngineError(f"espeak-ng took longer than {self.timeout_s:g} s", code="phonemizer_failed",
                              status=500) from None
        except OSError as exc:
            raise EngineError(f"cannot run {self.executable}: {exc}", code="phonemizer_failed", status=500) from None
        if done.returncode != 0:
            raise EngineError(f"espeak-ng failed (exit {done.returncode}): {done.stderr.strip()[:200]}",
                              code="phonemizer_failed", status=500)
        return " ".join(done.stdout.split())
