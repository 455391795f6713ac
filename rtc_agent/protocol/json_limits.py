"""JSON parsing with limits on nesting depth and number size, for input from clients (HTTP and data channel).

Python's :func:`json.loads` recurses once per nesting level (a 3000-deep array raises ``RecursionError``) and
converts number literals as it goes (``int`` refuses more than 4300 digits with ``ValueError`` and a very long
float or int literal costs quadratic time). :func:`loads` refuses such documents before parsing them:

1. a linear pre-scan, outside strings, of the bracket depth and of the longest run of number characters;
2. ``json.loads`` with ``parse_int`` / ``parse_float`` / ``parse_constant`` hooks as a second guard (and
   ``RecursionError`` caught), so a document the scan misjudged still cannot get through. A float literal that
   overflows (``1e999``) is refused like the ``Infinity`` constant: it would parse to ``inf``, and a server
   event echoing it (``pong.client_ts``) would carry ``Infinity``, which a browser's ``JSON.parse`` rejects.

Contract: every failure is a :class:`ValueError`: :class:`JSONLimitError` for a limit (or a non-standard
constant: ``NaN``, ``Infinity``, or a number too large for a finite float), :class:`json.JSONDecodeError` for
bad syntax, :class:`UnicodeDecodeError` for bytes that are not UTF-8/16/32. Nothing else escapes.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

__all__ = ["DEFAULT_MAX_DEPTH", "DEFAULT_MAX_NUMBER_CHARS", "JSONLimitError", "loads"]

DEFAULT_MAX_DEPTH = 32
DEFAULT_MAX_NUMBER_CHARS = 64

# A complete JSON string (the unrolled form is linear in the regex engine); unterminated strings do not match.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class JSONLimitError(ValueError):
    """A JSON document nests too deeply, has a too-long number literal, or uses NaN/Infinity."""


def _check_number(literal: str, max_number_chars: int) -> None:
    if len(literal) > max_number_chars:
        raise JSONLimitError(f"a number literal of {len(literal)} characters exceeds the limit of "
                             f"{max_number_chars}")


def _prescan(text: str, max_depth: int, max_number_chars: int) -> None:
    """Refuse deep nesting and long numbers outside strings, in time linear in ``len(text)``."""
    outside = _STRING.sub('""', text)
    long_number = re.search(rf"[-+.0-9eE]{{{max_number_chars + 1},}}", outside)
    if long_number is not None:
        run = re.match(r"[-+.0-9eE]*", outside[long_number.start():])
        _check_number(run.group(0) if run else long_number.group(0), max_number_chars)
    brackets = _NOT_BRACKET.sub("", outside)
    if len(brackets) > max_depth:  # otherwise the depth cannot exceed the limit
        deepest = max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)))
        if deepest > max_depth:
            raise JSONLimitError(f"JSON nested {deepest} levels deep exceeds the limit of {max_depth}")


def loads(text: str | bytes, *, max_depth: int = DEFAULT_MAX_DEPTH,
          max_number_chars: int = DEFAULT_MAX_NUMBER_CHARS) -> Any:
    """Parse one JSON document, refusing nesting deeper than ``max_depth`` (arrays and objects) and number
    literals longer than ``max_number_chars`` (sign, digits, point and exponent together).

    Raises :class:`JSONLimitError` (a ``ValueError``) for a limit, ``json.JSONDecodeError`` for bad JSON.
    """
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
    _prescan(text, max_depth, max_number_chars)

    def parse_int(literal: str) -> int:
        _check_number(literal, max_number_chars)
        return int(literal)

    def parse_float(literal: str) -> float:
        _check_number(literal, max_number_chars)
        value = float(literal)
        if not math.isfinite(value):
            raise JSONLimitError(f"the number {literal} is too large (not a finite float)")
        return value

    def parse_constant(name: str) -> Any:
        raise JSONLimitError(f"{name} is not valid JSON")

    try:
        return json.loads(text, parse_int=parse_int, parse_float=parse_float, parse_constant=parse_constant)
    except RecursionError:
        raise JSONLimitError(f"JSON nested too deeply (the limit is {max_depth} levels)") from None
