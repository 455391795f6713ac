"""The MOSS-VL-Realtime session protocol, independent of any model (DESIGN.md section 5).

:class:`RealtimeVisionSession` has the API of ``MossVLRealtimeSession`` (the reference in the MOSS-VL-Realtime
checkpoint's ``modeling_moss_vl.py``) and owns every policy rule of that protocol; the model behind it is a
:class:`TokenSource`, a small blocking interface that a backend implements (the embedded scene describer, a
transformers model, or a scripted source in tests). Nothing here imports torch, transformers or aiortc.

The rules, as implemented:

- ``push_frame(image, timestamp=None, *, drop_oldest=True) -> bool`` queues a frame; timestamps are seconds and
  must be non-decreasing (``ValueError("Frame timestamps must be non-decreasing: {ts} < {last}")``);
  ``None`` means seconds since :meth:`~RealtimeVisionSession.start`. The frame queue is bounded
  (``frame_queue_size``): when it is full the oldest queued frame is dropped and ``True`` is returned (or
  ``queue.Full`` is raised with ``drop_oldest=False``). An empty prompt raises ``ValueError``.
- One thread per session runs the loop, as the reference does (backends block): decode one token, pace, then
  drain every queued frame and prompt into one segment and splice it into the context.
- Each frame enters the context as
  ``<|vision_start|><|time_start|>{ts:.1f} seconds<|time_end|><|image|><|vision_end|>`` (frames of one drain
  sorted by timestamp). A prompt closes the assistant turn and opens a user turn and a new assistant turn
  (``<|im_end|>\\n<|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n``); when the same drain also
  has frames, ``<|silence|>`` follows each prompt (the trained assistant opener) and is reported as output too.
- ``<|silence|>`` is the only idle signal: after it the loop parks until a frame or a prompt arrives, instead of
  decoding. The ``<|...|>`` token is never sampled (its ids are passed to the source as suppressed).
- Rounds: each drained prompt emits ``<|round_start|>``; a round ends with ``<|round_end|>`` when the model goes
  silent after answering, when the next prompt starts a new round, when generation fails (an error always emits
  ``<|round_end|>``) and when the session closes.
- ``max_tokens_per_turn`` is a cap in tokens per second (default 12, the reference service's default), not a
  length: after each token the loop waits until ``1 / max_tokens_per_turn`` seconds have passed since the
  previous one. ``max_new_tokens`` bounds how many tokens follow one input before the loop parks anyway (the
  allowance is re-armed by every input, as SGLang-Omni does), so a model that never says ``<|silence|>`` cannot
  decode forever.
- Multi-byte text is emitted only whole: token ids are buffered until their decoded text no longer ends in an
  incomplete character (U+FFFD), as the reference does.
- One active realtime session per model instance: backends hold a :class:`SessionSlot`; a second session gets
  :class:`SessionBusy` (the worker's lease turns the same rule into a capacity error before that).

Besides ``poll_output`` (strings: text, ``<|silence|>``, ``<|round_start|>``, ``<|round_end|>``, exactly what the
reference yields) every session offers ``poll_event`` with :class:`VisionOutput` items that carry the round
number, the prompt and the timestamp of the newest frame in the context (what the ``vision.*`` events need).
Spontaneous commentary (text outside a prompted round) is reported as an unprompted round in those items; the
string stream keeps the reference's form and marks only prompted rounds.
"""

from __future__ import annotations

import collections
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "ELLIPSIS",
    "IMAGE_PLACEHOLDER",
    "ROUND_END",
    "ROUND_START",
    "SILENCE",
    "ChatFormat",
    "ChunkParser",
    "MossChatFormat",
    "RealtimeVisionSession",
    "RoundTracker",
    "Segment",
    "SessionBusy",
    "SessionOptions",
    "SessionSlot",
    "TokenPacer",
    "TokenSource",
    "VisionOutput",
    "VisionSession",
    "VisionSessionBase",
    "frame_wrapper",
    "render_output",
]

SILENCE = "<|silence|>"
ELLIPSIS = "<|...|>"
ROUND_START = "<|round_start|>"
ROUND_END = "<|round_end|>"
IMAGE_PLACEHOLDER = "<|image|>"
REPLACEMENT_CHAR = "\ufffd"

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful AI assistant specializing in real-time video analysis. "
    "The video streams to you frame by frame. At every frame, you decide independently "
    "whether to respond or stay silent — output `<|silence|>` when nothing relevant has happened, "
    "and respond when the visual content warrants it."
)
"""The reference service's default system prompt (``run_online_inference.py``)."""

