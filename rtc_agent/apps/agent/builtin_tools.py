"""The built-in server tools, which need no network: the current time, exact arithmetic, unit conversion.

Each tool is a plain function with a JSON schema, in its own module (:mod:`.builtin_clock`,
:mod:`.builtin_arithmetic`, :mod:`.builtin_units`); this module makes them :class:`~rtc_agent.apps.agent.tool.Tool`
objects for a :class:`~rtc_agent.apps.agent.tool_registry.ToolRegistry`, each with the matcher of the requests it
answers (:mod:`rtc_agent.apps.agent.tool_guard`). Errors a model can fix (unknown time
zone or unit, division by zero, a syntax error) are raised as :class:`~rtc_agent.apps.agent.tool.ToolError` with
a message that says what to send instead.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from rtc_agent.apps.agent.builtin_arithmetic import CALCULATE_SCHEMA, calculate
from rtc_agent.apps.agent.builtin_clock import GET_CURRENT_TIME_SCHEMA, get_current_time
from rtc_agent.apps.agent.builtin_units import CONVERT_UNITS_SCHEMA, convert_units
from rtc_agent.apps.agent.tool import Tool
from rtc_agent.apps.agent.tool_guard.arithmetic_request import asks_for_arithmetic
from rtc_agent.apps.agent.tool_guard.clock_request import asks_for_time
from rtc_agent.apps.agent.tool_guard.units_request import asks_for_conversion
from rtc_agent.apps.agent.tool_registry import ToolRegistry

__all__ = ["builtin_tools", "register_builtins"]


def builtin_tools(*, now: Callable[[], dt.datetime] | None = None, timeout_s: float = 2.0) -> list[Tool]:
    """The built-in tools: ``get_current_time``, ``calculate``, ``convert_units``. ``now`` fixes the clock
    (tests)."""

    def current_time(timezone: str = "UTC") -> dict[str, Any]:
        return get_current_time(timezone, now=now)

    return [
        # descriptions worded for small models too (measured with the tool suite, rtc_agent.bench.tools): "a
        # city or time zone", and calculate pointing unit questions to convert_units
        Tool("get_current_time", "Get the current date and time in a city or time zone.", GET_CURRENT_TIME_SCHEMA,
             handler=current_time, timeout_s=timeout_s, asked_by=asks_for_time),
        Tool("calculate", "Evaluate arithmetic on plain numbers exactly: + - * / ^, percent, sqrt(). Not for "
             "units: use convert_units to convert between units.",
             CALCULATE_SCHEMA, handler=calculate, timeout_s=timeout_s, asked_by=asks_for_arithmetic),
        Tool("convert_units", "Convert an amount from one unit to another (km to miles, kg to pounds, °F to °C, "
             "gallons to liters, feet to cm): length, mass, volume, speed, time or temperature. Use it for every "
             "unit conversion.", CONVERT_UNITS_SCHEMA, handler=convert_units, timeout_s=timeout_s,
             asked_by=asks_for_conversion),
    ]


def register_builtins(registry: ToolRegistry, *, now: Callable[[], dt.datetime] | None = None) -> ToolRegistry:
    """Add the built-in tools to ``registry`` and return it."""
    for tool in builtin_tools(now=now):
        registry.add(tool)
    return registry
