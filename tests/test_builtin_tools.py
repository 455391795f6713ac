"""Built-in server tools: time in a zone, exact arithmetic, unit conversion; and their registration."""

from __future__ import annotations

import datetime as dt

import pytest

from rtc_agent.apps.agent.builtin_arithmetic import calculate
from rtc_agent.apps.agent.builtin_clock import get_current_time
from rtc_agent.apps.agent.builtin_tools import builtin_tools, register_builtins
from rtc_agent.apps.agent.builtin_units import convert_units
from rtc_agent.apps.agent.tool import ToolError
from rtc_agent.apps.agent.tool_registry import ToolRegistry
from rtc_agent.apps.agent.tool_schema import validate

FIXED = dt.datetime(2026, 7, 4, 16, 5, 9, tzinfo=dt.UTC)


def fixed() -> dt.datetime:
    return FIXED


# time ----------------------------------------------------------------------------------------------------------


def test_time_in_a_zone() -> None:
    out = get_current_time("Europe/Paris", now=fixed)
    assert out == {
        "timezone": "Europe/Paris", "iso": "2026-07-04T18:05:09+02:00", "date": "Saturday, July 4, 2026",
        "time": "6:05 PM", "time_24h": "18:05", "utc_offset": "+02:00", "abbreviation": "CEST",
    }


@pytest.mark.parametrize(("name", "zone", "offset"), [
    ("UTC", "UTC", "+00:00"),
    ("gmt", "UTC", "+00:00"),
    ("america/new_york", "America/New_York", "-04:00"),
    ("New York", "America/New_York", "-04:00"),
    ("tokyo", "Asia/Tokyo", "+09:00"),
    ("Asia/Kolkata", "Asia/Kolkata", "+05:30"),
])
def test_zone_names_are_forgiving(name: str, zone: str, offset: str) -> None:
    out = get_current_time(name, now=fixed)
    assert out["timezone"] == zone and out["utc_offset"] == offset


def test_midnight_and_noon_in_12_hour_form() -> None:
    assert get_current_time("UTC", now=lambda: FIXED.replace(hour=0, minute=7))["time"] == "12:07 AM"
    assert get_current_time("UTC", now=lambda: FIXED.replace(hour=12, minute=0))["time"] == "12:00 PM"


@pytest.mark.parametrize("name", ["Mars/Olympus", "Nowhere", "../../etc/passwd", "Europe/"])
def test_unknown_zone(name: str) -> None:
    with pytest.raises(ToolError, match="unknown time zone"):
        get_current_time(name, now=fixed)


# arithmetic ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("expression", "result", "exact"), [
    ("1 + 2 * 3", "7", True),
    ("(1 + 2) * 3", "9", True),
    ("0.1 + 0.2", "0.3", True),
    ("1/3", "1/3", True),
    ("1/3 * 3", "1", True),
    ("7 / 4", "1.75", True),
    ("2 ^ 10", "1024", True),
    ("2 ** 3 ** 2", "512", True),  # right-associative
    ("-2 ^ 2", "-4", True),  # power binds tighter than unary minus
    ("(-2) ^ 2", "4", True),
    ("2 ^ -2", "0.25", True),
    ("--3", "3", True),
    ("-(4 - 10) / 4", "1.5", True),
    ("1.5e3 / 7", "1500/7", True),
    ("15% * 80", "12", True),
    ("3 × 4 ÷ 6 − 1", "1", True),  # noqa: RUF001 - spoken-style operators are accepted
    ("sqrt(16/9)", "4/3", True),
    ("sqrt(2)", "1.4142135623731", False),
    ("8 ^ (2/3)", "4", True),
    ("abs(-2.5)", "2.5", True),
    ("123456789012345678901234567890 * 10", "1234567890123456789012345678900", True),
])
def test_calculate(expression: str, result: str, exact: bool) -> None:
    out = calculate(expression)
    assert out["result"] == result and out["exact"] is exact and out["expression"] == expression


def test_calculate_decimal_field() -> None:
    assert calculate("2/3")["decimal"] == "0.666666666667"
    assert calculate("10^30")["decimal"] == "1e+30"


