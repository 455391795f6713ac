"""Getting an SFU room back after its Janus connection dropped (Janus restarted, the network went).

:func:`reconnect` is the one task a :class:`~rtc_agent.apps.call.sfu.bridge.SfuBridge` runs for a lost
connection. The room's media through Janus ends at once (its subscriptions close, the speakers' ``feed_id`` is
cleared, the interpreter feeds stop publishing; their speech stays) and the members hear ``room.sfu.updated``
with ``sfu_state: "reconnecting"``. Then, after ``sfu_reconnect_delay_s`` (doubled after each failure, at most
``sfu_reconnect_max_delay_s``) and at most ``sfu_reconnect_attempts`` times, a new connection re-opens the room
(:meth:`SfuBridge.reopen`: the same Janus room id, created again when Janus lost it, every member's token allowed
again, rtc-agent's participant joined again, which re-subscribes to every speaker publishing) and re-publishes
the interpreter feeds. Success is ``room.sfu.updated`` with ``sfu_state: "connected"``, ``reconnects`` one more
and the new ``interpreter_feeds``; the pages' own Janus connections rejoin the same room id by themselves. When
every attempt failed the state is ``lost`` (announced the same way) and the room goes on without SFU audio,
until a participant asks to join (refused, 502 ``sfu_reconnecting``), which starts one more round.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

from rtc_agent.rtc.sfu import JanusError

log = logging.getLogger(__name__)


def backoff(first_s: float, most_s: float, attempts: int) -> Iterator[float]:
    """The waits before each of ``attempts`` reconnects: ``first_s``, doubled each time, at most ``most_s``."""
    delay = first_s
    for _ in range(max(0, attempts)):
        yield min(delay, most_s)
        delay = min(delay * 2, most_s)


async def reconnect(bridge: Any, reason: str) -> None:
    """Reconnect ``bridge`` (an SfuBridge whose connection was lost for ``reason``); see the module. Never raises
    but CancelledError (the bridge closing)."""
    s = bridge.settings
    bridge.sfu_state = "reconnecting"
    bridge.drop_media()
    bridge.announce()
    log.warning("room %s: the SFU connection is gone (%s); reconnecting", bridge.name, reason)
    for attempt, delay in enumerate(backoff(float(s.sfu_reconnect_delay_s), float(s.sfu_reconnect_max_delay_s),
                                            int(s.sfu_reconnect_attempts)), start=1):
        await asyncio.sleep(delay)
        if bridge.closed:
            return
        try:
            await bridge.reopen()
        except JanusError as exc:
            log.warning("room %s: SFU reconnect %d failed: %s", bridge.name, attempt, exc)
            continue
        if not bridge.client.connected:  # lost again while re-opening
            log.warning("room %s: SFU reconnect %d lost its connection again", bridge.name, attempt)
            continue
        bridge.reconnects += 1
        bridge.sfu_state = "connected"  # from here a new loss starts a new reconnect (no await until the end)
        bridge.publish_wanted()
        bridge.announce()
        log.info("room %s: the SFU connection is back (attempt %d)", bridge.name, attempt)
        return
    bridge.sfu_state = "lost"
    bridge.announce()
    log.warning("room %s: the SFU could not be reached again; the room goes on without SFU audio", bridge.name)
