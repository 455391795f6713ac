"""A shorter audio jitter buffer for aiortc receivers.

aiortc hands an audio frame to the decoder only once four more have arrived (``prefetch=4``), which adds 80 ms
to every received voice frame. On the paths this server expects (a LAN, a TURN relay, a nearby client) packets
rarely arrive out of order, and every one of those 80 ms delays the VAD: speech onsets (barge-in) and the end of
a turn. :func:`shorten_audio_jitter` rebuilds a receiver's jitter buffer with a smaller prefetch before any packet
has arrived. aiortc has no public knob for it, so this reaches into the receiver and, should aiortc change, leaves
the receiver as it is and says so in the log.
"""

from __future__ import annotations

import logging
from typing import Any

from aiortc.jitterbuffer import JitterBuffer

log = logging.getLogger(__name__)

_ATTRIBUTE = "_RTCRtpReceiver__jitter_buffer"


def shorten_audio_jitter(receiver: Any, frames: int) -> bool:
    """Make an audio receiver release frames after ``frames`` (0-4) later ones arrived; True when applied."""
    if not 0 <= frames <= 4:
        raise ValueError("audio jitter frames must be 0-4")
    current = getattr(receiver, _ATTRIBUTE, None)
    if not isinstance(current, JitterBuffer) or current.capacity != 16:
        log.warning("this aiortc version keeps its audio jitter buffer differently; leaving it at its default")
        return False
    setattr(receiver, _ATTRIBUTE, JitterBuffer(capacity=16, prefetch=frames))
    return True
