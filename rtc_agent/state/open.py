"""``open_store``: the state store a ``state_url`` names (``memory:``, ``sqlite:``, ``sqlite:///PATH``,
``redis://...``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rtc_agent.redact import register_url_secrets
from rtc_agent.state.memory import MemoryStore
from rtc_agent.state.sqlite import SqliteStore, default_state_path
from rtc_agent.state.store import Limits, StateStore

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:`` URL: ``sqlite:`` the default (:func:`default_state_path`), ``sqlite:///PATH`` an
    absolute path, ``sqlite:PATH`` a path from the working directory."""
    rest = url[len("sqlite:"):]
    if not rest:
        return default_state_path()
    if rest.startswith("//"):  # sqlite:///abs/path -> /abs/path
        rest = rest[2:]
    return Path(rest).expanduser()


def open_store(settings: Any) -> StateStore:
    """The store ``settings.state_url`` names, with the settings' limits. Opening connects nothing yet: the
    first operation does (an unreachable Redis then answers 503 ``state_unavailable``)."""
    url = str(getattr(settings, "state_url", "memory:"))
    limits = Limits(max_value_bytes=int(getattr(settings, "state_max_value_bytes", Limits.max_value_bytes)),
                    max_list_items=int(getattr(settings, "state_max_list_items", Limits.max_list_items)))
    if url == "memory:":
        return MemoryStore(limits)
    if url.startswith("sqlite:"):
        return SqliteStore(sqlite_path(url), limits)
    if url.startswith(REDIS_SCHEMES):
        register_url_secrets(url)
        from rtc_agent.state.redis_store import RedisStore  # the redis package is only imported when it is used

        return RedisStore(url, limits)
    raise ValueError("state_url must be memory:, sqlite:, sqlite:///PATH or redis://HOST:PORT[/DB]")
