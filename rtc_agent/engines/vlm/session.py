"""The session API every vision backend offers (:class:`VisionSession`) and the output side and bookkeeping
they share (:class:`VisionSessionBase`)."""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from rtc_agent.engines.vlm.outputs import RoundTracker, VisionOutput, render_output

log = logging.getLogger(__name__)

__all__ = ["VisionSession", "VisionSessionBase"]


class VisionSession(Protocol):
    """What the app layer uses: the reference API plus ``poll_event`` and an output listener."""

    @property
    def active(self) -> bool: ...

    @property
    def pending_frames(self) -> int: ...

    def start(self) -> VisionSession: ...

    def push_frame(self, image: Any, timestamp: float | None = None, *, drop_oldest: bool = True) -> bool: ...

    def push_prompt(self, prompt: str) -> None: ...

    def push_prompt_frame(self, prompt: str, image: Any, timestamp: float | None = None, *,
                          drop_oldest: bool = True) -> bool: ...

    def poll_output(self, timeout: float = 0.0) -> str | None: ...

    def poll_event(self, timeout: float = 0.0) -> VisionOutput | None: ...

    def stream_outputs(self, poll_interval: float = 0.1) -> Iterator[str]: ...

    def set_listener(self, listener: Callable[[], None] | None) -> None: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self, timeout: float | None = 5.0) -> None: ...


