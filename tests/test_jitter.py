"""The low-delay audio jitter buffers put into aiortc receivers."""

from __future__ import annotations

from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtp import RtpPacket

from rtc_agent.rtc.jitter import _ATTRIBUTE, ArrivalAudioBuffer, shorten_audio_jitter


def packet(seq: int, data: bytes) -> RtpPacket:
    p = RtpPacket(payload_type=111, sequence_number=seq % 65536, timestamp=seq * 960 % 2**32)
    p._data = data  # type: ignore[attr-defined]  # set by the receiver after depayloading
    return p


def test_each_packet_is_handed_on_as_it_arrives() -> None:
    buffer = ArrivalAudioBuffer()
    out = [buffer.add(packet(seq, bytes([seq % 256])))[1] for seq in (65534, 65535, 0, 2)]  # wraps; 1 is lost
    assert [f.data for f in out if f is not None] == [b"\xfe", b"\xff", b"\x00", b"\x02"]
    assert out[2] is not None and out[2].timestamp == 0
    late, again = buffer.add(packet(1, b"late"))[1], buffer.add(packet(2, b"dup"))[1]
    assert late is None and again is None and buffer.dropped == 2
    assert buffer.add(packet(3, b"\x03"))[1] is not None


def test_aiortc_prefetch_buffer_waits_for_the_next_packet() -> None:
    """Why frames=0 needs its own buffer: aiortc's, even without prefetch, holds a frame until the next arrives."""
    buffer = JitterBuffer(capacity=16, prefetch=0)
    assert buffer.add(packet(10, b"a"))[1] is None
    assert buffer.add(packet(11, b"b"))[1].data == b"a"


class FakeReceiver:
    def __init__(self) -> None:
        setattr(self, _ATTRIBUTE, JitterBuffer(capacity=16, prefetch=4))


def test_shorten_audio_jitter_replaces_the_receivers_buffer() -> None:
    receiver = FakeReceiver()
    assert shorten_audio_jitter(receiver, 0) and isinstance(getattr(receiver, _ATTRIBUTE), ArrivalAudioBuffer)
    receiver = FakeReceiver()
    assert shorten_audio_jitter(receiver, 2) and getattr(receiver, _ATTRIBUTE)._prefetch == 2
    assert not shorten_audio_jitter(object(), 1)  # not an aiortc receiver as we know it: left alone
