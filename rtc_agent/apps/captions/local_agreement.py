"""LocalAgreement-2: commit the words two consecutive hypotheses agree on.

Each hypothesis is the recognizer's continuation after the words already committed (engines that force a prefix
give exactly that; for others :func:`strip_committed` removes the committed words first). The longest common
prefix of this continuation and the previous one is committed; the rest stays tentative. Committed words never
change. Words are compared case- and punctuation-insensitively, but the surface form of the newest hypothesis is
what gets committed.
"""

from __future__ import annotations

from rtc_agent.words import common_prefix

__all__ = ["LocalAgreement", "common_prefix", "strip_committed"]


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
