"""The built-in ``calculate`` tool: exact arithmetic, never ``eval``.

A real tokenizer and recursive-descent parser over :class:`fractions.Fraction`. Decimals such as ``0.1`` are exact
fractions, so ``0.1 + 0.2`` is exactly ``0.3``. ``sqrt`` is exact for perfect squares of rationals and otherwise
computed to 30 significant digits with the result marked ``"exact": false``; a non-integer power is handled the
same way.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

from rtc_agent.apps.agent.tool import ToolError

__all__ = ["CALCULATE_SCHEMA", "calculate", "decimal_text"]


CALCULATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "expression": {
            "type": "string",
            "description": "Arithmetic with numbers, + - * / ^ (power), parentheses, % (percent) and the "
                           "functions sqrt() and abs(), e.g. (3 + 4.5) * 2 ^ 3 / 7",
            "minLength": 1,
            "maxLength": 500,
        },
    },
    "required": ["expression"],
    "additionalProperties": False,
}

_MAX_EXPRESSION = 500
_MAX_BITS = 20_000  # numerator or denominator size of any intermediate value
_MAX_EXPONENT = 10_000
_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_]+)|(?P<op>\*\*|[-+*/^%(),]))"
)
# multiplication sign, middle dot, division sign, minus sign, en dash, thin and no-break spaces
_ALIASES = str.maketrans({"\u00d7": "*", "\u00b7": "*", "\u00f7": "/", "\u2212": "-", "\u2013": "-", "\u2009": " ",
                          "\u00a0": " "})

_OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


@dataclass(frozen=True)
class _Num:
    value: Fraction
    exact: bool = True


class _Parser:
    """Recursive descent over tokens. Grammar (``^`` binds tighter than unary minus: ``-2^2 = -4``)::

        expr    := term (("+" | "-") term)*
        term    := unary (("*" | "/") unary)*
        unary   := ("+" | "-") unary | power
        power   := postfix ("^" unary)?          right-associative
        postfix := primary "%"*
        primary := NUMBER | "(" expr ")" | NAME "(" expr ")"
    """

    FUNCTIONS = ("sqrt", "abs")

    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise ToolError(f"unexpected character {text[pos:].lstrip()[:1]!r} at position {pos + 1}")
            kind = m.lastgroup or "op"
            value = m.group(kind)
            if kind == "op" and value == "**":
                value = "^"
            self.tokens.append((kind, value, m.start(kind) + 1))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str, int] | None:
        token = self.peek()
        if token is not None and (value is None or token[1] == value):
            self.i += 1
            return token
        return None

    def parse(self) -> _Num:
        if not self.tokens:
            raise ToolError("the expression is empty")
        result = self.expr()
        token = self.peek()
        if token is not None:
            raise ToolError(f"unexpected {token[1]!r} at position {token[2]}")
        return result

    def expr(self) -> _Num:
        return self._operations(self.term, ("+", "-"))

    def term(self) -> _Num:
        return self._operations(self.unary, ("*", "/"))

    def _operations(self, operand: Callable[[], _Num], operators: tuple[str, str]) -> _Num:
        """``operand (operator operand)*``, left-associative."""
        left = operand()
        while (token := self.peek()) is not None and token[1] in operators:
            self.i += 1
            left = _binary(token[1], left, operand())
        return left

    def unary(self) -> _Num:
        if self.take("-"):
            operand = self.unary()
            return _Num(-operand.value, operand.exact)
        if self.take("+"):
            return self.unary()
        return self.power()

    def power(self) -> _Num:
        base = self.postfix()
        if self.take("^"):
            return _power(base, self.unary())
        return base

    def postfix(self) -> _Num:
        value = self.primary()
        while self.take("%"):
            value = _Num(value.value / 100, value.exact)
        return value

    def primary(self) -> _Num:
        token = self.take()
        if token is None:
            raise ToolError("the expression ends too early")
        kind, value, pos = token
        if kind == "num":
            if len(value) > 100:
                raise ToolError(f"the number at position {pos} is too long")
            return _Num(Fraction(Decimal(value)))
        if value == "(":
            inner = self.expr()
            if not self.take(")"):
                raise ToolError(f"missing ')' for the '(' at position {pos}")
            return inner
        if kind == "name":
            name = value.lower()
            if name not in self.FUNCTIONS:
                raise ToolError(f"unknown name {value!r} at position {pos}; functions: {', '.join(self.FUNCTIONS)}")
            if not self.take("("):
                raise ToolError(f"{name} needs parentheses: {name}(...)")
            arg = self.expr()
            if not self.take(")"):
                raise ToolError(f"missing ')' after the argument of {name}")
            return _sqrt(arg) if name == "sqrt" else _Num(abs(arg.value), arg.exact)
        raise ToolError(f"unexpected {value!r} at position {pos}")


def _binary(symbol: str, left: _Num, right: _Num) -> _Num:
    if symbol == "/" and right.value == 0:
        raise ToolError("division by zero")
    return _checked(_OPERATORS[symbol](left.value, right.value), left.exact and right.exact)


def _checked(value: Fraction, exact: bool) -> _Num:
    if value.numerator.bit_length() > _MAX_BITS or value.denominator.bit_length() > _MAX_BITS:
        raise ToolError("a number in the calculation is too large")
    return _Num(value, exact)


def _approx(x: float | Decimal) -> _Num:
    if isinstance(x, float) and not math.isfinite(x):
        raise ToolError("the result is too large")
    return _checked(Fraction(x), False)


def _iroot(x: int, n: int) -> int:
    """The integer ``n``-th root of ``x >= 0``, rounded down (Newton's method on integers)."""
    if x < 2:
        return x
    r = 1 << -(-x.bit_length() // n)  # >= the root
    while True:
        y = ((n - 1) * r + x // r ** (n - 1)) // n
        if y >= r:
            return r
        r = y


def _exact_root(value: Fraction, n: int) -> Fraction | None:
    """The exact ``n``-th root of a non-negative rational, when there is one."""
    num, den = _iroot(value.numerator, n), _iroot(value.denominator, n)
    if num**n == value.numerator and den**n == value.denominator:
        return Fraction(num, den)
    return None


def _sqrt(arg: _Num) -> _Num:
    if arg.value < 0:
        raise ToolError("the square root of a negative number is not a real number")
    root = _exact_root(arg.value, 2)
    if root is not None:
        return _Num(root, arg.exact)
    with localcontext() as ctx:
        ctx.prec = 30
        return _approx((Decimal(arg.value.numerator) / Decimal(arg.value.denominator)).sqrt())


def _power(base: _Num, exponent: _Num) -> _Num:
    e = exponent.value
    if e.denominator == 1:
        if abs(e) > _MAX_EXPONENT:
            raise ToolError(f"exponents are limited to ±{_MAX_EXPONENT}")
        if base.value == 0 and e < 0:
            raise ToolError("division by zero (zero to a negative power)")
        bits = max(base.value.numerator.bit_length(), base.value.denominator.bit_length())
        if bits * abs(int(e)) > _MAX_BITS:
            raise ToolError("the result is too large")
        return _checked(base.value ** int(e), base.exact and exponent.exact)
    if base.value < 0:
        raise ToolError("a negative number to a fractional power is not a real number")
    if e.denominator <= 64:  # e = p/q: exact when the q-th root is exact
        root = _exact_root(base.value, e.denominator)
        if root is not None:
            return _power(_Num(root, base.exact), _Num(Fraction(e.numerator), exponent.exact))
    try:
        return _approx(float(base.value) ** float(e))
    except OverflowError:
        raise ToolError("the result is too large") from None


def decimal_text(value: Fraction, digits: int = 12) -> str:
    """``value`` rounded to ``digits`` significant digits, in plain notation when reasonable."""
    if value == 0:
        return "0"
    with localcontext() as ctx:
        ctx.prec = digits
        d = (Decimal(value.numerator) / Decimal(value.denominator)).normalize()
    exponent = d.adjusted()
    text = format(d, "f") if -7 <= exponent < 21 else format(d, "e")
    return text


def _terminates(value: Fraction) -> bool:
    den = value.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    return den == 1


def calculate(expression: str) -> dict[str, Any]:
    """Evaluate arithmetic exactly.

    Returns ``expression`` (as given), ``result`` (an integer, an exact decimal, a fraction ``"7/3"``, or for an
    inexact result a 15-digit decimal), ``decimal`` (12 significant digits) and ``exact``. ``ToolError`` for syntax
    errors, division by zero, non-real results and numbers too large to handle.
    """
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("the expression is empty")
    if len(expression) > _MAX_EXPRESSION:
        raise ToolError(f"the expression is longer than {_MAX_EXPRESSION} characters")
    num = _Parser(expression.translate(_ALIASES)).parse()
    value = num.value
    if not num.exact:
        result = decimal_text(value, 15)
    elif value.denominator == 1:
        result = str(value.numerator)
    elif _terminates(value) and len(str(value.denominator)) <= 30:
        with localcontext() as ctx:
            ctx.prec = 200
            result = format((Decimal(value.numerator) / Decimal(value.denominator)).normalize(), "f")
    else:
        result = f"{value.numerator}/{value.denominator}"
    return {"expression": expression, "result": result, "decimal": decimal_text(value), "exact": num.exact}
