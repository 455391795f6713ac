"""``SqliteStore``: the state store in one SQLite file (the embedded default, ``state_url = "sqlite:"``).

What it keeps survives a restart of the server. The file (and its directory, ``0700``) is made ``0600``: it holds
digests of credentials, never their values, but who may sign in is still nobody else's business. The blocking
``sqlite3`` calls run on one thread of their own, one at a time, each operation in one ``BEGIN IMMEDIATE``
transaction: atomic among this process's callers and against other processes on the same file (WAL mode, a busy
timeout). Reads check expiry themselves; :meth:`sweep` deletes the expired rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from rtc_agent.state.store import Clock, Limits, StateStore

T = TypeVar("T")
BUSY_TIMEOUT_MS = 5000

SCHEMA = """
CREATE TABLE IF NOT EXISTS kv_values (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS counters (key TEXT PRIMARY KEY, n REAL NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS leases (key TEXT NOT NULL, owner TEXT NOT NULL, expires_at REAL NOT NULL,
                                   PRIMARY KEY (key, owner));
CREATE INDEX IF NOT EXISTS leases_by_end ON leases (key, expires_at);
CREATE TABLE IF NOT EXISTS lists (key TEXT PRIMARY KEY, length INTEGER NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS list_items (key TEXT NOT NULL, seq INTEGER NOT NULL, item TEXT NOT NULL,
                                       PRIMARY KEY (key, seq));
"""
EXPIRING_TABLES = ("kv_values", "counters", "leases")


def default_state_path() -> Path:
    """``$XDG_STATE_HOME/rtc-agent/state.db``, else ``~/.local/state/rtc-agent/state.db``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rtc-agent" / "state.db"


def _create_private(path: Path) -> None:
    """Make ``path``'s directory (0700 where new) and the file itself 0600, before SQLite opens it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an older file made with a looser mode is tightened too
    finally:
        os.close(fd)


class SqliteStore(StateStore):
    kind = "sqlite"

    def __init__(self, path: str | Path | None = None, limits: Limits | None = None, *,
                 clock: Clock = time.time) -> None:
        super().__init__(limits)
        self.path = Path(path) if path is not None else default_state_path()
        self.url = f"sqlite:///{self.path}"
        self.clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="state-sqlite")
        self._db: sqlite3.Connection | None = None  # made on the store's thread, used only there
        self._closed = False

    # --- the thread ---

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            _create_private(self.path)
            db = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: safe from a crash; a power cut may lose the last commits
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.executescript(SCHEMA)
            self._db = db
        return self._db

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise RuntimeError("the state store is closed")

        def in_tx() -> T:
            with self._tx() as db:
                return fn(db, self.clock(), *args)

        return await asyncio.get_running_loop().run_in_executor(self._executor, in_tx)

    # --- values ---

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        self._check(key, value, ttl_s)
        await self._run(lambda db, now: db.execute(
            "INSERT OR REPLACE INTO kv_values VALUES (?, ?, ?)", (key, value, now + ttl_s)))

    @staticmethod
    def _live_value(db: sqlite3.Connection, now: float, key: str) -> str | None:
        row = db.execute("SELECT value FROM kv_values WHERE key = ? AND expires_at > ?", (key, now)).fetchone()
        return row[0] if row else None

    async def get(self, key: str) -> str | None:
        self._check(key)
        return await self._run(self._live_value, key)

    async def delete(self, key: str) -> bool:
        self._check(key)

        def op(db: sqlite3.Connection, now: float) -> bool:
            live = self._live_value(db, now, key) is not None
            db.execute("DELETE FROM kv_values WHERE key = ?", (key,))
            return live

        return await self._run(op)

    async def consume(self, key: str) -> str | None:
        self._check(key)

        def op(db: sqlite3.Connection, now: float) -> str | None:
            value = self._live_value(db, now, key)
            db.execute("DELETE FROM kv_values WHERE key = ?", (key,))
            return value

        return await self._run(op)

    # --- counters ---

    @staticmethod
    def _counter(db: sqlite3.Connection, key: str) -> tuple[float, float] | None:
        row = db.execute("SELECT n, expires_at FROM counters WHERE key = ?", (key,)).fetchone()
        return (row[0], row[1]) if row else None

    async def increment(self, key: str, window_s: float, amount: int = 1) -> tuple[int, float]:
        self._check(key, ttl_s=window_s)

        def op(db: sqlite3.Connection, now: float) -> tuple[int, float]:
            count, ends = self._counter(db, key) or (0.0, 0.0)
            if ends <= now:
                count, ends = 0.0, now + window_s
            count += amount
            db.execute("INSERT OR REPLACE INTO counters VALUES (?, ?, ?)", (key, count, ends))
            return int(count), ends - now

        return await self._run(op)

    async def pace(self, key: str, interval_s: float, burst: float) -> float:
        self._check(key, ttl_s=interval_s)

        def op(db: sqlite3.Connection, now: float) -> float:
            tat = (self._counter(db, key) or (now, 0.0))[0]
            after = max(tat, now) + interval_s
            wait = after - now - burst * interval_s
            if wait > 0:
                return wait
            db.execute("INSERT OR REPLACE INTO counters VALUES (?, ?, ?)", (key, after, after))
            return 0.0

        return await self._run(op)

    # --- leases ---

    @staticmethod
    def _live_holders(db: sqlite3.Connection, now: float, key: str) -> dict[str, float]:
        db.execute("DELETE FROM leases WHERE key = ? AND expires_at <= ?", (key, now))
        rows = db.execute("SELECT owner, expires_at FROM leases WHERE key = ?", (key,)).fetchall()
        return {owner: ends for owner, ends in rows}

    async def acquire(self, key: str, owner: str, ttl_s: float, slots: int = 1) -> float:
        self._check(key, ttl_s=ttl_s)

        def op(db: sqlite3.Connection, now: float) -> float:
            db.execute("DELETE FROM leases WHERE key = ? AND expires_at <= ?", (key, now))
            mine = db.execute("SELECT 1 FROM leases WHERE key = ? AND owner = ?", (key, owner)).fetchone()
            count, first = db.execute("SELECT COUNT(*), MIN(expires_at) FROM leases WHERE key = ?", (key,)).fetchone()
            if mine is None and count >= slots:
                return max(first - now, 1e-3)
            db.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?)", (key, owner, now + ttl_s))
            return 0.0

        return await self._run(op)

    async def renew(self, key: str, owner: str, ttl_s: float) -> bool:
        self._check(key, ttl_s=ttl_s)
        return await self._run(lambda db, now: db.execute(
            "UPDATE leases SET expires_at = ? WHERE key = ? AND owner = ? AND expires_at > ?",
            (now + ttl_s, key, owner, now)).rowcount > 0)

    async def release(self, key: str, owner: str) -> bool:
        self._check(key)
        return await self._run(lambda db, now: db.execute(
            "DELETE FROM leases WHERE key = ? AND owner = ? AND expires_at > ?", (key, owner, now)).rowcount > 0)

    async def holders(self, key: str) -> dict[str, float]:
        self._check(key)
        held = await self._run(self._live_holders, key)
        now = self.clock()
        return {owner: ends - now for owner, ends in held.items()}

    # --- lists ---

    async def append(self, key: str, item: str, ttl_s: float, max_items: int | None = None) -> int:
        self._check(key, item, ttl_s)
        cap = self._list_cap(max_items)

        def op(db: sqlite3.Connection, now: float) -> int:
            row = db.execute("SELECT length, expires_at FROM lists WHERE key = ?", (key,)).fetchone()
            length = row[0] if row and row[1] > now else 0
            if row and row[1] <= now:
                db.execute("DELETE FROM list_items WHERE key = ?", (key,))
            if length >= cap:
                raise self._full(length, cap)
            db.execute("INSERT INTO list_items VALUES (?, ?, ?)", (key, length, item))
            db.execute("INSERT OR REPLACE INTO lists VALUES (?, ?, ?)", (key, length + 1, now + ttl_s))
            return length + 1

        return await self._run(op)

    async def items(self, key: str) -> list[str]:
        self._check(key)

        def op(db: sqlite3.Connection, now: float) -> list[str]:
            if db.execute("SELECT 1 FROM lists WHERE key = ? AND expires_at > ?", (key, now)).fetchone() is None:
                return []
            return [r[0] for r in db.execute("SELECT item FROM list_items WHERE key = ? ORDER BY seq", (key,))]

        return await self._run(op)

    # --- upkeep ---

    async def sweep(self) -> int:
        def op(db: sqlite3.Connection, now: float) -> int:
            dropped = sum(db.execute(f"DELETE FROM {table} WHERE expires_at <= ?", (now,)).rowcount
                          for table in EXPIRING_TABLES)
            db.execute("DELETE FROM list_items WHERE key IN (SELECT key FROM lists WHERE expires_at <= ?)", (now,))
            return dropped + db.execute("DELETE FROM lists WHERE expires_at <= ?", (now,)).rowcount

        return await self._run(op)

    async def close(self) -> None:
        if self._closed:
            return

        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._closed = True
        self._executor.shutdown(wait=False)
