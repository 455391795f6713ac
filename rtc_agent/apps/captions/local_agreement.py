"""LocalAgreement-2: commit the words two consecutive hypotheses agree on.

Each hypothesis is the recognizer's continuation after the words already committed (engines that force a prefix
give exactly that; for others :func:`strip_committed` removes the committed words first). The longest common
prefix of this continuation and the previous one is committed; the rest stays tentative. Committed words never
change. Words are compared case- and punctuation-insensitively, but the surface form of the newest hypothesis is
what gets committed.
"""

from __future__ import annotations

import difflib
import re

from rtc_agent.words import common_prefix, contains_run, normalized

__all__ = ["LocalAgreement", "common_prefix", "drop_echoed_tail", "drop_loops", "drop_overlap",
           "drop_repeated_sentences", "drop_unheard_echo", "loses_committed", "strip_committed",
           "with_committed_tail"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
#: Two sentences this alike (word sequence ratio) in a row are the decoder repeating itself.
REPEAT_SIMILARITY = 0.75
REPEAT_MIN_WORDS = 4
LOOP_MIN_WORDS = 3
OVERLAP_MAX_N = 5
#: A text's last words that repeat a run of its own earlier words, not right after it (:func:`drop_echoed_tail`): at
#: least this many, at least ``ECHO_MIN_DISTINCT`` of them different. Shorter echoes ("we're just saying some words
#: just saying") look like what people say ("it is what it is").
ECHO_MIN_WORDS = 4
ECHO_MIN_DISTINCT = 3
#: Shorter echoes go only where the partials show they were not said (:func:`drop_unheard_echo`): at most this many.
UNHEARD_ECHO_MAX_WORDS = 3
#: A final decode that keeps less than this share of the committed words, in fewer than this share of their count,
#: lost the utterance (:func:`loses_committed`); only where the partials committed ``LOST_MIN_COMMITTED`` words.
LOST_SHARE = 0.5
LOST_MIN_COMMITTED = 4


def drop_overlap(text: str, previous: str, *, min_n: int = 1, max_n: int = OVERLAP_MAX_N) -> str:
    """``text`` without a leading run of words that repeats the end of ``previous`` (the n-gram guard of
    WhisperLiveKit's ``HypothesisBuffer``): the longest n from ``max_n`` down to ``min_n`` whose last n words of
    ``previous`` equal the first n of ``text`` (case and punctuation aside). Never removes all of ``text``."""
    words, before = text.split(), normalized(previous.split())
    for n in range(min(max_n, len(words) - 1, len(before)), min_n - 1, -1):
        if n > 0 and normalized(words[:n]) == before[-n:]:
            return " ".join(words[n:])
    return text


def drop_loops(text: str, min_n: int = LOOP_MIN_WORDS) -> str:
    """``text`` cut where the decoder starts looping: a run of at least ``min_n`` words said again right after
    itself ("weasels have eaten our phone system weasels have eaten our phone system weasels") keeps its first
    time only, and what follows the repeat is dropped when it is the start of yet another copy. People do not say
    a phrase of three words or more twice in a row; Whisper does, in the padding after the speech."""
    words = text.split()
    norm = normalized(words)
    size = len(words)
    for start in range(size):
        for n in range(min_n, (size - start) // 2 + 1):
            if norm[start:start + n] == norm[start + n:start + 2 * n]:
                rest = norm[start + 2 * n:]
                tail = start + 2 * n
                if rest and rest == norm[start:start + len(rest)]:
                    tail = size  # the loop's unfinished third copy
                return drop_loops(" ".join(words[:start + n] + words[tail:]), min_n)
    return text


def drop_echoed_tail(text: str) -> str:
    """``text`` without a tail that echoes its own earlier words: Whisper hearing the utterance again in the
    padding after the speech ("...we've got a special edition of plat chat we've got a special edition of"). The
    tail goes when it is a run of ``ECHO_MIN_WORDS`` or more words (``ECHO_MIN_DISTINCT`` of them different) said
    earlier in ``text``; a repeat right after itself is :func:`drop_loops`' case. At most half of ``text`` goes."""
    words = text.split()
    norm = normalized(words)
    size = len(words)
    for k in range(size // 2, ECHO_MIN_WORDS - 1, -1):
        tail = norm[size - k:]
        if len(set(tail)) >= ECHO_MIN_DISTINCT and contains_run(norm[:size - k - 1], tail):  # not right before it
            return " ".join(words[:size - k])
    return text


def drop_unheard_echo(words: list[str], heard: list[str]) -> list[str]:
    """``words`` (a final decode) without the words it adds after ``heard`` (what partials that heard the whole
    utterance agreed on) when those are at most ``UNHEARD_ECHO_MAX_WORDS`` words repeating a run of ``heard``:
    the short echo :func:`drop_echoed_tail` leaves ("We're just saying some words just saying", where the partials
    heard "We're just saying some words" up to the speech's end). Unchanged when ``words`` does not start with
    ``heard`` or adds other words. The caller vouches that the partials heard the audio up to the speech's end."""
    size, k = len(heard), len(words) - len(heard)
    if not heard or common_prefix(words, heard) < size or not 0 < k <= UNHEARD_ECHO_MAX_WORDS:
        return words
    return words[:size] if contains_run(normalized(heard), normalized(words[size:])) else words


def drop_repeated_sentences(text: str) -> str:
    """``text`` without a sentence that repeats the one just before it ("A new release in the second week of
    March. The new release in the 2nd week of March."): at least ``REPEAT_MIN_WORDS`` words, alike by
    ``REPEAT_SIMILARITY`` or more."""
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if s]
    kept: list[str] = []
    for sentence in sentences:
        if kept:
            a, b = normalized(kept[-1].split()), normalized(sentence.split())
            alike = difflib.SequenceMatcher(a=a, b=b, autojunk=False).ratio()
            if min(len(a), len(b)) >= REPEAT_MIN_WORDS and alike >= REPEAT_SIMILARITY:
                continue
        kept.append(sentence)
    return " ".join(kept)


def with_committed_tail(words: list[str], committed: list[str]) -> list[str]:
    """``words`` (a final decode) with the committed words it stopped short of: when its last two words or more
    match committed words (case and punctuation aside) and committed words follow them, those follow here too.
    A final decode may end early (a fast, quiet phrase: "...there's some speakers" where the partials committed
    "...there's some speakers but"), and committed words were shown as settled (the final's last word loses a
    closing period or comma before them). A final that goes on past the match, or matches nothing at its end, is
    unchanged."""
    norm, before = normalized(words), normalized(committed)
    if not norm or not before:
        return words
    blocks = difflib.SequenceMatcher(a=before, b=norm, autojunk=False).get_matching_blocks()
    last = max((b for b in blocks if b.size), key=lambda b: b.b, default=None)
    if last is None or last.b + last.size != len(norm) or last.a + last.size >= len(before):
        return words
    if last.size < 2 and len(norm) > 1:
        return words
    return [*words[:-1], words[-1].rstrip(".,;:"), *committed[last.a + last.size:]]


def loses_committed(words: list[str], committed: list[str]) -> bool:
    """Whether ``words`` (a final decode) lost most of what the partials committed: at least ``LOST_MIN_COMMITTED``
    committed words, of which ``words`` keep (in order) less than ``LOST_SHARE``, with fewer than that share of
    their count. Beam search on a short utterance alone may collapse into a word or two ("Playback Playback" where
    two agreeing partials said "Playback of the list of people attending is"); a final that says the utterance in
    other words keeps about as many of them."""
    if len(committed) < LOST_MIN_COMMITTED or len(words) >= LOST_SHARE * len(committed):
        return False
    blocks = difflib.SequenceMatcher(a=normalized(committed), b=normalized(words), autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks) < LOST_SHARE * len(committed)


def strip_committed(words: list[str], committed: list[str]) -> list[str]:
    """The part of a whole-buffer hypothesis after the committed words (for engines without forced prefixes).

    When the hypothesis still starts with the committed words, they are cut exactly; when the recognizer changed
    its mind about them, the same number of words is cut so committed text is never repeated.
    """
    n = common_prefix(words, committed)
    return words[n:] if n == len(committed) else words[len(committed):]


class LocalAgreement:
    """Commit state of one utterance buffer."""

    def __init__(self) -> None:
        self.committed: list[str] = []
        self.previous: list[str] = []

    def update(self, continuation: list[str]) -> list[str]:
        """Feed one hypothesis (words after the committed ones); returns the words it newly commits."""
        n = common_prefix(self.previous, continuation)
        newly = continuation[:n]
        self.committed.extend(newly)
        self.previous = continuation[n:]
        return newly

    @property
    def tentative(self) -> list[str]:
        return self.previous

    def drop_committed(self, count: int) -> list[str]:
        """Remove the first ``count`` committed words (they went into a final caption); returns them."""
        head, self.committed = self.committed[:count], self.committed[count:]
        return head

    def reset(self) -> None:
        self.committed = []
        self.previous = []
