"""``SocketSpeech``: the :class:`~rtc_agent.apps.base.SpeechSink` of a WebSocket session.

Nothing is played here: speech written to an utterance is encoded at once to the session's output format
(PCM16 24 kHz or G.711) and held per response until the translator takes it (:meth:`SocketSpeech.take`) to send
as ``response.output_audio.delta`` events, in chunks of ``CHUNK_MS``, right before the transcript of the same
clause. So audio leaves as fast as it is synthesized, as OpenAI's WebSocket API does; the client plays it.

Playback state is what the server can know: an utterance counts as "sent" once written and is done when it is
finished (or cleared by barge-in or ``response.cancel``). ``pause``/``resume`` do nothing (there is no playback
to hold); a WebSocket client reports what it played with ``conversation.item.truncate``.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
from collections import defaultdict

import numpy as np

from rtc_agent.realtime.audio import FORMAT_RATES, OutputEncoder

__all__ = ["CHUNK_MS", "SocketSpeech", "SocketUtterance"]

CHUNK_MS = 200
_ids = itertools.count(1)


class SocketUtterance:
    """One utterance (see :class:`~rtc_agent.apps.base.UtteranceHandle`); ``sent_ms`` is what was written."""

    def __init__(self, sink: SocketSpeech, sample_rate: int, utterance_id: str | None,
                 response_id: str | None) -> None:
        self.id = utterance_id or f"utt_ws{next(_ids)}"
        self.response_id = response_id
        self.sample_rate = sample_rate
        self.started = False
        self.finished = False
        self.cleared = False
        self.written_samples = 0
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._sink = sink
        self._encoder = OutputEncoder(sink.format, sample_rate)

    @property
    def sent_ms(self) -> int:
        return self.written_samples * 1000 // self.sample_rate

    def write(self, pcm: np.ndarray) -> None:
        if self.finished or self.cleared:
            raise RuntimeError(f"utterance {self.id} is already {'cleared' if self.cleared else 'finished'}")
        pcm = np.asarray(pcm).reshape(-1)
        self.started = True
        self.written_samples += pcm.size
        self._sink._hold(self.response_id, self._encoder.encode(pcm))

    def finish(self) -> None:
        if self.finished:
            return
        self._sink._hold(self.response_id, self._encoder.flush())
        self.finished = True
        self._settle()

    def _drop(self) -> None:
        self.cleared = self.finished = True
        self._settle()

    def _settle(self) -> None:
        if not self.done.done():
            self.done.set_result(self.sent_ms)
        self._sink._active.discard(self)


class SocketSpeech:
    """Reply audio for a WebSocket client (see the module docstring). ``format`` is the output format of
    utterances started from now on (``audio/pcm``, ``audio/pcmu`` or ``audio/pcma``)."""

    def __init__(self, format: str = "audio/pcm") -> None:
        self.format = format
        self._active: set[SocketUtterance] = set()
        self._held: defaultdict[str, bytearray] = defaultdict(bytearray)
        self.written_ms = 0

    def start_utterance(self, sample_rate: int, *, utterance_id: str | None = None,
                        response_id: str | None = None) -> SocketUtterance:
        utterance = SocketUtterance(self, sample_rate, utterance_id, response_id)
        self._active.add(utterance)
        return utterance

    def play(self, pcm: np.ndarray, sample_rate: int, *, utterance_id: str | None = None,
             response_id: str | None = None) -> SocketUtterance:
        utterance = self.start_utterance(sample_rate, utterance_id=utterance_id, response_id=response_id)
        utterance.write(pcm)
        utterance.finish()
        return utterance

    def clear(self) -> list[SocketUtterance]:
        """Drop every unfinished utterance and the audio not yet taken."""
        cut = list(self._active)
        for utterance in cut:
            self._held.pop(utterance.response_id or "", None)
            utterance._drop()
        return cut

    def pause(self) -> None:
        """Nothing to hold: the client plays the audio."""

    def resume(self) -> None:
        """See :meth:`pause`."""

    @property
    def busy(self) -> bool:
        return bool(self._active)

    def _hold(self, response_id: str | None, data: bytes) -> None:
        if data:
            self._held[response_id or ""] += data

    def take(self, response_id: str) -> list[str]:
        """The audio of ``response_id`` written since the last call, as base64 chunks of ``CHUNK_MS``."""
        data = self._held.pop(response_id, None)
        if not data:
            return []
        rate = FORMAT_RATES[self.format]
        size = rate * CHUNK_MS // 1000 * (2 if self.format == "audio/pcm" else 1)
        self.written_ms += len(data) * 1000 // (rate * (2 if self.format == "audio/pcm" else 1))
        return [base64.b64encode(bytes(data[i:i + size])).decode("ascii") for i in range(0, len(data), size)]
