"""What a ``room.signal`` may carry from one participant's browser to another's, and how fast.

A signal is media signaling between browsers: ``kind`` offer/answer/candidate and a ``payload`` of at most
:data:`MAX_SIGNAL_BYTES` of JSON. Only the fields a browser uses are relayed, with their types checked
(``invalid_signal``). Each sender may send :data:`SIGNAL_BURST` signals at once and :data:`SIGNAL_RATE` per second
(its :class:`SignalBucket`).
"""

from __future__ import annotations

import json
import time
from typing import Any

from rtc_agent.errors import InvalidRequest, PayloadTooLarge

MAX_SIGNAL_BYTES = 32 * 1024  # an SDP offer with audio + video is 4-12 KB
SIGNAL_RATE = 30.0  # signals per second per sender (refill)
SIGNAL_BURST = 120  # an offer plus a burst of trickled candidates for every peer
CANDIDATE_KEYS = {"candidate": str, "sdpMid": str, "sdpMLineIndex": int, "usernameFragment": str}


class SignalBucket:
    """A token bucket: ``burst`` signals at once, refilled at ``rate`` per second."""

    def __init__(self, rate: float = SIGNAL_RATE, burst: int = SIGNAL_BURST) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = float(burst)
        self.at = time.monotonic()

    def take(self) -> bool:
        """Spend one signal; False (nothing spent) when the bucket is empty."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


def relayed_payload(kind: str, payload: Any) -> Any:
    """The payload to relay for a signal of ``kind``: ``signal_too_large`` past :data:`MAX_SIGNAL_BYTES` of JSON,
    ``invalid_signal`` when it is not JSON or not what a browser sends for that kind."""
    try:
        size = len(json.dumps(payload, separators=(",", ":")).encode())
    except (TypeError, ValueError):
        raise InvalidRequest("room.signal payload must be JSON", code="invalid_signal") from None
    if size > MAX_SIGNAL_BYTES:
        raise PayloadTooLarge(f"room.signal payload of {size} bytes exceeds {MAX_SIGNAL_BYTES}",
                              code="signal_too_large")
    return _clean_payload(kind, payload)


def _clean_payload(kind: str, payload: Any) -> Any:
    """Only the fields a browser uses, with their types checked (``invalid_signal``)."""
    if kind in ("offer", "answer"):
        ok = (isinstance(payload, dict) and isinstance(payload.get("sdp"), str) and payload["sdp"].strip()
              and payload.get("type", kind) == kind)
        if not ok:
            raise InvalidRequest(f"a {kind} signal needs payload {{type: {kind!r}, sdp: '...'}}", code="invalid_signal")
        return {"type": kind, "sdp": payload["sdp"]}
    if payload is None:  # the end of candidates
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("candidate", ""), str):
        raise InvalidRequest("a candidate signal needs an RTCIceCandidateInit payload (or null)", code="invalid_signal")
    out = {}
    for key, kind_of in CANDIDATE_KEYS.items():
        value = payload.get(key)
        if value is None:
            continue
        if not isinstance(value, kind_of) or isinstance(value, bool):
            raise InvalidRequest(f"candidate field {key} has the wrong type", code="invalid_signal")
        out[key] = value
    return out
