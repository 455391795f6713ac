"""The scripted speech recognizer: a worker engine of the ``asr`` kind whose answers come from the test."""

from __future__ import annotations

import threading
from collections.abc import Callable

from rtc_agent.engines.asr import Segment, TranscribeRequest, Transcript
from rtc_agent.worker import Engine

__all__ = ["Answer", "ScriptedASR", "transcript_of"]

#: What a script gives for one request: the text heard, a whole transcript, or the request's failure.
Answer = str | Transcript | Exception


def transcript_of(text: str, request: TranscribeRequest) -> Transcript:
    """``text`` as a recognizer would report it for ``request``: one segment over the whole audio (with Whisper's
    leading space), the request's language, the prefix applied."""
    return Transcript(text=text, segments=[Segment(0.0, request.duration_s, " " + text)], language=request.language,
                      prefix_applied=True, audio_s=request.duration_s)


class ScriptedASR(Engine):
    """Answers each :class:`TranscribeRequest` with ``answer(request)``; records what it was asked.

    - ``answer`` returns a text (made a transcript by :func:`transcript_of`), a :class:`Transcript` (as it is) or
      an ``Exception`` (that request fails, the others of the batch succeed). The default hears nothing.
    - ``delay_s``: each batch takes this long (a busy engine), unless :meth:`release` (or ``close``) was called:
      then it answers at once, so a test never leaves an engine thread sleeping behind it.
    - ``requests``: every request in arrival order; ``batches``: the requests of each ``run_batch`` call.
    """

    def __init__(self, answer: Callable[[TranscribeRequest], Answer] = lambda request: "", *,
                 delay_s: float = 0.0) -> None:
        self.answer = answer
        self.delay_s = delay_s
        self.released = threading.Event()
        self.requests: list[TranscribeRequest] = []
        self.batches: list[list[TranscribeRequest]] = []
        self._lock = threading.Lock()

    def load(self, progress: Callable[[str], None]) -> None:
        """Nothing to load."""

    def run_batch(self, requests: list[TranscribeRequest]) -> list[Transcript | Exception]:
        """One transcript (or the scripted ``Exception``) per request, in order, after ``delay_s``."""
        with self._lock:
            self.batches.append(list(requests))
            self.requests.extend(requests)
        if self.delay_s > 0:
            self.released.wait(self.delay_s)
        out: list[Transcript | Exception] = []
        for request in requests:
            result = self.answer(request)
            out.append(transcript_of(result, request) if isinstance(result, str) else result)
        return out

    def release(self) -> None:
        """End every delay now (running and later batches answer at once)."""
        self.released.set()

    def close(self) -> None:
        """Release any batch still waiting out its delay."""
        self.release()
