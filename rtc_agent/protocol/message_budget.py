"""``MessageBudget``: how many messages and bytes one connection may send, checked before anything is parsed.

Two token buckets, one for messages and one for bytes, each refilled at its rate per second and holding at most
``burst_s`` seconds of it (the bytes bucket holds at least one message of ``max_message_bytes``, so the largest
legal message always fits in a full bucket). A message takes one message token and its size in byte tokens (at
most a full bucket: a message over the largest legal size is the decoder's to refuse, with its own error), or
nothing: when either bucket cannot pay, the message is dropped whole.

:meth:`MessageBudget.admit` says what the transport does with one message (:class:`Verdict`): ``ADMIT`` it,
``DROP`` it silently, ``NOTIFY`` (drop it and tell the client with one ``rate_limited`` error; at most one such
verdict per ``notify_period_s``), or ``CLOSE`` the connection: it has been over its budget for
``overload_close_s`` seconds with no quiet second (no drop for ``QUIET_S``) in between. After ``CLOSE`` every
later message is ``CLOSE`` too (the transport is closing).

A transport that can push back instead (a WebSocket: not reading is TCP backpressure) may wait
:meth:`MessageBudget.retry_after` seconds and then :meth:`MessageBudget.take` the message: it is then delayed,
not dropped, but it still counted as over the budget (so a client kept waiting for ``overload_close_s`` is
closed all the same).

The cost of a dropped message is a few arithmetic operations: callers check the budget first and do nothing
else for a dropped message (no decode, no reply). No I/O, no clock of its own: ``now`` is the caller's
``time.monotonic()`` (or a scripted clock in tests).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["QUIET_S", "BudgetLimits", "MessageBudget", "Verdict"]

QUIET_S = 1.0  # a drop-free stretch this long ends an overload episode


class Verdict(enum.Enum):
    ADMIT = "admit"
    DROP = "drop"
    NOTIFY = "notify"
    CLOSE = "close"


@dataclass(frozen=True)
class BudgetLimits:
    """The rates of one connection's budget; a rate of 0 means no limit of that kind."""

    messages_per_s: float = 200.0
    bytes_per_s: float = 1024 * 1024
    burst_s: float = 2.0
    overload_close_s: float = 5.0  # 0: never close, only drop
    max_message_bytes: int = 0  # the largest legal message: the bytes bucket holds at least this much

    @classmethod
    def from_settings(cls, settings: Any, *, max_message_bytes: int) -> BudgetLimits:
        """The limits of ``settings`` (``channel_messages_per_s``, ``channel_bytes_per_s``, ``channel_burst_s``,
        ``channel_overload_close_s``) for a channel whose largest legal message is ``max_message_bytes``."""
        return cls(messages_per_s=float(settings.channel_messages_per_s),
                   bytes_per_s=float(settings.channel_bytes_per_s), burst_s=float(settings.channel_burst_s),
                   overload_close_s=float(settings.channel_overload_close_s),
                   max_message_bytes=max_message_bytes)

    def over_budget(self, consequence: str) -> str:
        """The words of a ``rate_limited`` error: the rates, what happens to the excess, and what to do."""
        return (f"more than {self.messages_per_s:g} messages or {self.bytes_per_s:g} bytes a second: "
                f"{consequence}; slow down")


class MessageBudget:
    """Per-connection message and byte budget (see the module docstring). Not thread-safe: one connection, one
    event loop."""

    notify_period_s = 1.0

    def __init__(self, limits: BudgetLimits, now: float) -> None:
        self.limits = limits
        burst = max(limits.burst_s, 0.0)
        self._msg_cap = max(1.0, limits.messages_per_s * burst) if limits.messages_per_s > 0 else math.inf
        self._byte_cap = (max(limits.bytes_per_s * burst, float(limits.max_message_bytes), 1.0)
                          if limits.bytes_per_s > 0 else math.inf)
        self._msgs = self._msg_cap
        self._bytes = self._byte_cap
        self._at = now
        self._notified_at = -math.inf
        self._over_since: float | None = None  # start of the current overload episode
        self._last_drop = -math.inf
        self.closed = False
        self.admitted = 0
        self.delayed = 0  # admitted by take() after a wait
        self.dropped = 0
        self.dropped_bytes = 0

    @property
    def limited(self) -> bool:
        """Whether any limit applies (a budget with both rates 0 admits everything)."""
        return self._msg_cap != math.inf or self._byte_cap != math.inf

    def admit(self, size: int, now: float) -> Verdict:
        """The verdict on one message of ``size`` bytes arriving at ``now`` (see the module docstring)."""
        if self.closed:
            self.dropped += 1
            return Verdict.CLOSE
        if self._pay(size, now):
            self.admitted += 1
            return Verdict.ADMIT
        return self._drop(size, now)

    def take(self, size: int, now: float) -> bool:
        """Pay now for a message :meth:`admit` refused a moment ago (the caller held it back meanwhile). True: it
        is admitted after all (and no longer counts as dropped); False: it stays dropped."""
        if self.closed or not self._pay(size, now):
            return False
        self.admitted += 1
        self.delayed += 1
        self.dropped -= 1
        self.dropped_bytes -= size
        return True

    def _pay(self, size: int, now: float) -> bool:
        elapsed = now - self._at
        if elapsed > 0:
            self._at = now
            lim = self.limits
            self._msgs = min(self._msg_cap, self._msgs + elapsed * lim.messages_per_s)
            self._bytes = min(self._byte_cap, self._bytes + elapsed * lim.bytes_per_s)
        cost = min(size, self._byte_cap)  # an oversized message passes a full bucket: the decoder refuses it
        if self._msgs >= 1.0 and self._bytes >= cost:
            self._msgs -= 1.0
            self._bytes -= cost
            return True
        return False

    def _drop(self, size: int, now: float) -> Verdict:
        self.dropped += 1
        self.dropped_bytes += size
        if self._over_since is None or now - self._last_drop > QUIET_S:
            self._over_since = now
        self._last_drop = now
        close_s = self.limits.overload_close_s
        if close_s > 0 and now - self._over_since >= close_s:
            self.closed = True
            return Verdict.CLOSE
        if now - self._notified_at >= self.notify_period_s:
            self._notified_at = now
            return Verdict.NOTIFY
        return Verdict.DROP

    def retry_after(self, size: int = 0) -> float:
        """Seconds until a message of ``size`` bytes would be admitted at the current fill (0 when it would be)."""
        lim = self.limits
        waits = [0.0]
        if self._msgs < 1.0 and lim.messages_per_s > 0:
            waits.append((1.0 - self._msgs) / lim.messages_per_s)
        if self._bytes < size and lim.bytes_per_s > 0:
            waits.append((min(size, self._byte_cap) - self._bytes) / lim.bytes_per_s)
        return max(waits)

    def stats(self) -> dict[str, int]:
        return {"admitted": self.admitted, "delayed": self.delayed, "dropped": self.dropped,
                "dropped_bytes": self.dropped_bytes}
