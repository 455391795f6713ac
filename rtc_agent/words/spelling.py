"""One spelling for words that are written more than one way, for scoring (English).

- contractions are written out: ``it's`` -> ``it is``, ``don't`` -> ``do not``, ``can't``/``cannot`` -> ``can not``,
  ``we're`` -> ``we are``, ``I'll`` -> ``i will``, ``I'd`` -> ``i would`` (also for "I had": both sides alike); a
  possessive ``'s`` (``the world's``) stays, only pronouns and question words take ``is``;
- casual forms: ``gonna`` -> ``going to``, ``wanna`` -> ``want to``, ``gotta`` -> ``got to``, ``kinda`` -> ``kind
  of``, ``ok`` -> ``okay``, ``alright`` -> ``all right``, ``mister`` -> ``mr``;
- British spellings become American: ``-our`` -> ``-or`` (``neighbours``), ``-ise``/``-yse`` -> ``-ize``/``-yze``
  (``realised``, ``organisation``, ``analyse``), ``-re`` -> ``-er`` and other words of a fixed table (``centre``,
  ``travelled``, ``programme``, ``grey``, ``learnt``).

Applied to the reference and the hypothesis alike, a fold can only hide a difference of spelling, never a
different word: ``four``/``hour``/``your`` are not ``-our`` words (the rule needs two letters before ``our``), and
the ``-ise`` rule needs a suffix (``this``, ``crisis`` stay).
"""

from __future__ import annotations

import re

__all__ = ["FILLERS", "american", "expand"]

#: Hesitations: the references leave them out (a transcript of what was meant), so they are not scored.
FILLERS = frozenset({"uh", "um", "uhm", "umm", "erm", "hmm", "hm", "mm", "mmm", "mhm"})

_WHOLE = {
    "can't": "can not", "cannot": "can not", "won't": "will not", "shan't": "shall not", "let's": "let us",
    "'cause": "because", "gonna": "going to", "wanna": "want to", "gotta": "got to", "kinda": "kind of",
    "sorta": "sort of", "lemme": "let me", "gimme": "give me", "outta": "out of", "dunno": "do not know",
    "ok": "okay", "alright": "all right", "mister": "mr", "y'know": "you know",
}
_IS_BEFORE_S = frozenset({"it", "that", "there", "here", "what", "who", "where", "when", "how", "why", "he", "she",
                          "this", "everything", "nothing", "something", "someone", "somebody", "everyone",
                          "everybody", "anyone", "anybody", "one"})
_SUFFIX = {"'re": "are", "'ve": "have", "'ll": "will", "'m": "am", "'d": "would"}

_BRITISH = {
    "centre": "center", "centres": "centers", "centred": "centered", "theatre": "theater", "theatres": "theaters",
    "metre": "meter", "metres": "meters", "kilometre": "kilometer", "kilometres": "kilometers",
    "centimetre": "centimeter", "centimetres": "centimeters", "millimetre": "millimeter", "litre": "liter",
    "litres": "liters", "fibre": "fiber", "calibre": "caliber", "sombre": "somber", "spectre": "specter",
    "lustre": "luster", "meagre": "meager", "manoeuvre": "maneuver", "programme": "program",
    "programmes": "programs", "grey": "gray", "greys": "grays", "defence": "defense", "offence": "offense",
    "licence": "license", "pretence": "pretense", "practise": "practice", "practised": "practiced",
    "practising": "practicing", "catalogue": "catalog", "dialogue": "dialog", "analogue": "analog",
    "travelled": "traveled", "travelling": "traveling", "traveller": "traveler", "travellers": "travelers",
    "cancelled": "canceled", "cancelling": "canceling", "labelled": "labeled", "labelling": "labeling",
    "modelled": "modeled", "modelling": "modeling", "fuelled": "fueled", "signalled": "signaled",
    "signalling": "signaling", "levelled": "leveled", "counselling": "counseling", "marvellous": "marvelous",
    "jewellery": "jewelry", "tyre": "tire", "tyres": "tires", "aluminium": "aluminum", "mould": "mold",
    "plough": "plow", "ageing": "aging", "judgement": "judgment", "acknowledgement": "acknowledgment",
    "enrol": "enroll", "fulfil": "fulfill", "skilful": "skillful", "learnt": "learned", "spelt": "spelled",
    "dreamt": "dreamed", "burnt": "burned", "spoilt": "spoiled", "paediatric": "pediatric",
    "encyclopaedia": "encyclopedia", "anaesthetic": "anesthetic", "whilst": "while", "amongst": "among",
}
_OUR = re.compile(r"^(\w{2,}?)our(s|ed|ing|ite|ites|able|ably|ful|less|er|ers|hood|hoods|ly|ist|ists|ism)?$")
_ISE = re.compile(r"^(\w{2,}?)([iy])s(e|es|ed|ing|er|ers|ation|ations|able)$")
_NOT_OUR = frozenset({"amour", "detour", "contour", "devour", "devoured", "devours", "paramour", "troubadour"})


def american(word: str) -> str:
    """``word`` (lower case) in its American spelling (the module docstring's rules)."""
    if word in _BRITISH:
        return _BRITISH[word]
    if word not in _NOT_OUR:
        m = _OUR.match(word)
        if m:
            return f"{m.group(1)}or{m.group(2) or ''}"
    m = _ISE.match(word)
    if m:
        return f"{m.group(1)}{m.group(2)}z{m.group(3)}"
    return word


def expand(word: str) -> list[str]:
    """``word`` (lower case, apostrophes as ``'``) with its contraction or casual form written out."""
    if word in _WHOLE:
        return _WHOLE[word].split()
    if word.endswith("n't") and len(word) > 3:
        return [word[:-3], "not"]
    if word.endswith("'s") and word[:-2] in _IS_BEFORE_S:
        return [word[:-2], "is"]
    for suffix, full in _SUFFIX.items():
        if word.endswith(suffix) and len(word) > len(suffix):
            return [word[: -len(suffix)], full]
    return [word]
