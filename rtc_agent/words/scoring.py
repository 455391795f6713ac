"""The words a transcript is scored on, and its word error rate: one normaliser for every side that is compared
(the reference, the streaming captions and the offline transcript), so a difference of spelling is never counted
as an error and a different word always is.

:func:`scoring_words` takes a text through, in order:

1. Unicode NFKC, lower case, typographic apostrophes as ``'``; accents dropped from Latin letters (``café`` ->
   ``cafe``; other scripts keep theirs); ``%`` -> ``percent``, ``&`` -> ``and``, ``$5`` -> ``5 dollars`` (also ``£``
   ``pounds``, ``€`` ``euros``);
2. hyphens, dashes and other punctuation become spaces (``open-source`` == ``open source``), but not inside a
   number (``1,200``, ``3.5``, ``10:30``) or a word (``it's``);
3. each word: contractions and casual forms written out, British spellings made American
   (:mod:`rtc_agent.words.spelling`); digits in words (:func:`~rtc_agent.words.numbers.spell_digits`);
4. runs of number words spelled one way (:func:`~rtc_agent.words.numbers.canonical_numbers`): ``17`` ==
   ``seventeen``, ``2nd`` == ``second``, ``1,200`` == ``twelve hundred`` == ``one thousand two hundred``;
5. hesitations (``uh``, ``um``, ...: :data:`~rtc_agent.words.spelling.FILLERS`) dropped: the references leave them
   out.

:func:`wer` also joins compounds written open on one side and closed on the other: two adjacent words of one side
whose letters, together, are the word the other side has in their place (``spread sheet`` for ``spreadsheet``,
``pass word`` for ``password``) count as that word. Whisper writes closed compounds as dictionaries do
(``spreadsheet``, ``password``, ``open-source``), so an open spelling is a spelling, not a mishearing; a
different word (``red sheet``) stays an error. An apostrophe that changes the word stays (``world's`` is not
``worlds``).
"""

from __future__ import annotations

import difflib
import re
import unicodedata

from rtc_agent.words.numbers import canonical_numbers, spell_digits
from rtc_agent.words.spelling import FILLERS, american, expand

__all__ = ["join_compounds", "scoring_text", "scoring_words", "wer"]

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
_CURRENCY = re.compile(r"([$£€])\s?(\d[\d,.]*)")
_CURRENCY_WORD = {"$": "dollars", "£": "pounds", "€": "euros"}
# Tokens: numbers with their inner separators, or runs of letters/digits with inner apostrophes.
_TOKEN = re.compile(r"\d+(?:[,.:]\d+)*(?:st|nd|rd|th)?(?![\w])|[^\W_]+(?:'[^\W_]+)*|'cause", re.UNICODE)


def _fold_accents(text: str) -> str:
    """Combining marks dropped from Latin letters (``é`` -> ``e``); letters of other scripts kept whole (the breve
    of Cyrillic ``й`` makes another letter)."""
    out: list[str] = []
    for ch in unicodedata.normalize("NFD", text):
        if unicodedata.category(ch) == "Mn" and out and out[-1].isascii():
            continue
        out.append(ch)
    return unicodedata.normalize("NFC", "".join(out))


def _prepare(text: str) -> str:
    text = _fold_accents(unicodedata.normalize("NFKC", text).lower().translate(_APOSTROPHES))
    text = _CURRENCY.sub(lambda m: f"{m.group(2).rstrip(',.')} {_CURRENCY_WORD[m.group(1)]}", text)
    return text.replace("%", " percent ").replace("&", " and ")


def scoring_words(text: str) -> list[str]:
    """The words ``text`` is scored on (the module docstring's steps 1-5)."""
    words: list[str] = []
    for token in _TOKEN.findall(_prepare(text)):
        spelled = spell_digits(token) if token[0].isdigit() else None
        if spelled is not None:
            words += spelled
            continue
        for word in expand(token):
            words.append(american(word))
    return [w for w in canonical_numbers(words) if w not in FILLERS]


def scoring_text(text: str) -> str:
    """:func:`scoring_words` joined by single spaces."""
    return " ".join(scoring_words(text))


def _join_into(words: list[str], vocabulary: set[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(words):
        if i + 1 < len(words) and words[i] + words[i + 1] in vocabulary:
            out.append(words[i] + words[i + 1])
            i += 2
        else:
            out.append(words[i])
            i += 1
    return out


def join_compounds(reference: list[str], hypothesis: list[str]) -> tuple[list[str], list[str]]:
    """Both word lists with compounds written open on one side joined where the other side writes them closed
    (``["spread", "sheet"]`` against ``["spreadsheet"]``): only inside a span where the two sides differ (aligned
    word by word), so ``a long`` stays two words where the other side says ``a long`` too, even when it says
    ``along`` elsewhere."""
    ref_out: list[str] = []
    hyp_out: list[str] = []
    matcher = difflib.SequenceMatcher(None, reference, hypothesis, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        ref, hyp = reference[i1:i2], hypothesis[j1:j2]
        if tag == "replace":
            hyp = _join_into(hyp, set(ref))
            ref = _join_into(ref, set(hyp))
        ref_out += ref
        hyp_out += hyp
    return ref_out, hyp_out


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of ``hypothesis`` against ``reference``, both through :func:`scoring_words` and
    :func:`join_compounds`: (substitutions + deletions + insertions) / reference words. 0.0 when both are empty,
    1.0 when only the reference is."""
    import jiwer

    ref, hyp = join_compounds(scoring_words(reference), scoring_words(hypothesis))
    if not ref:
        return 0.0 if not hyp else 1.0
    if not hyp:
        return 1.0
    return float(jiwer.wer(" ".join(ref), " ".join(hyp)))
