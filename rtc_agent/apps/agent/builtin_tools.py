"""Built-in server tools that need no network: the current time in a time zone, exact arithmetic, unit conversion.

Each tool is a plain function (usable and testable without the registry) plus a JSON schema; :func:`register_builtins`
adds them to a :class:`~rtc_agent.apps.agent.tools.ToolRegistry`. Errors a model can fix (unknown time zone or
unit, division by zero, a syntax error) are raised as :class:`~rtc_agent.apps.agent.tools.ToolError` with a
message that says what to send instead.

Arithmetic is exact: a real tokenizer and recursive-descent parser over :class:`fractions.Fraction` (never
``eval``). Decimals such as ``0.1`` are exact fractions, so ``0.1 + 0.2`` is exactly ``0.3``. ``sqrt`` is exact
for perfect squares of rationals and otherwise computed to 30 significant digits with the result marked
``"exact": false``; a non-integer power is handled the same way.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

from rtc_agent.apps.agent.tools import Tool, ToolError, ToolRegistry

__all__ = [
    "CALCULATE_SCHEMA",
    "CONVERT_UNITS_SCHEMA",
    "GET_CURRENT_TIME_SCHEMA",
    "builtin_tools",
    "calculate",
    "convert_units",
    "get_current_time",
    "register_builtins",
]

# --------------------------------------------------------------------------------------------------------------
# time


GET_CURRENT_TIME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "timezone": {
            "type": "string",
            "description": "IANA time zone name such as Europe/Paris or America/New_York (a city name like "
                           "Tokyo also works). Defaults to UTC.",
        },
    },
    "additionalProperties": False,
}


@functools.cache
def _zone_index() -> dict[str, list[str]]:
    """Lower-cased zone names and their last components (``tokyo`` -> ``Asia/Tokyo``) to zone names."""
    index: dict[str, list[str]] = {}
    for name in sorted(zoneinfo.available_timezones()):
        index.setdefault(name.lower(), []).append(name)
        city = name.rsplit("/", 1)[-1].lower()
        if city != name.lower():
            index.setdefault(city, []).append(name)
    return index


def resolve_timezone(name: str) -> zoneinfo.ZoneInfo:
    """The zone for an IANA name (any case) or a unique city name; ``ToolError`` otherwise."""
    key = (name or "UTC").strip()
    if key.upper() in ("UTC", "GMT", "Z"):
        return zoneinfo.ZoneInfo("UTC")
    with_underscores = key.replace(" ", "_")
    try:
        if "/" in with_underscores and ".." not in with_underscores:
            return zoneinfo.ZoneInfo(with_underscores)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        pass
    matches = _zone_index().get(with_underscores.lower(), [])
    if len(set(matches)) == 1:
        return zoneinfo.ZoneInfo(matches[0])
    if len(set(matches)) > 1:
        raise ToolError(f"time zone {name!r} is ambiguous: {', '.join(sorted(set(matches))[:6])}")
    raise ToolError(f"unknown time zone {name!r}; use an IANA name such as Europe/Paris or America/New_York")


def get_current_time(timezone: str = "UTC", *, now: Callable[[], dt.datetime] | None = None) -> dict[str, Any]:
    """The current date and time in a time zone.

    Returns ``timezone`` (the IANA name), ``iso`` (ISO 8601 with offset), ``date`` ("Sunday, November 29, 2026"),
    ``time`` ("6:05 PM"), ``time_24h`` ("18:05"), ``utc_offset`` ("+01:00") and ``abbreviation`` ("CET").
    ``now`` (returning an aware datetime) is for tests.
    """
    zone = resolve_timezone(timezone)
    current = (now() if now is not None else dt.datetime.now(dt.UTC)).astimezone(zone)
    offset = current.utcoffset() or dt.timedelta(0)
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    hour12 = current.hour % 12 or 12
    return {
        "timezone": zone.key,
        "iso": current.isoformat(timespec="seconds"),
        "date": f"{current:%A}, {current:%B} {current.day}, {current.year}",
        "time": f"{hour12}:{current:%M} {'AM' if current.hour < 12 else 'PM'}",
        "time_24h": f"{current:%H:%M}",
        "utc_offset": f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}",
        "abbreviation": current.tzname() or "",
    }


# --------------------------------------------------------------------------------------------------------------
# arithmetic


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
        left = self.term()
        while (token := self.peek()) is not None and token[1] in ("+", "-"):
            self.i += 1
            right = self.term()
            value = left.value + right.value if token[1] == "+" else left.value - right.value
            left = _checked(value, left.exact and right.exact)
        return left

    def term(self) -> _Num:
        left = self.unary()
        while (token := self.peek()) is not None and token[1] in ("*", "/"):
            self.i += 1
            right = self.unary()
            if token[1] == "*":
                left = _checked(left.value * right.value, left.exact and right.exact)
            else:
                if right.value == 0:
                    raise ToolError("division by zero")
                left = _checked(left.value / right.value, left.exact and right.exact)
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


def _decimal_text(value: Fraction, digits: int = 12) -> str:
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
        result = _decimal_text(value, 15)
    elif value.denominator == 1:
        result = str(value.numerator)
    elif _terminates(value) and len(str(value.denominator)) <= 30:
        with localcontext() as ctx:
            ctx.prec = 200
            result = format((Decimal(value.numerator) / Decimal(value.denominator)).normalize(), "f")
    else:
        result = f"{value.numerator}/{value.denominator}"
    return {"expression": expression, "result": result, "decimal": _decimal_text(value), "exact": num.exact}


# --------------------------------------------------------------------------------------------------------------
# units


CONVERT_UNITS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "value": {"type": "number", "description": "The amount to convert."},
        "from_unit": {"type": "string", "description": "Unit of the value, e.g. km, mile, lb, °F, l, mph, h."},
        "to_unit": {"type": "string", "description": "Unit to convert to, of the same kind."},
    },
    "required": ["value", "from_unit", "to_unit"],
    "additionalProperties": False,
}

_F = Fraction


@dataclass(frozen=True)
class _Unit:
    name: str
    category: str
    factor: Fraction  # size in the category's base unit (m, kg, l, m/s, s); kelvin offsets for temperature
    offset: Fraction = Fraction(0)


_UNITS: dict[str, _Unit] = {}


def _unit(category: str, name: str, factor: Fraction | int | str, *aliases: str,
          offset: Fraction | None = None) -> None:
    unit = _Unit(name, category, _F(factor), offset if offset is not None else _F(0))
    for alias in (name, *aliases):
        key = alias.lower()
        if key in _UNITS and _UNITS[key] != unit:
            raise RuntimeError(f"unit alias {alias!r} defined twice")
        _UNITS[key] = unit


_INCH = _F("0.0254")
_FOOT = 12 * _INCH
_MILE = 5280 * _FOOT
_POUND = _F("0.45359237")
_US_GALLON = _F("3.785411784")
_US_FLOZ = _US_GALLON / 128
_IMP_GALLON = _F("4.54609")
_DAY = _F(86400)
_YEAR = _F("365.25") * _DAY  # Julian year

for args in (
    ("m", 1, "meter", "meters", "metre", "metres"),
    ("km", 1000, "kilometer", "kilometers", "kilometre", "kilometres"),
    ("cm", _F(1, 100), "centimeter", "centimeters", "centimetre", "centimetres"),
    ("mm", _F(1, 1000), "millimeter", "millimeters", "millimetre", "millimetres"),
    ("µm", _F(1, 10**6), "um", "micrometer", "micrometers", "micron", "microns"),
    ("nm", _F(1, 10**9), "nanometer", "nanometers"),
    ("in", _INCH, "inch", "inches", '"'),
    ("ft", _FOOT, "foot", "feet", "'"),
    ("yd", 3 * _FOOT, "yard", "yards"),
    ("mi", _MILE, "mile", "miles"),
    ("nmi", 1852, "nautical mile", "nautical miles"),
):
    _unit("length", args[0], *args[1:])
for args in (
    ("kg", 1, "kilogram", "kilograms", "kilo", "kilos"),
    ("g", _F(1, 1000), "gram", "grams"),
    ("mg", _F(1, 10**6), "milligram", "milligrams"),
    ("t", 1000, "tonne", "tonnes", "metric ton", "metric tons"),
    ("lb", _POUND, "lbs", "pound", "pounds"),
    ("oz", _POUND / 16, "ounce", "ounces"),
    ("st", 14 * _POUND, "stone", "stones"),
    ("short ton", 2000 * _POUND, "us ton", "short tons", "us tons"),
):
    _unit("mass", args[0], *args[1:])
for args in (
    ("l", 1, "liter", "liters", "litre", "litres"),
    ("ml", _F(1, 1000), "milliliter", "milliliters", "millilitre", "millilitres"),
    ("cl", _F(1, 100), "centiliter", "centiliters", "centilitre", "centilitres"),
    ("dl", _F(1, 10), "deciliter", "deciliters", "decilitre", "decilitres"),
    ("m³", 1000, "m3", "cubic meter", "cubic meters", "cubic metre", "cubic metres"),
    ("cm³", _F(1, 1000), "cm3", "cc", "cubic centimeter", "cubic centimeters"),
    ("gal", _US_GALLON, "gallon", "gallons", "us gallon", "us gallons"),
    ("qt", _US_GALLON / 4, "quart", "quarts"),
    ("pt", _US_GALLON / 8, "pint", "pints", "us pint", "us pints"),
    ("cup", _US_GALLON / 16, "cups"),
    ("fl oz", _US_FLOZ, "floz", "fluid ounce", "fluid ounces"),
    ("tbsp", _US_FLOZ / 2, "tablespoon", "tablespoons"),
    ("tsp", _US_FLOZ / 6, "teaspoon", "teaspoons"),
    ("imp gal", _IMP_GALLON, "imperial gallon", "imperial gallons"),
    ("imp pt", _IMP_GALLON / 8, "imperial pint", "imperial pints"),
):
    _unit("volume", args[0], *args[1:])
for args in (
    ("m/s", 1, "mps", "meter per second", "meters per second", "metre per second", "metres per second"),
    ("km/h", _F(1000, 3600), "kph", "kmh", "kmph", "kilometer per hour", "kilometers per hour",
     "kilometre per hour", "kilometres per hour"),
    ("mph", _MILE / 3600, "mi/h", "mile per hour", "miles per hour"),
    ("kn", _F(1852, 3600), "kt", "knot", "knots"),
    ("ft/s", _FOOT, "fps", "foot per second", "feet per second"),
):
    _unit("speed", args[0], *args[1:])
for args in (
    ("s", 1, "sec", "secs", "second", "seconds"),
    ("ms", _F(1, 1000), "millisecond", "milliseconds"),
    ("µs", _F(1, 10**6), "us", "microsecond", "microseconds"),
    ("min", 60, "mins", "minute", "minutes"),
    ("h", 3600, "hr", "hrs", "hour", "hours"),
    ("day", _DAY, "d", "days"),
    ("week", 7 * _DAY, "wk", "weeks"),
    ("month", _YEAR / 12, "months"),
    ("year", _YEAR, "yr", "yrs", "years"),
):
    _unit("time", args[0], *args[1:])
_unit("temperature", "°C", 1, "c", "celsius", "degc", "centigrade", offset=_F("273.15"))
_unit("temperature", "°F", _F(5, 9), "f", "fahrenheit", "degf", offset=_F("459.67") * _F(5, 9))
_unit("temperature", "K", 1, "k", "kelvin", "kelvins")


def _lookup_unit(text: str) -> _Unit:
    if not isinstance(text, str) or not text.strip():
        raise ToolError("a unit is empty")
    key = " ".join(text.strip().lower().replace("°", " ").replace("º", " ").split())
    key = key.removeprefix("degrees ").removeprefix("degree ").removeprefix("deg ").strip(". ")
    for candidate in (key, key.replace(" ", ""), key.replace("per", "/").replace(" ", "")):
        if candidate in _UNITS:
            return _UNITS[candidate]
    raise ToolError(f"unknown unit {text!r}; known units: {_known_units()}")


@functools.cache
def _known_units() -> str:
    by_category: dict[str, list[str]] = {}
    for unit in _UNITS.values():
        names = by_category.setdefault(unit.category, [])
        if unit.name not in names:
            names.append(unit.name)
    return "; ".join(f"{cat}: {', '.join(names)}" for cat, names in by_category.items())


def convert_units(value: float, from_unit: str, to_unit: str) -> dict[str, Any]:
    """Convert ``value`` between units of one kind: length, mass, volume (US customary and imperial gallons and
    pints), speed, time (a year is 365.25 days, a month a twelfth of it) or temperature (°C, °F, K).

    Returns ``value``, ``from_unit``/``to_unit`` (canonical names), ``category``, ``result`` (rounded to 10
    significant digits) and ``text`` ("10 km = 6.213711922 mi"). ``ToolError`` for unknown units, units of
    different kinds, and temperatures below absolute zero.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ToolError(f"value must be a finite number, got {value!r}")
    src, dst = _lookup_unit(from_unit), _lookup_unit(to_unit)
    if src.category != dst.category:
        raise ToolError(f"cannot convert {src.category} ({src.name}) to {dst.category} ({dst.name})")
    amount = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    base = amount * src.factor + src.offset
    if src.category == "temperature" and base < 0:
        raise ToolError(f"{value} {src.name} is below absolute zero")
    converted = (base - dst.offset) / dst.factor
    text = _decimal_text(converted, 10)
    result: float | int = int(converted) if converted.denominator == 1 and abs(converted) < 2**53 else float(text)
    return {
        "value": value, "from_unit": src.name, "to_unit": dst.name, "category": src.category,
        "result": result, "text": f"{_decimal_text(amount, 15)} {src.name} = {text} {dst.name}",
    }


