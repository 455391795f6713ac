"""``close_peer_connection``: close an aiortc peer connection in bounded time, whatever state it is in.

aiortc's ``RTCPeerConnection.close()`` can raise part-way (a transceiver left without a transport) and then never
completes on a second call, or wait for good on a transport task that never started. Every owner of a peer
connection (a server session, an SFU participant, a client peer) closes it through here, so its own close always
ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiortc import RTCPeerConnection

__all__ = ["PC_CLOSE_TIMEOUT_S", "close_peer_connection"]

log = logging.getLogger(__name__)

#: How long a regular ``close()`` may take before the transports are stopped one by one.
PC_CLOSE_TIMEOUT_S = 5.0


async def close_peer_connection(pc: RTCPeerConnection, timeout: float = PC_CLOSE_TIMEOUT_S, *,
                                name: str = "") -> bool:
    """Close ``pc`` within ``timeout`` seconds. When ``close()`` raises or hangs, stop whatever transports the
    connection still holds, each within a second. Never raises (but the caller's own ``CancelledError``); returns
    whether the regular close worked. ``name`` labels the warning."""
    try:
        await asyncio.wait_for(pc.close(), timeout)
        return True
    except Exception as exc:  # TimeoutError included
        log.warning("%s: closing the peer connection failed (%s); stopping its transports",
                    name or "peer connection", repr(exc)[:200])
    transports: list[Any] = []
    for attr in ("_RTCPeerConnection__dtlsTransports", "_RTCPeerConnection__iceTransports"):
        transports.extend(getattr(pc, attr, ()) or ())
    sctp = getattr(pc, "_RTCPeerConnection__sctp", None)
    if sctp is not None:
        transports.insert(0, sctp)
    for transport in transports:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(transport.stop(), 1.0)
    with contextlib.suppress(Exception):
        pc.remove_all_listeners()
    return False
