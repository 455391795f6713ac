"""The MOSS-VL-Realtime token loop, independent of any model (DESIGN.md section 5).

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
- One active realtime session per model instance: backends hold a :class:`~rtc_agent.engines.vlm.base.SessionSlot`;
  a second session gets :class:`~rtc_agent.engines.vlm.base.SessionBusy` (the worker's lease turns the same rule
  into a capacity error before that).

Besides ``poll_output`` (strings: text, ``<|silence|>``, ``<|round_start|>``, ``<|round_end|>``, exactly what the
reference yields) every session offers ``poll_event`` with :class:`~rtc_agent.engines.vlm.outputs.VisionOutput`
items that carry the round number, the prompt and the timestamp of the newest frame in the context (what the
``vision.*`` events need). Spontaneous commentary (text outside a prompted round) is reported as an unprompted round
in those items; the string stream keeps the reference's form and marks only prompted rounds.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rtc_agent.engines.vlm.chat_format import DEFAULT_SYSTEM_PROMPT, REPLACEMENT_CHAR, ChatFormat, Segment
from rtc_agent.engines.vlm.outputs import VisionOutput
from rtc_agent.engines.vlm.session import VisionSessionBase

log = logging.getLogger(__name__)

__all__ = ["RealtimeVisionSession", "TokenPacer", "TokenSource"]


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
        on_close: called once when the loop has ended (backends release their
            :class:`~rtc_agent.engines.vlm.base.SessionSlot` here).
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
        prompt = self._admit_prompt(prompt, self._thread is not None)
        with self._cond:
            self._push_prompt_locked(prompt)

    def push_prompt_frame(self, prompt: str, image: Any, timestamp: float | None = None, *,
                          drop_oldest: bool = True) -> bool:
        """Queue a frame and a prompt together (they are drained in the same segment)."""
        prompt = self._admit_prompt_frame(prompt, image, self._thread is not None)
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