@pytest.mark.parametrize(("expression", "fragment"), [
    ("1 / 0", "division by zero"),
    ("0 ^ -1", "division by zero"),
    ("2 +", "ends too early"),
    ("(1 + 2", "missing ')'"),
    ("1 + 2)", "unexpected ')'"),
    ("2 $ 3", "unexpected character '$'"),
    ("import os", "unknown name 'import'"),
    ("__import__('os')", "unexpected character"),
    ("__import__(1)", "unknown name '__import__'"),
    ("sqrt 4", "needs parentheses"),
    ("sqrt(-4)", "not a real number"),
    ("(-8) ^ 0.5", "not a real number"),
    ("9 ^ 99999", "limited"),
    ("10 ^ 5000 ^ 2", "limited"),
    ("999999999 ^ 9999", "too large"),
    ("", "empty"),
    ("1" * 600, "longer than 500"),
])
def test_calculate_errors(expression: str, fragment: str) -> None:
    with pytest.raises(ToolError) as err:
        calculate(expression)
    assert fragment in str(err.value)


# units ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "src", "dst", "result"), [
    (10, "km", "mi", 6.213711922),
    (1, "mile", "feet", 5280),
    (12, "inches", "cm", 30.48),
    (1, "lb", "kg", 0.45359237),
    (16, "oz", "lb", 1),
    (1, "stone", "pounds", 14),
    (1, "gallon", "liters", 3.785411784),
    (1, "imperial gallon", "l", 4.54609),
    (2, "cups", "ml", 473.176473),
    (3, "tsp", "tbsp", 1),
    (100, "km/h", "mph", 62.13711922),
    (1, "knot", "km/h", 1.852),
    (60, "miles per hour", "m/s", 26.8224),
    (90, "minutes", "hours", 1.5),
    (1, "week", "days", 7),
    (1, "year", "days", 365.25),
    (100, "°C", "°F", 212),
    (32, "F", "C", 0),
    (98.6, "degrees Fahrenheit", "celsius", 37),
    (0, "K", "C", -273.15),
    (-40, "celsius", "fahrenheit", -40),
])
def test_convert_units(value: float, src: str, dst: str, result: float) -> None:
    out = convert_units(value, src, dst)
    assert out["result"] == pytest.approx(result, rel=1e-9)
    assert out["text"].startswith(f"{value} {out['from_unit']} = ")


def test_convert_units_output_fields() -> None:
    assert convert_units(1.5, "h", "min") == {
        "value": 1.5, "from_unit": "h", "to_unit": "min", "category": "time", "result": 90, "text": "1.5 h = 90 min"}


@pytest.mark.parametrize(("value", "src", "dst", "fragment"), [
    (1, "parsec", "m", "unknown unit 'parsec'; known units: length: m, km"),
    (1, "km", "furlongs", "unknown unit 'furlongs'"),
    (1, "km", "kg", "cannot convert length (km) to mass (kg)"),
    (1, "°C", "m/s", "cannot convert temperature"),
    (-300, "C", "K", "below absolute zero"),
    (-1, "K", "C", "below absolute zero"),
    (float("nan"), "m", "km", "finite number"),
    (1, "", "m", "empty"),
])
def test_convert_units_errors(value: float, src: str, dst: str, fragment: str) -> None:
    with pytest.raises(ToolError) as err:
        convert_units(value, src, dst)
    assert fragment in str(err.value)


# registration --------------------------------------------------------------------------------------------------


def test_schemas_are_valid_and_match_the_functions() -> None:
    tools = {t.name: t for t in builtin_tools(now=fixed)}
    assert set(tools) == {"get_current_time", "calculate", "convert_units"}
    assert validate({"timezone": "UTC"}, tools["get_current_time"].parameters) == []
    assert validate({}, tools["get_current_time"].parameters) == []
    assert validate({"expression": "1+1"}, tools["calculate"].parameters) == []
    assert validate({"value": 3, "from_unit": "m", "to_unit": "ft"}, tools["convert_units"].parameters) == []
    assert validate({"value": "3", "from_unit": "m", "to_unit": "ft"}, tools["convert_units"].parameters)


async def test_builtins_run_through_the_registry() -> None:
    registry = register_builtins(ToolRegistry(), now=fixed)
    time_result = await registry.run("c1", "get_current_time", {"timezone": "Asia/Tokyo"})
    assert time_result.ok and time_result.output["iso"] == "2026-07-05T01:05:09+09:00"
    calc = await registry.run("c2", "calculate", {"expression": "(2 + 3) / 4"})
    assert calc.ok and calc.output["result"] == "1.25"
    bad_unit = await registry.run("c3", "convert_units", {"value": 1, "from_unit": "m", "to_unit": "parsec"})
    assert not bad_unit.ok and bad_unit.error_type == "tool_error" and "unknown unit 'parsec'" in bad_unit.error
    bad_args = await registry.run("c4", "calculate", {"expr": "1"})
    assert bad_args.error_type == "invalid_arguments"
