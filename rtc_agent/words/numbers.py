"""Numbers in one spelling for scoring: digits and number words become the same English words.

``"17"``, ``"seventeen"``; ``"2nd"``, ``"second"``; ``"1,200"``, ``"1200"``, ``"twelve hundred"``, ``"a thousand two
hundred"`` and ``"one thousand two hundred"`` all read ``one thousand two hundred`` after :func:`spell_digits`
(a token of digits to words) and :func:`canonical_numbers` (a run of number words to its value, spelled again in
one way). Digit runs that are not amounts keep their digit-by-digit reading: a leading zero (``"007"``) or more than
twelve digits (a phone number). A teen or tens number followed by another one reads as a year (``"nineteen eighty
four"`` is 1984, as ``"1984"``). A run of single digits stays a run (``"one two three"``: three numbers, as a
caller reads a PIN). English only: other languages' number words are left as they are.
"""

from __future__ import annotations

import re

__all__ = ["canonical_numbers", "spell_digits", "spell_number", "spell_ordinal"]

_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = [(10 ** 9, "billion"), (10 ** 6, "million"), (1000, "thousand")]
_ORDINAL_WORDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                  "nine": "ninth", "twelve": "twelfth"}
#: The most digits read as an amount; longer runs are read digit by digit.
MAX_AMOUNT_DIGITS = 12

_VALUE = {w: i for i, w in enumerate(_UNITS)} | {w: 10 * i for i, w in enumerate(_TENS) if w}
_SCALE_VALUE = {"hundred": 100} | {name: value for value, name in _SCALES}
_ORDINAL_VALUE: dict[str, tuple[int, str]] = {}  # "twentieth": (20, "tens")
for _word, _value in list(_VALUE.items()) + list(_SCALE_VALUE.items()):
    _ORDINAL_VALUE[_ORDINAL_WORDS.get(_word) or (_word[:-1] + "ieth" if _word.endswith("y") else _word + "th")] = (
        _value, "scale" if _word in _SCALE_VALUE else "tens" if _value >= 20 else "unit")
_ORDINAL_DIGITS = re.compile(r"^(\d+)(st|nd|rd|th)$")


