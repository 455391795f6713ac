"""Text utilities for speech output: turn a growing stream of (LLM or translation) text into speakable clauses.

Both apps that speak use them: the voice agent feeds the LLM's deltas into a :class:`ClauseSplitter` and sends
each clause to the TTS engine as soon as it is complete (first audio leaves after the first clause, not after the
whole answer); interpretation speaks each emitted translation through :func:`speakable` or the same splitter.

Rules (see :class:`ClauseSplitter` for the details):

- a clause ends at a sentence end (``. ! ? …`` followed by whitespace; CJK full stops and full-width ``! ?``
  anywhere), at a newline, and, once the clause is long enough, at ``, ; :`` followed by whitespace (their CJK
  forms anywhere);
- numbers (``3.5``, ``1,000``, ``10:30``), abbreviations (``e.g.``, ``Dr.``, ``Mr.``), initials (``J. Smith``) and
  list markers (``1.``) never end a clause; ``etc.``, ``a.m.``, ``U.S.`` end one only before a capital letter;
- a clause never exceeds ``max_chars`` (cut at the last space), so nothing grows without bound;
- clauses come out cleaned: markdown (``*``, ``_`` emphasis, ``#`` headers, backticks and code fences, ``>`` quotes,
  list bullets, links ``[text](url)`` → ``text``, tables, rules) and emoji are dropped, whitespace is collapsed.
  Clauses that are empty after cleaning are not returned.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["ClauseSplitter", "speakable", "split_clauses"]

_SENTENCE_END = ".!?…"
_CJK_SENTENCE_END = "\u3002\uff01\uff1f"  # ideographic full stop, full-width ! and ?
_SOFT_BREAK = ",;:"
_CJK_SOFT_BREAK = "\uff0c\u3001\uff1b\uff1a"  # full-width comma, ideographic comma, full-width ; and :
_CLOSERS = "\"')]}\u00bb\u201d\u2019*_`"  # closing quotes/brackets and markdown emphasis that may follow a sentence end
_OPENERS = "\"'([{\u00ab\u201c\u2018*_`"

# Abbreviations (lower case, without the final dot) that never end a sentence.
_NEVER_END = frozenset({
    "mr", "mrs", "ms", "mx", "dr", "prof", "st", "mt", "gen", "col", "capt", "lt", "sgt", "rev", "hon", "gov",
    "sen", "rep", "pres", "e.g", "i.e", "eg", "ie", "vs", "cf", "approx", "incl", "ca",
})
# ... that do not end a sentence before a number ("No. 5", "p. 12", "Fig. 3"), and do otherwise ("I said no.").
_BEFORE_NUMBER = frozenset({"no", "nos", "vol", "p", "pp", "ch", "sec", "fig", "figs", "art"})
# ... that often end a sentence: they end one when the next word starts with a capital letter.
_MAYBE_END = frozenset({
    "etc", "a.m", "p.m", "am", "pm", "inc", "ltd", "co", "corp", "u.s", "u.k", "e.u", "u.n", "sr", "jr", "ft",
    "min", "max", "est", "avg", "al", "dept", "i",
})

_FENCE = re.compile(r"```[^\s`]*|~~~[^\s~]*")
_FENCED_BLOCK = re.compile(r"^[ \t]*(```|~~~).*?(?:^[ \t]*\1[^\n]*$|\Z)", re.DOTALL | re.MULTILINE)
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]]*)\]\([^)\s]*\)")
_LINE_MARKERS = re.compile(r"^\s*(?:>\s*)*(?:#{1,6}\s+|[-*+•]\s+)?")
_RULE = re.compile(r"(?:^|\s)[-=_*]{3,}(?=\s|$)")
_EMPHASIS_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_+|_+(?![0-9A-Za-z])")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,;:.!?…])")
_DROP_CHARS = str.maketrans("", "", "*#`|~")
_KEEP_SYMBOLS = frozenset("°")


def _drop_symbols(text: str) -> str:
    """Drop emoji and pictographs (Unicode category So/Cs), variation selectors and zero-width joiners."""
    out = []
    for ch in text:
        if ch in _KEEP_SYMBOLS:
            out.append(ch)
            continue
        cat = unicodedata.category(ch)
        if cat in ("So", "Cs", "Co") or ch in "\u200d\ufe0e\ufe0f":
            continue
        if cat.startswith("C") and ch not in "\t\n\r":
            continue  # control and format characters
        out.append(ch)
    return "".join(out)


def speakable(text: str, *, line_start: bool = True) -> str:
    """``text`` with everything that should not be spoken removed, whitespace collapsed to single spaces.

    Markdown symbols (``*``, ``#``, backticks, code fences, ``~``, ``|``), underscores used for emphasis (not the one
    inside ``snake_case``), links (their text is kept), horizontal rules and emoji are dropped. With
    ``line_start`` (the text begins a line) a leading list bullet, header or quote marker is dropped too; numbered
    list markers (``1.``) are kept, they read well. Fenced code blocks (```` ``` ```` ... ```` ``` ````, closed or
    not) are dropped whole: code is not read aloud. Returns ``""`` when nothing speakable is left.
    """
    text = _FENCED_BLOCK.sub(" ", text)
    lines = []
    for line in text.splitlines() or [""]:
        if line_start or lines:
            line = _LINE_MARKERS.sub("", line, count=1)
        line = _FENCE.sub(" ", line)
        line = _IMAGE_OR_LINK.sub(r"\1", line)
        line = _RULE.sub(" ", line)
        line = _EMPHASIS_UNDERSCORE.sub("", line)
        line = line.translate(_DROP_CHARS)
        lines.append(line)
    cleaned = _drop_symbols(" ".join(lines))
    cleaned = " ".join(cleaned.split())
    cleaned = _SPACE_BEFORE_PUNCT.sub(r"\1", cleaned)
    if not any(ch.isalnum() for ch in cleaned):
        return ""
    return cleaned


def _word_before(buf: str, end: int) -> str:
    """The whitespace-delimited token ending at ``end`` (exclusive), without opening brackets/quotes."""
    start = end
    while start > 0 and not buf[start - 1].isspace():
        start -= 1
    return buf[start:end].lstrip(_OPENERS)


class ClauseSplitter:
    """Splits a growing text stream into speakable clauses.

    ``feed(delta)`` appends text and returns the clauses completed by it (possibly none); ``flush()`` returns
    what is left at the end of the stream (the last clause, possibly none) and resets the splitter for reuse.
    Every returned clause is cleaned by :func:`speakable` and non-empty.

    A clause ends:

    - at a sentence end: one or more of ``. ! ? …`` (then optional closing quotes/brackets) followed by
      whitespace. The splitter waits for the character after the dot, so ``3.5`` and ``file.txt`` never split.
      Not after an abbreviation (``Dr.``, ``e.g.``, ``vs.``; ``etc.``, ``a.m.``, ``U.S.`` unless the next word is
      capitalised), an initial (``J. Smith``) or a bare number starting the clause (list marker ``1.``).
      The CJK full stop and full-width ``! ?`` end a sentence without whitespace;
    - at a newline (paragraphs, list items, headers); the lines of a fenced code block are dropped;
    - at ``, ; :`` followed by whitespace once the clause has at least ``min_soft_chars`` characters
      (``first_min_soft_chars`` for the first clause of the stream, so the first audio can start sooner);
    - at the last space before ``max_chars`` when none of the above came in time;
    - with ``first_eager_end``, the first clause also ends at a sentence end or soft break that closes the text
      received so far, when it follows a word (two letters or more, not an abbreviation), without waiting for the
      next character: the first audio one token sooner. Punctuation that then starts the next delta (the rest of
      an ellipsis, a closing quote) is dropped.

    Bounded: after ``feed`` returns, the pending text holds at most ``max_chars`` characters (plus a run of
    closing punctuation the splitter is waiting past).
    """

    def __init__(self, *, min_soft_chars: int = 50, first_min_soft_chars: int = 24, max_chars: int = 250,
                 first_max_words: int | None = None, first_eager_end: bool = False) -> None:
        if max_chars < 20:
            raise ValueError(f"max_chars must be >= 20, got {max_chars!r}")
        if not 0 <= first_min_soft_chars <= max_chars or not 0 <= min_soft_chars <= max_chars:
            raise ValueError("min_soft_chars and first_min_soft_chars must be between 0 and max_chars")
        self.min_soft_chars = min_soft_chars
        self.first_min_soft_chars = first_min_soft_chars
        self.max_chars = max_chars
        # The first clause ends after this many words even without punctuation: the first audio sooner, at the
        # cost of a break mid-sentence (for a voice agent on a slow LLM).
        self.first_max_words = first_max_words
        self.first_eager_end = first_eager_end
        self._after_eager_cut = False
        self._buf = ""
        self._line_start = True
        self._in_fence = False
        self._emitted = 0

    @property
    def pending(self) -> str:
        """Text received but not yet returned as a clause (raw, not cleaned)."""
        return self._buf

    @property
    def clauses_emitted(self) -> int:
        """Clauses returned since construction or the last :meth:`flush`."""
        return self._emitted

    def feed(self, delta: str) -> list[str]:
        """Append ``delta``; return the clauses it completed, cleaned, in order."""
        if not isinstance(delta, str):
            raise TypeError(f"delta must be a str, got {type(delta).__name__}")
        self._buf += delta
        if self._after_eager_cut and self._buf:
            self._buf = self._buf.lstrip(_SENTENCE_END + _SOFT_BREAK + _CLOSERS)
            self._after_eager_cut = not self._buf
        return self._drain(final=False)

    def flush(self) -> list[str]:
        """End of stream: return the remaining clauses (at most a few) and reset the splitter."""
        out = self._drain(final=True)
        rest = self._clean(self._buf)
        if rest:
            out.append(rest)
        self._buf = ""
        self._line_start = True
        self._in_fence = False
        self._emitted = 0
        self._after_eager_cut = False
        return out

    def _clean(self, raw: str) -> str:
        """The speakable form of one raw clause; tracks fenced code blocks (dropped whole)."""
        if self._line_start and raw.lstrip().startswith(("```", "~~~")):
            self._in_fence = not self._in_fence
            return ""
        if self._in_fence:
            return ""
        return speakable(raw, line_start=self._line_start)

    def _drain(self, final: bool) -> list[str]:
        out: list[str] = []
        while True:
            found = self._next_break(final)
            if found is None:
                return out
            end, resume, newline = found
            clause = self._clean(self._buf[:end])
            self._buf = self._buf[resume:]
            self._line_start = newline
            if not newline:
                self._buf = self._buf.lstrip(" \t")
            if clause:
                out.append(clause)
                self._emitted += 1

    def _next_break(self, final: bool) -> tuple[int, int, bool] | None:
        """``(clause_end, resume_at, ended_by_newline)`` of the first complete clause in the buffer, or None."""
        buf = self._buf
        n = len(buf)
        soft_min = self.first_min_soft_chars if self._emitted == 0 else self.min_soft_chars
        word_limit = self.first_max_words if self._emitted == 0 else None
        eager = self.first_eager_end and self._emitted == 0 and not final
        words = 0
        last_space = -1
        i = 0
        while i < n:
            if i >= self.max_chars:
                # No break in time: cut at the last space (if it keeps a reasonable clause), else mid-word.
                cut = last_space if last_space > self.max_chars // 2 else self.max_chars
                return cut, cut, False
            ch = buf[i]
            if ch == "\n":
                return i, i + 1, True
            if ch.isspace():
                if i > 0 and not buf[i - 1].isspace():
                    words += 1
                    if word_limit and words >= word_limit:
                        return i, i, False
                last_space = i
                i += 1
                continue
            if ch in _CJK_SENTENCE_END:
                k = i + 1
                while k < n and (buf[k] in _CJK_SENTENCE_END or buf[k] in _CLOSERS):
                    k += 1
                if k == n and not final:
                    return None  # more closers may follow
                return k, k, False
            if ch in _SENTENCE_END:
                j = i + 1
                while j < n and buf[j] in _SENTENCE_END:
                    j += 1
                k = j
                while k < n and buf[k] in _CLOSERS:
                    k += 1
                if k == n:
                    if final:
                        return k, k, False
                    return self._eager_break(buf, i, k) if eager else None  # else wait for the next character
                if not buf[k].isspace():
                    i = k  # "3.5", "e.g" (inner dot), "file.txt", "...and"
                    continue
                if ch == "." and j == i + 1:
                    verdict = self._after_single_dot(buf, i, k, final)
                    if verdict is None:
                        return None
                    if not verdict:
                        i = k
                        continue
                return k, k, False
            if (ch in _SOFT_BREAK or ch in _CJK_SOFT_BREAK) and len(buf[:i].strip()) >= soft_min:
                if ch in _CJK_SOFT_BREAK:
                    return i + 1, i + 1, False
                if i + 1 == n:
                    if final:
                        return i + 1, i + 1, False
                    return self._eager_break(buf, i, i + 1) if eager else None
                if buf[i + 1].isspace():
                    return i + 1, i + 1, False
            i += 1
        return None

    def _eager_break(self, buf: str, mark: int, end: int) -> tuple[int, int, bool] | None:
        """The break at ``end`` when the punctuation at ``mark`` surely closes a word: it follows two letters or
        more that are not an abbreviation (so not ``3.``, ``e.g.``, ``Dr.``, ``1,``); else None (wait)."""
        word = _word_before(buf, mark)
        if len(word) < 2 or not word.isalpha():
            return None
        key = word.lower()
        if buf[mark] == "." and (key in _NEVER_END or key in _MAYBE_END or key in _BEFORE_NUMBER):
            return None
        self._after_eager_cut = True
        return end, end, False

    def _after_single_dot(self, buf: str, dot: int, after: int, final: bool) -> bool | None:
        """Whether the single ``.`` at ``dot`` (followed by whitespace at ``after``) ends a sentence; None when
        that depends on the next word, which has not arrived yet."""
        word = _word_before(buf, dot)
        key = word.lower()
        if key in _NEVER_END:
            return False
        if len(word) == 1 and word.isalpha() and word.isupper() and word != "I":
            return False  # an initial: "J. Smith"
        if word.isdigit() and not buf[:dot - len(word)].strip(" \t" + _OPENERS):
            return False  # a list marker starting the clause: "1. First"
        before_number = key in _BEFORE_NUMBER
        if not (before_number or key in _MAYBE_END
                or ("." in key and all(part.isalpha() and len(part) <= 2 for part in key.split(".")))):
            return True
        m = after
        while m < len(buf) and buf[m].isspace():
            m += 1
        if m == len(buf):
            return True if final else None  # decided by the next word, not here yet
        if before_number:
            return not buf[m].isdigit()
        return buf[m].isupper() or buf[m] in _OPENERS


def split_clauses(text: str, **options: int) -> list[str]:
    """All clauses of a complete text (``feed`` + ``flush``); ``options`` go to :class:`ClauseSplitter`."""
    splitter = ClauseSplitter(**options)
    return splitter.feed(text) + splitter.flush()
