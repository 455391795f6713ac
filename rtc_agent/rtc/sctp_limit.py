"""The advertised data-channel message size, enforced while a message is reassembled.

aiortc advertises ``a=max-message-size:262144`` but reassembles whatever arrives: a 20 MB message was buffered
chunk by chunk until SCTP's receive window (1 MiB) closed, and then the association stalled (the message could
neither complete nor be dropped) until the session's heartbeat was lost. :func:`limit_inbound_messages` swaps
the class of a live ``RTCSctpTransport`` for :class:`SizeLimitedSctpTransport`, whose DATA-chunk handler refuses
a message as soon as its fragments pass the limit: the fragments held so far are released (the window opens
again), the rest of that message is acknowledged and discarded as it arrives, later messages on the stream are
delivered in order, and the stream's data channel emits ``message_too_large`` (the message's size so far).

Ordered messages (the only kind our clients send on ``events`` and ``oai-events``) are skipped exactly: all
fragments of one ordered message share its stream sequence number. An unordered message has no such key, so an
oversized one closes its data channel instead. A subclass swap on the instance (rather than constructing our own
transport) because ``RTCPeerConnection`` creates the transport itself and offers no factory hook.
"""

from __future__ import annotations

import logging

from aiortc.rtcsctptransport import (
    LOCAL_MAX_MESSAGE_SIZE,
    SCTP_DATA_FIRST_FRAG,
    SCTP_DATA_LAST_FRAG,
    SCTP_DATA_UNORDERED,
    DataChunk,
    InboundStream,
    RTCSctpTransport,
)
from aiortc.utils import uint16_add, uint16_gt

__all__ = ["LOCAL_MAX_MESSAGE_SIZE", "MESSAGE_TOO_LARGE", "SizeLimitedSctpTransport", "limit_inbound_messages"]

log = logging.getLogger(__name__)

MESSAGE_TOO_LARGE = "message_too_large"  # the data channel's event: handler(size_so_far: int)
MAX_REFUSED_PER_STREAM = 64  # refused messages not yet passed by the stream's sequence; past this: close


class SizeLimitedSctpTransport(RTCSctpTransport):
    """An ``RTCSctpTransport`` that refuses inbound messages over ``inbound_limit`` bytes (see the module
    docstring). Instances are made by :func:`limit_inbound_messages`, never constructed directly."""

    inbound_limit: int

    async def _receive_data_chunk(self, chunk: DataChunk) -> None:
        self._sack_needed = True
        if self._mark_received(chunk.tsn):
            return
        stream_id = chunk.stream_id
        inbound = self._get_inbound_stream(stream_id)
        ordered = not (chunk.flags & SCTP_DATA_UNORDERED)
        refused = _refused(inbound)
        if getattr(inbound, "refuse_all", False) or (ordered and (
                chunk.stream_seq in refused or uint16_gt(inbound.sequence_number, chunk.stream_seq))):
            # a fragment of a refused message (or of one already passed): acknowledged, not kept
            await self._reset_deferred_streams()
            return
        inbound.add_chunk(chunk)
        self._advertised_rwnd -= len(chunk.user_data)
        whole = chunk.flags & SCTP_DATA_FIRST_FRAG and chunk.flags & SCTP_DATA_LAST_FRAG
        size = len(chunk.user_data) if whole else sum(
            len(c.user_data) for c in inbound.reassembly if _same_message(c, chunk, ordered))
        if size > self.inbound_limit:
            self._refuse(inbound, chunk, ordered, size)
        await self._deliver(inbound, refused)
        await self._reset_deferred_streams()

    def _refuse(self, inbound: InboundStream, chunk: DataChunk, ordered: bool, size: int) -> None:
        kept = [c for c in inbound.reassembly if not _same_message(c, chunk, ordered)]
        self._advertised_rwnd += sum(len(c.user_data) for c in inbound.reassembly) - sum(
            len(c.user_data) for c in kept)
        inbound.reassembly = kept
        refused = _refused(inbound)
        channel = self._data_channels.get(chunk.stream_id)
        log.warning("refusing an inbound data-channel message on stream %d past %d bytes (limit %d)",
                    chunk.stream_id, size, self.inbound_limit)
        if ordered and len(refused) < MAX_REFUSED_PER_STREAM:
            refused.add(chunk.stream_seq)
            if channel is not None:
                channel.emit(MESSAGE_TOO_LARGE, size)
            return
        # unordered (no key to skip the rest of the message by) or too many refusals: give up on the stream
        inbound.refuse_all = True  # type: ignore[attr-defined]
        self._advertised_rwnd += sum(len(c.user_data) for c in inbound.reassembly)
        inbound.reassembly = []
        if channel is not None:
            channel.emit(MESSAGE_TOO_LARGE, size)
            channel.close()

    async def _deliver(self, inbound: InboundStream, refused: set[int]) -> None:
        """Deliver complete messages, stepping the stream's sequence over refused messages as they come up."""
        while True:
            for message in inbound.pop_messages():
                self._advertised_rwnd += len(message[2])
                await self._receive(*message)
            if inbound.sequence_number not in refused:
                return
            refused.discard(inbound.sequence_number)
            inbound.sequence_number = uint16_add(inbound.sequence_number, 1)


def _refused(inbound: InboundStream) -> set[int]:
    """Sequence numbers of the stream's refused ordered messages not yet passed. Kept on the ``InboundStream``
    itself: aiortc drops that object when the peer resets the stream, and a new channel on the id starts clean."""
    refused = getattr(inbound, "refused_seqs", None)
    if refused is None:
        refused = inbound.refused_seqs = set()  # type: ignore[attr-defined]
    return refused


def _same_message(c: DataChunk, chunk: DataChunk, ordered: bool) -> bool:
    """Whether fragment ``c`` belongs to ``chunk``'s message: the same sequence number for ordered messages;
    for unordered ones every unordered fragment held counts (complete ones are delivered at once)."""
    if ordered:
        return not (c.flags & SCTP_DATA_UNORDERED) and c.stream_seq == chunk.stream_seq
    return bool(c.flags & SCTP_DATA_UNORDERED)


def limit_inbound_messages(transport: RTCSctpTransport, limit: int = LOCAL_MAX_MESSAGE_SIZE) -> None:
    """Make ``transport`` refuse inbound messages over ``limit`` bytes (idempotent; see the module docstring)."""
    if not isinstance(transport, SizeLimitedSctpTransport):
        transport.__class__ = SizeLimitedSctpTransport
    transport.inbound_limit = limit  # type: ignore[attr-defined]
