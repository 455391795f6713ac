"""The SCTP size guard (:mod:`rtc_agent.rtc.sctp_limit`) on scripted DATA chunks, through aiortc's own receive
path: an ordered message past the limit is refused while it arrives (its fragments released, the window open
again), later messages are delivered in order even when they arrive first, an unordered oversized message
closes its channel, and normal traffic passes untouched."""

from __future__ import annotations

import types

from aiortc.rtcsctptransport import (
    SCTP_DATA_FIRST_FRAG,
    SCTP_DATA_LAST_FRAG,
    SCTP_DATA_UNORDERED,
    WEBRTC_STRING,
    DataChunk,
    RTCSctpTransport,
)
from pyee import EventEmitter

from rtc_agent.rtc.sctp_limit import MESSAGE_TOO_LARGE, SizeLimitedSctpTransport, limit_inbound_messages

LIMIT = 1000
FRAGMENT = 400
STREAM = 1


class Channel(EventEmitter):
    """What the guard needs of a data channel: events, and ``close()``."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[int] = []
        self.closed = False
        self.on(MESSAGE_TOO_LARGE, self.refused.append)

    def close(self) -> None:
        self.closed = True


class Feed:
    """A guarded transport fed DATA chunks with consecutive TSNs; delivered messages collected."""

    def __init__(self) -> None:
        self.sctp = RTCSctpTransport(types.SimpleNamespace(state="new"))
        limit_inbound_messages(self.sctp, LIMIT)
        self.sctp._last_received_tsn = 0
        self.delivered: list[tuple[int, bytes]] = []
        self.channel = Channel()
        self.sctp._data_channels[STREAM] = self.channel

        async def receive(stream_id: int, pp_id: int, data: bytes) -> None:
            self.delivered.append((stream_id, data))

        self.sctp._receive = receive
        self.tsn = 0

    def chunks(self, seq: int, data: bytes, *, ordered: bool = True) -> list[DataChunk]:
        pieces = [data[i:i + FRAGMENT] for i in range(0, len(data), FRAGMENT)] or [b""]
        out = []
        for i, piece in enumerate(pieces):
            self.tsn += 1
            chunk = DataChunk(flags=(SCTP_DATA_FIRST_FRAG if i == 0 else 0)
                              | (SCTP_DATA_LAST_FRAG if i == len(pieces) - 1 else 0)
                              | (0 if ordered else SCTP_DATA_UNORDERED))
            chunk.tsn, chunk.stream_id, chunk.stream_seq, chunk.protocol = self.tsn, STREAM, seq, WEBRTC_STRING
            chunk.user_data = piece
            out.append(chunk)
        return out

    async def feed(self, chunks: list[DataChunk]) -> None:
        for chunk in chunks:
            await self.sctp._receive_data_chunk(chunk)


async def test_normal_messages_pass_and_the_window_stays_whole():
    f = Feed()
    assert isinstance(f.sctp, SizeLimitedSctpTransport)
    await f.feed(f.chunks(0, b"a" * LIMIT) + f.chunks(1, b"b" * 10))
    assert f.delivered == [(STREAM, b"a" * LIMIT), (STREAM, b"b" * 10)]
    assert f.sctp._advertised_rwnd == 1024 * 1024 and not f.channel.refused


async def test_an_oversized_ordered_message_is_refused_as_it_arrives_and_the_stream_goes_on():
    f = Feed()
    big = f.chunks(0, b"x" * (20 * LIMIT))  # 50 fragments
    after = f.chunks(1, b"after")
    await f.feed(big[:3])  # 1200 bytes: past the limit at the third fragment
    assert f.channel.refused == [3 * FRAGMENT]
    assert f.sctp._advertised_rwnd == 1024 * 1024  # nothing of it held
    await f.feed(after)  # arrives before the rest of the refused message: still delivered (sequence stepped)
    await f.feed(big[3:])
    assert f.delivered == [(STREAM, b"after")]
    assert not f.sctp._inbound_streams[STREAM].reassembly
    assert f.sctp._advertised_rwnd == 1024 * 1024
    await f.feed(f.chunks(2, b"next"))
    assert f.delivered[-1] == (STREAM, b"next") and f.channel.refused == [3 * FRAGMENT] and not f.channel.closed


async def test_a_refused_message_behind_a_gap_waits_its_turn():
    f = Feed()
    first = f.chunks(0, b"first")
    big = f.chunks(1, b"x" * (3 * LIMIT))
    last = f.chunks(2, b"last")
    await f.feed(big + last)  # message 0 is missing: nothing can be delivered yet, the refusal is remembered
    assert f.delivered == [] and f.channel.refused
    await f.feed(first)
    assert f.delivered == [(STREAM, b"first"), (STREAM, b"last")]
    assert f.sctp._advertised_rwnd == 1024 * 1024


async def test_an_oversized_unordered_message_closes_its_channel():
    f = Feed()
    await f.feed(f.chunks(0, b"u" * (3 * LIMIT), ordered=False))
    assert f.channel.closed and f.channel.refused
    assert f.delivered == [] and f.sctp._advertised_rwnd == 1024 * 1024
