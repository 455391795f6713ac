"""The built-in ``get_current_time`` tool: the current date and time in a time zone or city (no network)."""

from __future__ import annotations

import datetime as dt
import functools
import zoneinfo
from collections.abc import Callable
from typing import Any

from rtc_agent.apps.agent.tool import ToolError

__all__ = ["GET_CURRENT_TIME_SCHEMA", "get_current_time", "resolve_timezone"]


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
