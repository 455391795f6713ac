"""``RedisStore``: the state store on a Redis server (``state_url = "redis://..."``), shared by every server that
names the same one, so their join links, sign-ins and rate-limit budgets are one.

Each operation is one Redis command or one Lua script (atomic on the server); time is the Redis server's
(``TIME``, millisecond expiry), so several nodes with drifting clocks still agree. Keys carry the prefix
``rtc-agent:``. Redis expires keys itself: :meth:`sweep` has nothing to do. A server that cannot be reached is
:class:`StateUnavailable` (503), never a half-done write.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from rtc_agent.redact import redact_url, register_url_secrets
from rtc_agent.state.store import Limits, StateStore, StateUnavailable

T = TypeVar("T")
PREFIX = "rtc-agent:"

NOW = "local t = redis.call('TIME') local now = t[1] * 1000 + t[2] / 1000 "
CONSUME = "local v = redis.call('GET', KEYS[1]) if v then redis.call('DEL', KEYS[1]) end return v"
INCREMENT = """local n = redis.call('INCRBY', KEYS[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {n, redis.call('PTTL', KEYS[1])}"""
PACE = NOW + """local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local after = math.max(tonumber(redis.call('GET', KEYS[1]) or now), now) + interval
local wait = after - now - burst * interval
if wait > 0 then return tostring(wait) end
redis.call('SET', KEYS[1], tostring(after), 'PX', math.max(1, math.ceil(after - now)))
return '0'"""
# leases: a sorted set of owners scored by when their lease ends (ms); the key lives as long as its last lease
KEEP_SET = """local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], math.ceil(tonumber(last[2]))) end """
ACQUIRE = NOW + """redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tostring(math.max(tonumber(first[2]) - now, 1))
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) """ + KEEP_SET + "return '0'"
RENEW = NOW + """redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1]) """ + KEEP_SET + "return 1"
RELEASE = NOW + "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) return redis.call('ZREM', KEYS[1], ARGV[1])"
HOLDERS = NOW + """local out = {tostring(now)}
for _, v in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')) do
  out[#out + 1] = v
end
return out"""
APPEND = """local n = redis.call('LLEN', KEYS[1])
if n >= tonumber(ARGV[3]) then return -1 - n end
n = redis.call('RPUSH', KEYS[1], ARGV[1]) redis.call('PEXPIRE', KEYS[1], ARGV[2]) return n"""


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


class RedisStore(StateStore):
    kind = "redis"

    def __init__(self, url: str, limits: Limits | None = None) -> None:
        super().__init__(limits)
        register_url_secrets(url)  # its password is masked in every log line and error
        self.url = redact_url(url)
        self._redis = aioredis.from_url(url, decode_responses=True)
        scripts = {"consume": CONSUME, "increment": INCREMENT, "pace": PACE, "acquire": ACQUIRE, "renew": RENEW,
                   "release": RELEASE, "holders": HOLDERS, "append": APPEND}
        self._scripts = {name: self._redis.register_script(body) for name, body in scripts.items()}

    async def _do(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except RedisError as exc:
            raise StateUnavailable(f"the state store ({self.url}) did not answer: {type(exc).__name__}: {exc}",
                                   retry_after=5) from None

    async def _script(self, name: str, key: str, *args: Any) -> Any:
        return await self._do(self._scripts[name](keys=[PREFIX + key], args=list(args)))

    # --- values ---

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        self._check(key, value, ttl_s)
        await self._do(self._redis.set(PREFIX + key, value, px=_ms(ttl_s)))

    async def get(self, key: str) -> str | None:
        self._check(key)
        return await self._do(self._redis.get(PREFIX + key))

    async def delete(self, key: str) -> bool:
        self._check(key)
        return bool(await self._do(self._redis.delete(PREFIX + key)))

    async def consume(self, key: str) -> str | None:
        self._check(key)
        return await self._script("consume", key)

    # --- counters ---

    async def increment(self, key: str, window_s: float, amount: int = 1) -> tuple[int, float]:
        self._check(key, ttl_s=window_s)
        count, left_ms = await self._script("increment", key, _ms(window_s), int(amount))
        return int(count), max(int(left_ms), 0) / 1000

    async def pace(self, key: str, interval_s: float, burst: float) -> float:
        self._check(key, ttl_s=interval_s)
        return float(await self._script("pace", key, interval_s * 1000, float(burst))) / 1000

    # --- leases ---

    async def acquire(self, key: str, owner: str, ttl_s: float, slots: int = 1) -> float:
        self._check(key, ttl_s=ttl_s)
        return float(await self._script("acquire", key, owner, _ms(ttl_s), int(slots))) / 1000

    async def renew(self, key: str, owner: str, ttl_s: float) -> bool:
        self._check(key, ttl_s=ttl_s)
        return bool(await self._script("renew", key, owner, _ms(ttl_s)))

    async def release(self, key: str, owner: str) -> bool:
        self._check(key)
        return bool(await self._script("release", key, owner))

    async def holders(self, key: str) -> dict[str, float]:
        self._check(key)
        now, *pairs = await self._script("holders", key)
        return {pairs[i]: (float(pairs[i + 1]) - float(now)) / 1000 for i in range(0, len(pairs), 2)}

    # --- lists ---

    async def append(self, key: str, item: str, ttl_s: float, max_items: int | None = None) -> int:
        self._check(key, item, ttl_s)
        cap = self._list_cap(max_items)
        length = int(await self._script("append", key, item, _ms(ttl_s), cap))
        if length < 0:
            raise self._full(-1 - length, cap)
        return length

    async def items(self, key: str) -> list[str]:
        self._check(key)
        return list(await self._do(self._redis.lrange(PREFIX + key, 0, -1)))

    async def close(self) -> None:
        await self._redis.aclose()