class VisionSessionBase:
    """Output side and bookkeeping shared by every session implementation.

    Holds the bounded output queue of :class:`VisionOutput` items, the failure state, the timestamp rule and
    the listener. Subclasses implement ``start``, ``push_frame``, ``push_prompt``, ``close``, ``active`` and
    ``pending_frames``, and produce outputs with :meth:`_put` (from their one producer thread).
    """

    def __init__(self, *, output_queue_size: int = 1024, clock: Callable[[], float] = time.monotonic) -> None:
        if output_queue_size < 1:
            raise ValueError("output_queue_size must be at least 1")
        self._clock = clock
        self._outputs: queue.Queue[VisionOutput] = queue.Queue(maxsize=output_queue_size)
        self._closed = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._ts_lock = threading.Lock()
        self._last_timestamp: float | None = None
        self._started_at: float | None = None
        self._listener: Callable[[], None] | None = None
        self._rounds = RoundTracker()
        self.counters: collections.Counter[str] = collections.Counter()
        self._thread: threading.Thread | None = None  # the producer; subclasses start it
        self._on_close: Callable[[], None] | None = None

    # input --------------------------------------------------------------------------------------------------------

    def _admit_frame(self, image: Any, running: bool) -> None:
        """The checks every ``push_frame`` starts with; starts the session on its first frame."""
        self._check_open()
        if image is None:
            raise ValueError("image must not be None")
        if not running:
            self.start()

    def _admit_prompt_frame(self, prompt: str, image: Any, running: bool) -> str:
        """The checks every ``push_prompt_frame`` starts with (the prompt's, then the frame's); returns the prompt."""
        self._check_open()
        prompt = self._check_prompt(prompt)
        self._admit_frame(image, running)
        return prompt

    def _admit_prompt(self, prompt: str, running: bool) -> str:
        """The checks every ``push_prompt`` starts with; returns the prompt and starts the session on its first
        input. An empty prompt raises ``ValueError``."""
        self._check_open()
        prompt = self._check_prompt(prompt)
        if not running:
            self.start()  # type: ignore[attr-defined]
        return prompt

    # closing ----------------------------------------------------------------------------------------------------

    def _join_producer(self, timeout: float | None, what: str) -> None:
        """The end of ``close``: wait for the producer thread (``TimeoutError`` if ``what`` does not stop), or
        release at once when it never started; re-raise a failure of the session."""
        thread = self._thread
        if thread is None:
            if not self._done.is_set():
                self._done.set()
                self._release()
            return
        thread.join(timeout=timeout)
        if thread.is_alive():
            raise TimeoutError(f"{what} did not stop before the timeout")
        self._raise_if_failed()

    def _release(self) -> None:
        """Run the ``on_close`` callback once (it frees the engine's session slot)."""
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            try:
                on_close()
            except Exception:
                log.exception("vision session on_close failed")

    # timestamps -------------------------------------------------------------------------------------------------

    def _frame_timestamp(self, timestamp: float | None) -> float:
        """Resolve ``None`` to seconds since start and enforce non-decreasing timestamps (reference text)."""
        if timestamp is None:
            assert self._started_at is not None
            timestamp = self._clock() - self._started_at
        timestamp = float(timestamp)
        with self._ts_lock:
            if self._last_timestamp is not None and timestamp < self._last_timestamp:
                raise ValueError(f"Frame timestamps must be non-decreasing: {timestamp} < {self._last_timestamp}")
            self._last_timestamp = timestamp
        return timestamp

    @staticmethod
    def _check_prompt(prompt: str) -> str:
        prompt = str(prompt or "")
        if not prompt.strip():
            raise ValueError("prompt must not be empty")
        return prompt

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise RuntimeError("Realtime session is closed")
        if self._done.is_set() and self._error is not None:
            raise RuntimeError("realtime generation failed") from self._error

    # outputs ----------------------------------------------------------------------------------------------------

    def set_listener(self, listener: Callable[[], None] | None) -> None:
        """Call ``listener()`` (from the producer thread) after each output and when the session ends. It must
        be quick and thread-safe, e.g. ``lambda: loop.call_soon_threadsafe(event.set)``."""
        self._listener = listener

    def _notify(self) -> None:
        listener = self._listener
        if listener is not None:
            try:
                listener()
            except Exception:  # a closed event loop, for one
                log.debug("vision session listener failed", exc_info=True)

    def _put(self, items: Sequence[VisionOutput], stop: threading.Event | None = None) -> None:
        """Queue outputs; blocks while the queue is full (backpressure on the producer) until ``stop`` is set."""
        for item in items:
            self.counters[item.kind] += 1
            while True:
                try:
                    self._outputs.put(item, timeout=0.1)
                    break
                except queue.Full:
                    if stop is not None and stop.is_set():
                        self.counters["outputs_discarded"] += 1
                        break
        if items:
            self._notify()

    def _put_piece(self, piece: str, text: str, frame_ts: float | None, prompts: collections.deque[str],
                   stop: threading.Event | None = None) -> None:
        """Queue the outputs of one :class:`ChunkParser` piece of the model's reply, ``frame_ts`` being the last
        frame the model saw; a round start takes the oldest prompt from ``prompts`` (none: spontaneous)."""
        if piece == "text":
            self._put(self._rounds.text(text, frame_ts), stop)
        elif piece == "silence":
            self._put(self._rounds.silence(frame_ts), stop)
        elif piece == "round_start":
            self._put(self._rounds.prompt(prompts.popleft() if prompts else "", frame_ts), stop)
        elif piece == "round_end":
            self._put(self._rounds.end(frame_ts), stop)

    def poll_event(self, timeout: float = 0.0) -> VisionOutput | None:
        """The next output item, waiting up to ``timeout`` seconds; ``None`` when there is none yet.

        Raises ``RuntimeError("realtime generation failed")`` (the cause chained) once the session has failed
        and every output before the failure has been read."""
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
        try:
            item = self._outputs.get_nowait() if timeout == 0 else self._outputs.get(timeout=timeout)
        except queue.Empty:
            self._raise_if_failed()
            return None
        return item

    def poll_output(self, timeout: float = 0.0) -> str | None:
        """The next output string (text, ``<|silence|>``, ``<|round_start|>``, ``<|round_end|>``), as the
        reference's ``poll_output``; ``None`` when none arrived within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            item = self.poll_event(max(0.0, deadline - time.monotonic()) if timeout else 0.0)
            if item is None:
                return None
            text = render_output(item)
            if text is not None:
                return text

    def stream_outputs(self, poll_interval: float = 0.1) -> Iterator[str]:
        """Yield output strings until the session has ended and every output was read; then re-raise a failure."""
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        while not self._done.is_set() or not self._outputs.empty():
            item = self.poll_output(timeout=poll_interval)
            if item is not None:
                yield item
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._done.is_set() and self._error is not None:
            raise RuntimeError("realtime generation failed") from self._error

    @property
    def failed(self) -> BaseException | None:
        """The error that ended the session, if any."""
        return self._error if self._done.is_set() else None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def stats(self) -> dict[str, Any]:
        return {"outputs": dict(self.counters), "pending_outputs": self._outputs.qsize()}

    def __enter__(self) -> VisionSessionBase:
        return self.start()  # type: ignore[attr-defined,no-any-return]

    def __exit__(self, *exc: object) -> None:
        self.close()  # type: ignore[attr-defined]