# --------------------------------------------------------------------------------------------------------------
# registration


def builtin_tools(*, now: Callable[[], dt.datetime] | None = None, timeout_s: float = 2.0) -> list[Tool]:
    """The built-in tools: ``get_current_time``, ``calculate``, ``convert_units``. ``now`` fixes the clock
    (tests)."""

    def current_time(timezone: str = "UTC") -> dict[str, Any]:
        return get_current_time(timezone, now=now)

    return [
        # descriptions worded for small models too (measured with the tool suite, rtc_agent.bench.tools): "a
        # city or time zone", and calculate pointing unit questions to convert_units
        Tool("get_current_time", "Get the current date and time in a city or time zone.", GET_CURRENT_TIME_SCHEMA,
             handler=current_time, timeout_s=timeout_s),
        Tool("calculate", "Evaluate arithmetic on plain numbers exactly: + - * / ^, percent, sqrt(). Not for "
             "units: use convert_units to convert between units.",
             CALCULATE_SCHEMA, handler=calculate, timeout_s=timeout_s),
        Tool("convert_units", "Convert an amount from one unit to another (km to miles, kg to pounds, °F to °C, "
             "gallons to liters, feet to cm): length, mass, volume, speed, time or temperature. Use it for every "
             "unit conversion.", CONVERT_UNITS_SCHEMA, handler=convert_units, timeout_s=timeout_s),
    ]


def register_builtins(registry: ToolRegistry, *, now: Callable[[], dt.datetime] | None = None) -> ToolRegistry:
    """Add the built-in tools to ``registry`` and return it."""
    for tool in builtin_tools(now=now):
        registry.add(tool)
    return registry