# Control tokens a model or service may put in raw output that are never shown as text.
HIDDEN_TOKENS = frozenset({"<|response|>", "<|assistant|>", "<|im_end|>", "<|im_start|>", "<|endoftext|>",
                           "<|eot_id|>", ELLIPSIS})


def frame_wrapper(timestamp: float, image_token: str = IMAGE_PLACEHOLDER) -> str:
    """The text a frame enters the context as: its timestamp with one decimal, then the image placeholder."""
    return f"<|vision_start|><|time_start|>{timestamp:.1f} seconds<|time_end|>{image_token}<|vision_end|>"


class SessionBusy(RuntimeError):
    """The model instance already runs an active realtime session (one per instance)."""


class SessionSlot:
    """The one-active-session-per-model-instance rule, held by a backend.

    ``acquire()`` raises :class:`SessionBusy` while another session holds the slot; ``release()`` is idempotent
    per acquisition (the session calls it when its loop ends).
    """

    def __init__(self, what: str = "model") -> None:
        self.what = what
        self._lock = threading.Lock()
        self._holder: object | None = None

    @property
    def busy(self) -> bool:
        return self._holder is not None

    def acquire(self, holder: object) -> Callable[[], None]:
        """Take the slot for ``holder``; returns the release function."""
        with self._lock:
            if self._holder is not None:
                raise SessionBusy(f"this {self.what} already has an active realtime session")
            self._holder = holder

        def release() -> None:
            with self._lock:
                if self._holder is holder:
                    self._holder = None

        return release


@dataclass(frozen=True)
class SessionOptions:
    """What a realtime session is opened with (the reference service's ``start`` fields).

    - ``initial_prompt``: the user prompt before any frame (the standing commentary instruction).
    - ``system_prompt``: ``None`` = the backend's default (the reference system prompt).
    - ``frame_queue_size``: frames waiting for the model, at most; the oldest is dropped beyond.
    - ``max_tokens_per_turn``: the decode rate cap in tokens per second (the reference service's default is 12).
    - ``max_new_tokens``: tokens decoded after one input before the loop parks without ``<|silence|>``.
    """

    initial_prompt: str = ""
    system_prompt: str | None = None
    frame_queue_size: int = 8
    max_tokens_per_turn: int = 12
    max_new_tokens: int = 128

    def __post_init__(self) -> None:
        if self.frame_queue_size < 1:
            raise ValueError("frame_queue_size must be at least 1")
        if self.max_tokens_per_turn < 1:
            raise ValueError("max_tokens_per_turn must be at least 1")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")


# --- outputs -----------------------------------------------------------------------------------------------------

OutputKind = Literal["round_start", "text", "silence", "round_end"]


@dataclass(frozen=True, slots=True)
class VisionOutput:
    """One output of a vision session.

    - ``kind``: ``round_start`` | ``text`` | ``silence`` | ``round_end``.
    - ``text``: the delta (``text`` items; whole characters only).
    - ``round``: the round number (1, 2, ...) for ``round_*`` and ``text`` items; ``None`` for ``silence`` and
      for the ``round_end`` of an error that happened outside any round.
    - ``prompted``: the round was opened by a prompt (``False``: spontaneous commentary).
    - ``prompt``: the prompt of a prompted round (``round_start`` items).
    - ``frame_ts``: timestamp (seconds) of the newest frame in the model's context when this was produced.
    - ``error``: set on the ``round_end`` that an error caused.
    """

    kind: OutputKind
    text: str = ""
    round: int | None = None
    prompted: bool = False
    prompt: str | None = None
    frame_ts: float | None = None
    error: str | None = None


def render_output(item: VisionOutput) -> str | None:
    """The reference string form of an output, or ``None`` for items the reference does not emit (the round
    markers of spontaneous commentary)."""
    if item.kind == "text":
        return item.text
    if item.kind == "silence":
        return SILENCE
    if item.kind == "round_start":
        return ROUND_START if item.prompted else None
    return ROUND_END if (item.prompted or item.error is not None) else None


