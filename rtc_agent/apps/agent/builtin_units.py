"""The built-in ``convert_units`` tool: length, mass, volume, speed, time and temperature, in exact fractions."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from rtc_agent.apps.agent.builtin_arithmetic import decimal_text
from rtc_agent.apps.agent.tool import ToolError

__all__ = ["CONVERT_UNITS_SCHEMA", "convert_units", "unit_aliases"]


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


def unit_aliases() -> list[str]:
    """Every unit name and alias ``convert_units`` knows, lower-cased (``km``, ``kilometres``, ``°f``, ...)."""
    return list(_UNITS)


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
    text = decimal_text(converted, 10)
    result: float | int = int(converted) if converted.denominator == 1 and abs(converted) < 2**53 else float(text)
    return {
        "value": value, "from_unit": src.name, "to_unit": dst.name, "category": src.category,
        "result": result, "text": f"{decimal_text(amount, 15)} {src.name} = {text} {dst.name}",
    }