def _below_thousand(n: int) -> list[str]:
    words: list[str] = []
    if n >= 100:
        words += [_UNITS[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(_TENS[n // 10])
        n %= 10
        if n:
            words.append(_UNITS[n])
    elif n or not words:
        words.append(_UNITS[n])
    return words


def spell_number(n: int) -> list[str]:
    """``n`` (0 or more, below 10**12) in words: ``1200`` -> ``one thousand two hundred`` (no "and")."""
    if n < 1000:
        return _below_thousand(n)
    words: list[str] = []
    for value, name in _SCALES:
        if n >= value:
            words += [*spell_number(n // value), name]
            n %= value
    if n:
        words += _below_thousand(n)
    return words


def spell_ordinal(n: int) -> list[str]:
    """``n`` as an ordinal in words: ``22`` -> ``twenty second``, ``100`` -> ``one hundredth``."""
    words = spell_number(n)
    last = words[-1]
    words[-1] = _ORDINAL_WORDS.get(last) or (last[:-1] + "ieth" if last.endswith("y") else last + "th")
    return words


def spell_digits(token: str) -> list[str] | None:
    """A token of digits in words, or None when it is not one: ``"17"``, ``"1,200"`` (commas between groups of
    three), ``"3.5"`` (``three point five``), ``"2nd"`` (``second``), ``"10:30"`` (``ten thirty``); ``"007"`` and
    runs longer than ``MAX_AMOUNT_DIGITS`` digit by digit."""
    ordinal = _ORDINAL_DIGITS.match(token)
    if ordinal and len(ordinal.group(1)) <= MAX_AMOUNT_DIGITS:
        return spell_ordinal(int(ordinal.group(1)))
    if re.fullmatch(r"\d{1,3}(,\d{3})+", token):
        token = token.replace(",", "")
    if re.fullmatch(r"\d+", token):
        if (len(token) > 1 and token[0] == "0") or len(token) > MAX_AMOUNT_DIGITS:
            return [_UNITS[int(d)] for d in token]
        return spell_number(int(token))
    decimal = re.fullmatch(r"(\d+)\.(\d+)", token)
    if decimal:
        whole = spell_digits(decimal.group(1)) or []
        return [*whole, "point", *(_UNITS[int(d)] for d in decimal.group(2))]
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})", token)
    if clock:
        minutes = int(clock.group(2))
        return [*spell_number(int(clock.group(1))), *(spell_number(minutes) if minutes else [])]
    return None


class _Run:
    """One number being read from words: the value so far and what kind of word came last."""

    def __init__(self) -> None:
        self.total = 0  # the part above the last scale word (thousand, million, ...)
        self.current = 0  # the part below it
        self.last: str | None = None  # "unit", "teen", "tens", "hundred", "scale", "and", "a"
        self.last_scale = 10 ** 12
        self.ordinal = False
        self.year_head: int | None = None  # "nineteen" of "nineteen eighty four"

    @property
    def value(self) -> int:
        if self.year_head is not None:
            return self.year_head * 100 + self.current
        return self.total + self.current

    def take(self, word: str) -> bool:
        """Add ``word`` to this number; False when it does not continue it (it may begin the next one)."""
        if word in _ORDINAL_VALUE:
            value, kind = _ORDINAL_VALUE[word]
            kind = "teen" if kind == "unit" and value >= 10 else kind
            ok = self._scale(value) if kind == "scale" else self._small(value, kind)
            self.ordinal = ok
            return ok
        if word in _SCALE_VALUE:
            return self._scale(_SCALE_VALUE[word])
        value = _VALUE[word]
        return self._small(value, "tens" if value >= 20 else "teen" if value >= 10 else "unit")

    def _small(self, value: int, kind: str) -> bool:
        last = self.last
        after_tens = last == "tens" and kind == "unit" and value > 0 and self.current % 10 == 0  # "twenty one"
        if last is None or last in ("hundred", "scale", "and") or after_tens:
            self.current += value
        elif (self.year_head is None and self.total == 0 and last in ("teen", "tens", "unit") and kind != "unit"
              and 10 <= self.current <= 99):
            self.year_head, self.current = self.current, value  # "nineteen eighty", "twenty twenty"
        elif self.year_head is not None and last == "tens" and kind == "unit" and value > 0:
            self.current += value  # "nineteen eighty four"
        else:
            return False
        self.last = kind
        return True

    def _scale(self, value: int) -> bool:
        if self.year_head is not None or self.last == "and":
            return False
        if value == 100:
            if self.last not in (None, "unit", "teen", "tens", "a") or (self.current % 100 == 0 and self.current):
                return False
            self.current = (self.current or 1) * 100
            self.last = "hundred"
            return True
        if value >= self.last_scale or self.last == "scale":
            return False
        self.total += (self.current or 1) * value
        self.current = 0
        self.last_scale = value
        self.last = "scale"
        return True

    def words(self) -> list[str]:
        return spell_ordinal(self.value) if self.ordinal else spell_number(self.value)


def _is_number_word(word: str) -> bool:
    return word in _VALUE or word in _SCALE_VALUE or word in _ORDINAL_VALUE


def canonical_numbers(words: list[str]) -> list[str]:
    """``words`` (lower case) with every run of English number words spelled one way (:func:`spell_number`):
    ``["twelve", "hundred"]`` -> ``one thousand two hundred``, ``["a", "hundred"]`` -> ``one hundred``, ``["one",
    "hundred", "and", "five"]`` -> ``one hundred five``. Words that are not numbers are kept as they are."""
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else ""
        starts_a = word == "a" and nxt in _SCALE_VALUE
        if not (_is_number_word(word) or starts_a) or (word in _SCALE_VALUE and word != "hundred"):
            out.append(word)
            i += 1
            continue
        run = _Run()
        if starts_a:
            run.last = "a"
            i += 1
        taken = 0
        while i < len(words) and not run.ordinal:
            word = words[i]
            if word == "and" and run.last in ("hundred", "scale") and i + 1 < len(words) and (
                    words[i + 1] in _VALUE or words[i + 1] in _ORDINAL_VALUE):
                run.last = "and"
                i += 1
                continue
            if not _is_number_word(word) or not run.take(word):
                if run.last == "and":
                    i -= 1  # the "and" belongs to the text after the number
                break
            taken += 1
            i += 1
        if taken:
            out += run.words()
        else:  # (cannot happen for a word that starts a run; kept so the loop always advances)
            out.append(words[i])
            i += 1
    return out
