"""A shorter audio jitter buffer for aiortc receivers.

aiortc hands an audio frame to the decoder only once four more have arrived (``prefetch=4``), which adds 80 ms
to every received voice frame. On the paths this server expects (a LAN, a TURN relay, a nearby client) packets
rarely arrive out of order, and every one of those milliseconds delays the VAD: speech onsets (barge-in) and the
end of a turn. :func:`shorten_audio_jitter` rebuilds a receiver's jitter buffer before any packet has arrived:

- ``frames`` 1-4: aiortc's buffer with that prefetch. It knows a frame is complete only when a packet of the
  next frame arrives, so even 1 waits one packet (20 ms).
- ``frames`` 0: :class:`ArrivalAudioBuffer`, which hands each packet on as it arrives (an Opus packet is a whole
  frame) and drops a packet that arrives after a later one.

aiortc has no public knob for it, so this reaches into the receiver and, should aiortc change, leaves the
receiver as it is and says so in the log.
"""

from __future__ import annotations

import logging
from typing import Any

from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.utils import uint16_add

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
    setattr(receiver, _ATTRIBUTE, ArrivalAudioBuffer() if frames == 0 else JitterBuffer(capacity=16, prefetch=frames))
    return True


class ArrivalAudioBuffer(JitterBuffer):
    """An audio "jitter buffer" without delay: each packet is a frame, handed to the decoder when it arrives.

    A duplicate, or a packet older than the last one handed on (reordered), is dropped; a gap (a lost packet)
    is not waited for.
    """

    def __init__(self) -> None:
        super().__init__(capacity=16)
        self._last: int | None = None
        self.dropped = 0

    def add(self, packet: Any) -> tuple[bool, JitterFrame | None]:
        if self._last is not None:
            ahead = uint16_add(packet.sequence_number, -self._last)
            if ahead == 0 or ahead >= 0x8000:  # the same packet again, or one from before the last
                self.dropped += 1
                return False, None
        self._last = packet.sequence_number
        return False, JitterFrame(data=packet._data, timestamp=packet.timestamp)