class RoundTracker:
    """Round bookkeeping shared by every session kind: turns prompts, text, silences and errors into
    :class:`VisionOutput` items.

    A round opens on a prompt (prompted) or on text outside any round (spontaneous). It ends when the model goes
    silent after having said something in it, when the next prompt opens a new round, on an error and at close.
    Not thread-safe: one producer thread calls it.
    """

    def __init__(self) -> None:
        self._counter = 0
        self._round: int | None = None
        self._prompted = False
        self._has_text = False

    @property
    def open_round(self) -> int | None:
        return self._round

    def prompt(self, prompt: str, frame_ts: float | None) -> list[VisionOutput]:
        out = self._close(frame_ts)
        out.append(self._open(prompt, True, frame_ts))
        return out

    def text(self, text: str, frame_ts: float | None) -> list[VisionOutput]:
        out: list[VisionOutput] = []
        if not text:
            return out
        if self._round is None:
            out.append(self._open(None, False, frame_ts))
        self._has_text = True
        out.append(VisionOutput("text", text=text, round=self._round, prompted=self._prompted, frame_ts=frame_ts))
        return out

    def silence(self, frame_ts: float | None) -> list[VisionOutput]:
        out = [VisionOutput("silence", frame_ts=frame_ts)]
        if self._round is not None and self._has_text:
            out += self._close(frame_ts)
        return out

    def end(self, frame_ts: float | None, error: str | None = None) -> list[VisionOutput]:
        """Close the open round (if any); an error always yields a ``round_end``."""
        if self._round is None:
            return [VisionOutput("round_end", frame_ts=frame_ts, error=error)] if error is not None else []
        return self._close(frame_ts, error)

    def _open(self, prompt: str | None, prompted: bool, frame_ts: float | None) -> VisionOutput:
        self._counter += 1
        self._round, self._prompted, self._has_text = self._counter, prompted, False
        return VisionOutput("round_start", round=self._round, prompted=prompted, prompt=prompt, frame_ts=frame_ts)

    def _close(self, frame_ts: float | None, error: str | None = None) -> list[VisionOutput]:
        if self._round is None:
            return []
        item = VisionOutput("round_end", round=self._round, prompted=self._prompted, frame_ts=frame_ts,
                            error=error)
        self._round, self._prompted, self._has_text = None, False, False
        return [item]


_CONTROL_RE = re.compile(r"<\|[A-Za-z0-9_.]+\|>")
_PARTIAL_CONTROL_RE = re.compile(r"<(?:\|[A-Za-z0-9_.]*(?:\|)?)?$")


