"""The state store's contract (rtc_agent.state), held by every backend: memory, SQLite and a real Redis server
(Debian's ``redis-server``, started here on a free port with no persistence; skipped only when it is missing).

Time is real here (Redis keeps its own clock): what expires gets a short time to live and the test waits past it;
what must still be there gets a long one, so no assertion depends on how fast this machine is."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from rtc_agent.config import Settings
from rtc_agent.redact import redact_text
from rtc_agent.state import Limits, MemoryStore, SqliteStore, StateLimitError, StateStore, open_store, sqlite_path
from tests.conftest import free_port
from tests.redis_server import run_redis

SHORT = 0.25  # seconds: a time to live the test waits past
LONG = 600.0


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with run_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


BACKENDS = ["memory", "sqlite", "redis"]


async def open_backend(request: pytest.FixtureRequest, tmp_path: Path, limits: Limits) -> StateStore:
    """A fresh store of the backend ``request.param`` names (one of :data:`BACKENDS`) under ``limits``: SQLite in
    ``tmp_path``, Redis on the :func:`redis_url` server, emptied first."""
    if request.param == "memory":
        return MemoryStore(limits)
    if request.param == "sqlite":
        return SqliteStore(tmp_path / "state.db", limits)
    from rtc_agent.state.redis_store import RedisStore

    made = RedisStore(request.getfixturevalue("redis_url"), limits)
    await made._redis.flushdb()
    return made


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    made = await open_backend(request, tmp_path, Limits(max_value_bytes=2048, max_list_items=5))
    yield made
    await made.close()


async def test_values_expire_exactly_and_delete(store: StateStore):
    await store.put("a", "alpha", LONG)
    await store.put("b", "beta", SHORT)
    await store.put("c", "gamma", LONG)
    assert await store.get("a") == "alpha" and await store.get("missing") is None
    await asyncio.sleep(SHORT + 0.1)
    assert await store.get("b") is None  # past its time to live: gone, swept or not
    assert await store.consume("b") is None and not await store.delete("b")
    await store.put("a", "alpha2", LONG)  # replaced
    assert await store.get("a") == "alpha2"
    assert await store.delete("c") and await store.get("c") is None
    await store.sweep()
    assert await store.get("a") == "alpha2"


async def test_fifty_concurrent_consumes_have_exactly_one_winner(store: StateStore):
    for key in ("one", "two"):
        await store.put(key, f"value-{key}", LONG)
        results = await asyncio.gather(*(store.consume(key) for _ in range(50)))
        assert [r for r in results if r is not None] == [f"value-{key}"]
        assert await store.get(key) is None


async def test_counters_are_atomic_and_windows_end(store: StateStore):
    results = await asyncio.gather(*(store.increment("hits", LONG) for _ in range(40)))
    assert sorted(count for count, _ in results) == list(range(1, 41))  # every caller saw its own count
    assert all(0 < left <= LONG for _, left in results)
    count, _ = await store.increment("hits", LONG, amount=10)
    assert count == 50
    first, left = await store.increment("short", SHORT)
    assert first == 1 and left <= SHORT
    await asyncio.sleep(SHORT + 0.1)
    assert (await store.increment("short", SHORT))[0] == 1  # a new window


async def test_pace_is_a_token_bucket_shared_by_concurrent_callers(store: StateStore):
    waits = await asyncio.gather(*(store.pace("rate:a", 60.0, 3) for _ in range(10)))
    assert sum(w == 0.0 for w in waits) == 3  # a burst of three, whatever the interleaving
    assert all(55.0 < w <= 60.0 for w in waits if w)  # the next one in about one interval
    assert await store.pace("rate:b", 60.0, 3) == 0.0  # another key has its own bucket
    assert await store.pace("rate:fast", SHORT, 1) == 0.0
    assert await store.pace("rate:fast", SHORT, 1) > 0
    await asyncio.sleep(SHORT + 0.1)
    assert await store.pace("rate:fast", SHORT, 1) == 0.0  # refilled


async def test_leases_have_slots_owners_and_expiry(store: StateStore):
    assert await store.acquire("room:standup", "node-a", LONG) == 0.0
    wait = await store.acquire("room:standup", "node-b", LONG)
    assert LONG - 5 < wait <= LONG  # held by another until its lease ends
    assert await store.acquire("room:standup", "node-a", LONG) == 0.0  # the owner renews
    assert await store.renew("room:standup", "node-a", LONG) and not await store.renew("room:standup", "node-b", 1)
    assert set(await store.holders("room:standup")) == {"node-a"}
    assert await store.release("room:standup", "node-a") and not await store.release("room:standup", "node-a")
    assert await store.acquire("room:standup", "node-b", SHORT) == 0.0
    await asyncio.sleep(SHORT + 0.1)
    assert not await store.renew("room:standup", "node-b", LONG)  # expired
    assert await store.acquire("room:standup", "node-c", LONG) == 0.0
    results = await asyncio.gather(*(store.acquire("quota", f"owner-{i}", LONG, slots=7) for i in range(30)))
    assert sum(r == 0.0 for r in results) == 7 and len(await store.holders("quota")) == 7
    left = await store.holders("quota")
    assert all(LONG - 5 < s <= LONG for s in left.values())


async def test_lists_append_in_order_are_bounded_and_expire(store: StateStore):
    lengths = [await store.append("transcript", f"line {i}", LONG) for i in range(5)]
    assert lengths == [1, 2, 3, 4, 5]
    with pytest.raises(StateLimitError, match="state_max_list_items"):
        await store.append("transcript", "one too many", LONG)
    assert await store.items("transcript") == [f"line {i}" for i in range(5)]  # nothing lost by the refusal
    with pytest.raises(StateLimitError):
        await store.append("other", "x", LONG, max_items=0)
    await store.append("short", "a", SHORT)
    await asyncio.sleep(SHORT + 0.1)
    assert await store.items("short") == [] and await store.items("never") == []
    assert await store.append("short", "b", LONG) == 1  # a new list


async def test_bad_input_gets_a_clear_error_and_loses_nothing(store: StateStore):
    await store.put("kept", "value", LONG)
    with pytest.raises(StateLimitError, match="state_max_value_bytes"):
        await store.put("kept", "x" * 3000, LONG)
    with pytest.raises(ValueError, match="time to live"):
        await store.put("kept", "other", 0)
    with pytest.raises(ValueError, match="key"):
        await store.get("")
    with pytest.raises(TypeError):
        await store.put("kept", b"bytes", LONG)  # type: ignore[arg-type]
    assert await store.get("kept") == "value"
    assert (await store.put("u", "ß ünïcode ✓", LONG), await store.get("u"))[1] == "ß ünïcode ✓"


async def test_sweep_frees_expired_entries(store: StateStore):
    await store.put("v", "x", SHORT)
    await store.increment("n", SHORT)
    await store.acquire("l", "o", SHORT)
    await store.append("list", "i", SHORT)
    await store.put("kept", "y", LONG)
    await asyncio.sleep(SHORT + 0.1)
    dropped = await store.sweep()
    assert dropped == (0 if store.kind == "redis" else 4)  # Redis expires keys itself
    assert await store.get("kept") == "y"


# ------------------------------------------------------------------ opening


def test_open_store_picks_the_backend_by_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert sqlite_path("sqlite:") == tmp_path / "xdg" / "rtc-agent" / "state.db"
    assert sqlite_path("sqlite:///srv/state.db") == Path("/srv/state.db")
    assert Settings().state_url == "sqlite:"  # the embedded store is the default
    assert isinstance(open_store(Settings(state_url="memory:")), MemoryStore)
    made = open_store(Settings(state_url=f"sqlite:///{tmp_path}/x.db", state_max_value_bytes=4096))
    assert isinstance(made, SqliteStore) and made.limits.max_value_bytes == 4096
    with pytest.raises(ValueError, match="state_url"):
        open_store(Settings(state_url="postgres://db"))


async def test_the_sqlite_file_is_private_and_outlives_the_store(tmp_path: Path):
    path = tmp_path / "deep" / "state.db"
    first = SqliteStore(path)
    await first.put("link", "kept", LONG)
    await first.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    again = SqliteStore(path)
    assert await again.get("link") == "kept"
    await again.close()


async def test_the_redis_password_never_shows(redis_url: str):
    from rtc_agent.state.redis_store import RedisStore

    made = open_store(Settings(state_url=redis_url))
    assert isinstance(made, RedisStore) and "state-test-password-123" not in made.url
    assert "state-test-password-123" not in redact_text(f"connecting to {redis_url} failed")
    await made.close()
    down = RedisStore(f"redis://:state-test-password-123@127.0.0.1:{free_port()}/0")
    with pytest.raises(Exception) as failed:
        await down.get("x")
    assert getattr(failed.value, "code", "") == "state_unavailable" and failed.value.status == 503
    assert "state-test-password-123" not in str(failed.value)
    await down.close()
