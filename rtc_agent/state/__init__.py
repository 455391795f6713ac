"""The state store: what the server keeps beyond one request (client tokens, sign-ins, join links, rate limits,
room leases, transcripts) behind one async interface, :class:`StateStore`, in memory, in an SQLite file (the
default: survives a restart) or on a Redis server (shared by several servers). :func:`open_store` picks one from
``state_url``."""

from rtc_agent.state.memory import MemoryStore
from rtc_agent.state.open import open_store, sqlite_path
from rtc_agent.state.sqlite import SqliteStore, default_state_path
from rtc_agent.state.store import Limits, StateLimitError, StateStore, StateUnavailable

__all__ = [
    "Limits",
    "MemoryStore",
    "SqliteStore",
    "StateLimitError",
    "StateStore",
    "StateUnavailable",
    "default_state_path",
    "open_store",
    "sqlite_path",
]