class ChunkParser:
    """Splits raw model output chunks (text mixed with control tokens, as the reference session and the MOSS
    service yield them) into ``("text", s)``, ``("silence", "")``, ``("round_start", "")`` and
    ``("round_end", "")`` pieces. Hidden tokens (``<|response|>``, ``<|...|>``, ...) are dropped; a control
    token split across chunks is held back (at most a few characters) until it completes."""

    def __init__(self) -> None:
        self._carry = ""

    def feed(self, chunk: str) -> list[tuple[str, str]]:
        data = self._carry + chunk
        self._carry = ""
        tail = _PARTIAL_CONTROL_RE.search(data)
        if tail is not None and len(data) - tail.start() <= 24:
            self._carry = data[tail.start():]
            data = data[:tail.start()]
        return self._split(data)

    def flush(self) -> list[tuple[str, str]]:
        data, self._carry = self._carry, ""
        return self._split(data)

    @staticmethod
    def _split(data: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        pos = 0
        for m in _CONTROL_RE.finditer(data):
            if m.start() > pos:
                out.append(("text", data[pos:m.start()]))
            token = m.group(0)
            if token == SILENCE:
                out.append(("silence", ""))
            elif token == ROUND_START:
                out.append(("round_start", ""))
            elif token == ROUND_END:
                out.append(("round_end", ""))
            elif token not in HIDDEN_TOKENS:
                log.debug("dropping unknown control token %s from model output", token)
            pos = m.end()
        if pos < len(data):
            out.append(("text", data[pos:]))
        return [piece for piece in out if piece[0] != "text" or piece[1]]


# --- the session API shared by every backend ---------------------------------------------------------------------

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


# --- the token source protocol -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Segment:
    """One drain of the input queues, rendered: ``text`` (with one image placeholder per frame, in order),
    ``images`` and their ``timestamps`` (ascending), and the ``prompts`` it opens (in arrival order)."""

    text: str
    images: tuple[Any, ...] = ()
    timestamps: tuple[float, ...] = ()
    prompts: tuple[str, ...] = ()


class ChatFormat:
    """How a drain becomes context text. The default is the MOSS-VL-Realtime format (see the module docstring);
    backends whose model was trained on another chat template override it (see
    ``rtc_agent.engines.vlm.transformers_vlm``)."""

    image_placeholder = IMAGE_PLACEHOLDER
    silence_text = SILENCE

    def frame(self, timestamp: float) -> str:
        return frame_wrapper(timestamp, self.image_placeholder)

    def prompt(self, prompt: str) -> str:
        return f"<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"

    def segment(self, prompts: Sequence[str], timestamps: Sequence[float]) -> str:
        """Prompts first (each followed by the silence opener when frames come in the same drain), then frames."""
        text = ""
        for prompt in prompts:
            text += self.prompt(prompt)
            if timestamps:
                text += self.silence_text
        for ts in timestamps:
            text += self.frame(ts)
        return text

    def generated(self, token_id: int, is_silence: bool) -> None:
        """Told about every token the model generated (stateful formats track turn ends here)."""


class MossChatFormat(ChatFormat):
    """The MOSS-VL-Realtime format (the default), by name."""


class TokenSource(Protocol):
    """A model's realtime decoding state for one session. Called only from the session's loop thread.

    Contract:

    - ``begin(system_prompt, initial_prompt)``: build the initial context (system turn, user turn with the
      initial prompt, assistant opener). May be slow; nothing is decoded yet.
    - ``chat_format``: how drains are rendered (:class:`ChatFormat`).
    - ``silence_ids``: ids that mean ``<|silence|>``. A model without a silence token maps its end-of-turn
      token(s) here (it finished what it wanted to say; the loop waits for new input).
    - ``suppress_ids``: ids the session passes to every ``next_token`` call as never-to-be-sampled (the
      ``<|...|>`` token when the vocabulary has it).
    - ``wait_for_input_first``: when true the session parks before the first token until input arrives (models
      that would otherwise describe an empty context).
    - ``feed(segment)``: splice a drain into the context after the last generated token (lazily is fine).
    - ``next_token(suppress)``: run the model on what is new, choose the next token among ids not in
      ``suppress``, append it to the context and return its id.
    - ``decode(ids)``: text of a run of ids (a trailing U+FFFD means an incomplete character).
    - ``close()``: release the context. Called once, from the loop thread, when the loop ends.

    Exceptions from any method end the session with an error (``<|round_end|>`` is emitted first).
    """

    chat_format: ChatFormat
    silence_ids: frozenset[int]
    suppress_ids: frozenset[int]
    wait_for_input_first: bool

    def begin(self, system_prompt: str, initial_prompt: str) -> None: ...

    def feed(self, segment: Segment) -> None: ...

    def next_token(self, suppress: frozenset[int]) -> int: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def close(self) -> None: ...


class TokenPacer:
    """``max_tokens_per_turn`` as a rate: how long to wait after a token so that tokens are at least
    ``1 / rate`` seconds apart (the reference's pacing: the token's own cost counts toward the interval)."""

    def __init__(self, tokens_per_second: float) -> None:
        if tokens_per_second <= 0:
            raise ValueError("max_tokens_per_turn must be at least 1")
        self.interval = 1.0 / tokens_per_second
        self._last: float | None = None

    def start(self, now: float) -> None:
        self._last = now

    def delay(self, now: float) -> float:
        """Seconds to wait after a token produced at ``now``."""
        if self._last is None:
            self._last = now
            return 0.0
        return max(0.0, self.interval - (now - self._last))

    def mark(self, now: float) -> None:
        """The next token's time starts now (after the wait)."""
        self._last = now


@dataclass
class _Inputs:
    frames: collections.deque[tuple[Any, float]] = field(default_factory=collections.deque)
    prompts: collections.deque[str] = field(default_factory=collections.deque)


class RealtimeVisionSession(VisionSessionBase):
    """A realtime vision session over a :class:`TokenSource`, with the reference API and rules (module docstring).

    Args:
        source: the model's decoding state; owned by the session from ``start`` (closed when the loop ends).
        initial_prompt: the user prompt before any frame (the commentary instruction).
        system_prompt: ``None`` means :data:`DEFAULT_SYSTEM_PROMPT`.
        frame_queue_size: frames waiting for the loop, at most (oldest dropped beyond).
        max_tokens_per_turn: tokens per second, at most (default 12).
        max_new_tokens: tokens after one input before the loop parks even without ``<|silence|>``.
        prompt_queue_size: prompts waiting, at most (``queue.Full`` beyond).
        output_queue_size: outputs not yet polled, at most (the loop waits while it is full).
        on_close: called once when the loop has ended (backends release their :class:`SessionSlot` here).
        clock: monotonic seconds (tests may inject a fake one; the pacing waits still use real time).
    """

    def __init__(self, source: TokenSource, *, initial_prompt: str = "", system_prompt: str | None = None,
                 frame_queue_size: int = 8, max_tokens_per_turn: int = 12, max_new_tokens: int = 256,
                 prompt_queue_size: int = 16, output_queue_size: int = 1024,
                 on_close: Callable[[], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 name: str = "vision-session") -> None:
        super().__init__(output_queue_size=output_queue_size, clock=clock)
        if frame_queue_size < 1:
            raise ValueError("frame_queue_size must be at least 1")
        if max_tokens_per_turn < 1:
            raise ValueError("max_tokens_per_turn must be at least 1")
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if prompt_queue_size < 1:
            raise ValueError("prompt_queue_size must be at least 1")
        self.source = source
        self.initial_prompt = str(initial_prompt or "")
        self.system_prompt = DEFAULT_SYSTEM_PROMPT if system_prompt is None else str(system_prompt)
        self.frame_queue_size = frame_queue_size
        self.prompt_queue_size = prompt_queue_size
        self.max_tokens_per_turn = int(max_tokens_per_turn)
        self.max_new_tokens = int(max_new_tokens)
        self.name = name
        self._on_close = on_close
        self._cond = threading.Condition()
        self._inputs = _Inputs()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state_lock = threading.Lock()
        self._parked = False
        self._frame_ts: float | None = None  # newest frame in the context
        self.pacing_wait_s = 0.0

    # state ------------------------------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._done.is_set()

    @property
    def pending_frames(self) -> int:
        with self._cond:
            return len(self._inputs.frames)

    @property
    def parked(self) -> bool:
        """True while the loop waits for input after ``<|silence|>`` (or before the first input)."""
        return self._parked

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out.update(pending_frames=self.pending_frames, parked=self._parked, active=self.active,
                   pacing_wait_s=round(self.pacing_wait_s, 4), frame_ts=self._frame_ts)
        return out

    # API --------------------------------------------------------------------------------------------------------

    def start(self) -> RealtimeVisionSession:
        """Start the loop thread (idempotent). Raises ``RuntimeError`` on a closed session."""
        with self._state_lock:
            if self._closed.is_set():
                raise RuntimeError("Cannot start a closed realtime session")
            if self._thread is not None:
                return self
            self._started_at = self._clock()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def push_frame(self, image: Any, timestamp: float | None = None, *, drop_oldest: bool = True) -> bool:
        """Queue one frame; True when an older queued frame was dropped to make room."""
        self._admit_frame(image, self._thread is not None)
        with self._cond:
            return self._push_frame_locked(image, timestamp, drop_oldest)

    def push_prompt(self, prompt: str) -> None:
        """Queue a user prompt: it opens a new round at the next drain. Empty prompts raise ``ValueError``."""
        self._check_open()
        prompt = self._check_prompt(prompt)
        if self._thread is None:
            self.start()
        with self._cond:
            self._push_prompt_locked(prompt)

    def push_prompt_frame(self, prompt: str, image: Any, timestamp: float | None = None, *,
                          drop_oldest: bool = True) -> bool:
        """Queue a frame and a prompt together (they are drained in the same segment)."""
        self._check_open()
        prompt = self._check_prompt(prompt)
        self._admit_frame(image, self._thread is not None)
        with self._cond:
            if len(self._inputs.prompts) >= self.prompt_queue_size:
                raise queue.Full("too many prompts waiting")
            dropped = self._push_frame_locked(image, timestamp, drop_oldest)
            self._push_prompt_locked(prompt)
            return dropped

    def _push_frame_locked(self, image: Any, timestamp: float | None, drop_oldest: bool) -> bool:
        frames = self._inputs.frames
        if len(frames) >= self.frame_queue_size and not drop_oldest:
            raise queue.Full("the frame queue is full")
        ts = self._frame_timestamp(timestamp)
        dropped = False
        while len(frames) >= self.frame_queue_size:
            frames.popleft()
            dropped = True
            self.counters["frames_dropped"] += 1
        frames.append((image, ts))
        self.counters["frames_pushed"] += 1
        self._cond.notify_all()
        return dropped

    def _push_prompt_locked(self, prompt: str) -> None:
        if len(self._inputs.prompts) >= self.prompt_queue_size:
            raise queue.Full("too many prompts waiting")
        self._inputs.prompts.append(prompt)
        self.counters["prompts_pushed"] += 1
        self._cond.notify_all()

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop the loop and wait up to ``timeout`` seconds for it (``TimeoutError`` if it does not stop, e.g. a
        model call that does not return). Re-raises a generation failure, as the reference does."""
        self._closed.set()
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._join_producer(timeout, "Realtime generation")

    # the loop ---------------------------------------------------------------------------------------------------

    def _drain(self, block: bool) -> tuple[list[tuple[Any, float]], list[str]]:
        """Take every queued frame and prompt; with ``block`` wait until there is some input (or a stop)."""
        with self._cond:
            while block and not self._stop.is_set() and not self._inputs.frames and not self._inputs.prompts:
                self._parked = True
                self._cond.wait()
            self._parked = False
            frames = list(self._inputs.frames)
            prompts = list(self._inputs.prompts)
            self._inputs.frames.clear()
            self._inputs.prompts.clear()
        return frames, prompts

    def _splice(self, frames: list[tuple[Any, float]], prompts: list[str]) -> None:
        """Render a drain, report its round starts (and silence openers), and feed it to the source."""
        frames.sort(key=lambda item: item[1])
        timestamps = tuple(ts for _, ts in frames)
        if timestamps:
            self._frame_ts = timestamps[-1]
        for prompt in prompts:
            outputs = self._rounds.prompt(prompt, self._frame_ts)
            if timestamps:  # the inserted assistant opener is reported, as the reference does
                outputs.append(VisionOutput("silence", frame_ts=self._frame_ts))
            self._put(outputs, self._stop)
        fmt = self.source.chat_format
        text = fmt.segment(prompts, timestamps)
        self.counters["frames_fed"] += len(frames)
        self.counters["prompts_fed"] += len(prompts)
        self.source.feed(Segment(text=text, images=tuple(img for img, _ in frames), timestamps=timestamps,
                                 prompts=tuple(prompts)))

    def _run(self) -> None:
        source = self.source
        pacer = TokenPacer(self.max_tokens_per_turn)
        buffer: list[int] = []
        try:
            source.begin(self.system_prompt, self.initial_prompt)
            silence_ids = frozenset(source.silence_ids)
            suppress = frozenset(source.suppress_ids)
            since_input = 0
            if source.wait_for_input_first:
                frames, prompts = self._drain(block=True)
                if self._stop.is_set():
                    return
                self._splice(frames, prompts)
            pacer.start(self._clock())
            while not self._stop.is_set():
                token = source.next_token(suppress)
                since_input += 1
                self.counters["tokens"] += 1
                is_silence = token in silence_ids
                source.chat_format.generated(token, is_silence)
                if is_silence:
                    if buffer:  # an incomplete character can never complete now: drop it
                        self.counters["incomplete_dropped"] += 1
                        buffer.clear()
                    self._put(self._rounds.silence(self._frame_ts), self._stop)
                elif token in suppress:
                    self.counters["suppressed_emitted"] += 1  # the source ignored the suppression
                else:
                    buffer.append(token)
                    text = source.decode(buffer)
                    if not text:  # nothing printable (a special token the source does not show)
                        buffer.clear()
                    elif not text.endswith(REPLACEMENT_CHAR) or len(buffer) >= 8:
                        buffer.clear()
                        self._put(self._rounds.text(text, self._frame_ts), self._stop)
                wait = pacer.delay(self._clock())
                if wait > 0:
                    self.pacing_wait_s += wait
                    self._stop.wait(wait)
                pacer.mark(self._clock())
                park = is_silence or since_input >= self.max_new_tokens
                if park and not is_silence:
                    self.counters["max_new_tokens_reached"] += 1
                frames, prompts = self._drain(block=park)
                if self._stop.is_set():
                    break
                if frames or prompts:
                    if prompts:
                        buffer.clear()  # the reference clears its token buffer on a new prompt
                    since_input = 0
                    self._splice(frames, prompts)
                    pacer.mark(self._clock())
        except BaseException as exc:
            self._error = exc
            log.warning("%s: realtime generation failed: %r", self.name, exc)
            self._put(self._rounds.end(self._frame_ts, error=f"{type(exc).__name__}: {exc}"), self._stop)
        finally:
            if self._error is None:
                self._put(self._rounds.end(self._frame_ts), self._stop)
            try:
                source.close()
            except Exception:
                log.exception("%s: token source close failed", self.name)
            self._release()
            self._done.set()
            self._notify()
