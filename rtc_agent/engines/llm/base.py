"""The LLM engine contract: chat requests, streamed deltas, and the bridge from an engine thread to the event loop.

How a streamed chat flows::

    app (event loop)                       worker                      engine thread
    LLMClient.stream(request) ─ ChatJob ──> Worker.call("llm", job) ──> ChatEngine.run_batch([job])
         ^                                  (bounded queue,                 for delta in generate(request, cancel):
         │                                   concurrency, metrics)              job.sink(delta) ──┐
    ChatStream (async iterator) <── DeltaBridge (bounded, call_soon_threadsafe) <─────────────────┘

Choices, and why:

- Streams go through :meth:`Worker.call` like every other model call, so an LLM gets the worker's bounded
  queue (``AtCapacity(code="engine_overloaded")`` when full), its concurrency limit (``EngineSpec.concurrency``
  threads: 1 for the embedded model on a small CPU, more for a remote server), queue-delay and run-time metrics
  and call timeouts, with nothing LLM-specific in the worker. Leases are not used: a chat holds no state in the
  engine between calls (the whole history travels in each request), so the limit is per generation, not per
  session.
- The engine side is a plain blocking generator (:meth:`ChatEngine.generate`), easy to write and to test; the
  base class's ``run_batch`` drives it and pushes each delta into the job's sink.
- :class:`DeltaBridge` is bounded: the engine thread takes a slot before it posts a delta to the loop with
  ``loop.call_soon_threadsafe`` and the consumer frees the slot when it reads it, so a slow consumer slows the
  producer instead of growing a queue.
- Cancellation is a :class:`CancelToken` (a ``threading.Event`` plus callbacks): the embedded engine checks it
  between tokens, the remote engine registers a callback that shuts its socket down, so a blocked read returns
  at once. :meth:`ChatStream.aclose` cancels and waits (bounded) until the engine thread is free again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from rtc_agent.errors import EngineError

if TYPE_CHECKING:
    from rtc_agent.worker import Worker

log = logging.getLogger(__name__)

__all__ = [
    "FINISH_REASONS",
    "CancelToken",
    "ChatAccumulator",
    "ChatDelta",
    "ChatEngine",
    "ChatJob",
    "ChatRequest",
    "ChatResult",
    "ChatStream",
    "DeltaBridge",
    "LLMClient",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
    "tool_name",
]

#: ``finish_reason`` values: OpenAI's, plus ``cancelled`` (the caller stopped the generation).
FINISH_REASONS: Final = ("stop", "length", "tool_calls", "content_filter", "cancelled")
_ROLES: Final = ("system", "developer", "user", "assistant", "tool")


# --------------------------------------------------------------------------------------------------------------
# request


def _normalize_tool(tool: Any, index: int) -> dict[str, Any]:
    """One tool in Chat Completions form ``{"type": "function", "function": {name, description?, parameters?}}``.

    Also accepts the flat Realtime form ``{"type": "function", "name": ..., "parameters": ...}`` and a bare
    function object ``{"name": ..., "parameters": ...}``."""
    if not isinstance(tool, Mapping):
        raise ValueError(f"tools[{index}] must be an object, got {type(tool).__name__}")
    if tool.get("type", "function") != "function":
        raise ValueError(f"tools[{index}]: only type 'function' is supported, got {tool.get('type')!r}")
    fn = tool.get("function", tool)
    if not isinstance(fn, Mapping):
        raise ValueError(f"tools[{index}].function must be an object")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"tools[{index}]: a function needs a non-empty string 'name'")
    out: dict[str, Any] = {"name": name}
    if fn.get("description") is not None:
        out["description"] = str(fn["description"])
    params = fn.get("parameters")
    if params is not None:
        if not isinstance(params, Mapping):
            raise ValueError(f"tools[{index}] ({name}): 'parameters' must be a JSON-schema object")
        out["parameters"] = dict(params)
    return {"type": "function", "function": out}


def tool_name(tool: Mapping[str, Any]) -> str:
    """The function name of a normalized tool entry."""
    return str(tool["function"]["name"])


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion, in OpenAI Chat Completions terms.

    - ``messages``: OpenAI messages (``role`` system/developer/user/assistant/tool; ``content`` a string, None, or
      a list of ``{"type": "text", "text": ...}`` parts; assistant ``tool_calls``; tool ``tool_call_id``).
    - ``tools``: JSON-schema functions; normalized to ``{"type": "function", "function": {...}}`` entries.
    - ``tool_choice``: passed to remote servers as is (``"auto"``, ``"none"``, ``"required"`` or a function).
    - ``max_tokens``: most tokens to generate (>= 1). ``temperature``/``top_p``: None means the engine's default
      (the embedded engine decodes greedily). ``stop``: strings that end the reply (not included in it).
    - ``model``: overrides the engine's model name for a remote engine; ignored by the embedded one.
    - ``extra``: extra JSON fields for a remote server's request body (e.g. ``{"top_k": 20}``).

    Invalid values raise ``ValueError`` at construction.
    """

    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]] = ()
    tool_choice: str | Mapping[str, Any] | None = None
    max_tokens: int = 256
    temperature: float | None = None
    top_p: float | None = None
    stop: Sequence[str] = ()
    model: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.messages, str | bytes) or not isinstance(self.messages, Sequence) or not self.messages:
            raise ValueError("messages must be a non-empty list of message objects")
        messages: list[dict[str, Any]] = []
        for i, message in enumerate(self.messages):
            if not isinstance(message, Mapping):
                raise ValueError(f"messages[{i}] must be an object, got {type(message).__name__}")
            role = message.get("role")
            if role not in _ROLES:
                raise ValueError(f"messages[{i}]: role must be one of {', '.join(_ROLES)}, got {role!r}")
            content = message.get("content")
            if content is not None and not isinstance(content, str | list):
                raise ValueError(f"messages[{i}]: content must be a string, a list of parts or null")
            messages.append(dict(message))
        object.__setattr__(self, "messages", tuple(messages))
        tools = tuple(_normalize_tool(t, i) for i, t in enumerate(self.tools))
        names = [tool_name(t) for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique, got {names}")
        object.__setattr__(self, "tools", tools)
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError("stop must hold non-empty strings")
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if self.temperature is not None and not 0.0 <= float(self.temperature) <= 2.0:
            raise ValueError(f"temperature must be within 0..2, got {self.temperature!r}")
        if self.top_p is not None and not 0.0 < float(self.top_p) <= 1.0:
            raise ValueError(f"top_p must be within (0, 1], got {self.top_p!r}")
        object.__setattr__(self, "extra", dict(self.extra))


# --------------------------------------------------------------------------------------------------------------
# deltas and results


@dataclass(frozen=True)
class Usage:
    """Token counts of one generation (as the engine or server reported them)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a structured tool call, OpenAI style: deltas with the same ``index`` belong to one call; ``id``
    and ``name`` come once (usually first), ``arguments`` is a fragment of the JSON arguments string."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class ChatDelta:
    """One streamed piece of a reply.

    ``text`` is a fragment of the assistant content (for a model without a tool parser it may contain raw
    ``<tool_call>`` markup: run it through ``rtc_agent.apps.agent.tool_parser``). ``tool_calls`` are structured
    tool-call fragments. The last delta of every generation that ends normally has ``finish_reason`` set (one of
    :data:`FINISH_REASONS`), and ``usage`` when the engine knows it.
    """

    text: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True)
class ToolCall:
    """A complete structured tool call: ``arguments`` is the JSON string the model wrote (not validated)."""

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> Any:
        """``arguments`` decoded; an empty string is ``{}``. Raises ``ValueError`` on bad JSON."""
        return json.loads(self.arguments) if self.arguments.strip() else {}


@dataclass(frozen=True)
class ChatResult:
    """A whole reply. ``first_token_s``: engine time from the start of the run to the first content (None when
    nothing came); ``duration_s``: the whole run; both exclude queueing in the worker."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    usage: Usage | None = None
    model: str = ""
    first_token_s: float | None = None
    duration_s: float = 0.0

    @property
    def tokens_per_s(self) -> float | None:
        """Decode speed: completion tokens after the first, per second after the first token."""
        if self.usage is None or self.first_token_s is None or self.usage.completion_tokens < 2:
            return None
        span = self.duration_s - self.first_token_s
        return (self.usage.completion_tokens - 1) / span if span > 0 else None


class ChatAccumulator:
    """Merges deltas into a :class:`ChatResult` (structured tool calls by ``index``). Not thread-safe."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    @property
    def text(self) -> str:
        return "".join(self._text)

    def add(self, delta: ChatDelta) -> None:
        if delta.text:
            self._text.append(delta.text)
        for part in delta.tool_calls:
            call = self._calls.setdefault(part.index, {"id": None, "name": None, "arguments": []})
            if part.id:
                call["id"] = part.id
            if part.name:
                call["name"] = part.name
            if part.arguments:
                call["arguments"].append(part.arguments)
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
        if delta.usage is not None:
            self.usage = delta.usage

    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The structured calls so far, in index order; a call without an id gets ``call_<index>``."""
        return tuple(
            ToolCall(id=c["id"] or f"call_{i}", name=c["name"] or "", arguments="".join(c["arguments"]))
            for i, c in sorted(self._calls.items())
        )

    def result(self, *, model: str = "", first_token_s: float | None = None, duration_s: float = 0.0) -> ChatResult:
        return ChatResult(
            text=self.text, tool_calls=self.tool_calls(), finish_reason=self.finish_reason or "stop",
            usage=self.usage, model=model, first_token_s=first_token_s, duration_s=duration_s,
        )


def partial_marker_len(text: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``: the characters a
    streaming reader must hold back because the next chunk may complete a tag or a stop string."""
    longest = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:n]):
                longest = n
                break
    return longest


# --------------------------------------------------------------------------------------------------------------
# cancellation and jobs


class CancelToken:
    """A thread-safe, one-shot cancel signal with callbacks.

    ``cancel()`` may be called from any thread, any number of times; callbacks registered with ``on_cancel`` run
    once, in the cancelling thread (or at once when already cancelled). Callbacks must be quick and must not
    raise (exceptions are logged and swallowed).
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _call_quietly(callback)

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` on cancel; returns a function that unregisters it."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)

                def remove() -> None:
                    with self._lock, contextlib.suppress(ValueError):
                        self._callbacks.remove(callback)

                return remove
        _call_quietly(callback)
        return lambda: None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout``; True when cancelled."""
        return self._event.wait(timeout)


def _call_quietly(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.exception("cancel callback failed")


@dataclass(eq=False)
class ChatJob:
    """What the worker hands a chat engine: the request, its cancel token, and an optional ``sink`` that receives
    every delta in the engine thread (it may block for backpressure). ``started`` is set when the engine begins
    the job, so a caller knows whether cancelling the worker call alone would suffice."""

    request: ChatRequest
    cancel: CancelToken = field(default_factory=CancelToken)
    sink: Callable[[ChatDelta], None] | None = None
    started: threading.Event = field(default_factory=threading.Event)


# --------------------------------------------------------------------------------------------------------------
# engine base


class ChatEngine(ABC):
    """Base of LLM engines (the worker's :class:`~rtc_agent.worker.Engine` contract plus :meth:`generate`).

    Subclasses implement ``load(progress)`` (optional), ``generate(request, cancel)`` and ``close()`` (optional).
    ``run_batch`` accepts :class:`ChatJob` or bare :class:`ChatRequest` items and returns one
    :class:`ChatResult` (or the ``Exception`` that ended it) per item; the jobs of a batch run one after the
    other, so register chat engines with ``max_batch=1`` and scale with ``concurrency``.
    """

    #: The model name reported in results and session descriptions.
    model_name: str = ""

    def load(self, progress: Callable[[str], None]) -> None:  # noqa: B027 - optional hook
        """Load weights or check the server; blocking."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; blocking."""

    @abstractmethod
    def generate(self, request: ChatRequest, cancel: CancelToken) -> Iterator[ChatDelta]:
        """Generate one reply; a blocking generator, run in a worker thread.

        Yields text and tool-call deltas as they are produced, and ends with one delta whose ``finish_reason`` is
        set. When ``cancel`` fires it stops promptly (between tokens, or by closing its connection) and ends with
        ``finish_reason="cancelled"``; errors raised after a cancel are ignored by ``run_batch``. Closing the
        generator early (``.close()``) must release everything it holds. Errors are ``EngineError`` with a
        specific ``code`` where the cause is known.
        """

    def run_batch(self, requests: list[Any]) -> list[Any]:
        return [self._run_job(item) for item in requests]

    def _run_job(self, item: Any) -> ChatResult | Exception:
        if isinstance(item, ChatRequest):
            item = ChatJob(item)
        if not isinstance(item, ChatJob):
            return TypeError(f"a chat engine takes ChatJob or ChatRequest items, got {type(item).__name__}")
        job = item
        job.started.set()
        acc = ChatAccumulator()
        start = time.monotonic()
        first: float | None = None
        if job.cancel.cancelled:  # cancelled while queued: do not start
            return ChatResult(text="", finish_reason="cancelled", model=self.model_name)
        gen = self.generate(job.request, job.cancel)
        try:
            for delta in gen:
                if first is None and (delta.text or delta.tool_calls):
                    first = time.monotonic() - start
                acc.add(delta)
                if job.sink is not None:
                    job.sink(delta)
                if job.cancel.cancelled:
                    break
        except Exception as exc:
            if not job.cancel.cancelled:
                return exc
            log.debug("%s: error after cancel ignored: %r", type(self).__name__, exc)
        finally:
            gen.close()
        if job.cancel.cancelled:
            acc.finish_reason = "cancelled"
        return acc.result(model=self.model_name, first_token_s=first, duration_s=time.monotonic() - start)


# --------------------------------------------------------------------------------------------------------------
# the thread -> loop bridge and the async side


class _End:
    """The end-of-stream marker (posted on the loop when the worker call finished, whatever its outcome)."""


_END: Final = _End()


class DeltaBridge:
    """A bounded single-producer (engine thread) / single-consumer (event loop) channel of deltas.

    ``put`` (thread side) blocks while ``maxsize`` deltas are unread, returns at once (dropping the delta) when
    ``cancel`` fired or the loop is closed. ``get``/``release`` are the loop side: ``release`` frees the slot of a
    delta once it was taken. ``finish`` (loop side) posts the end marker, which takes no slot.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, maxsize: int, cancel: CancelToken) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize!r}")
        self._loop = loop
        self._queue: asyncio.Queue[ChatDelta | _End] = asyncio.Queue()
        self._free = threading.Semaphore(maxsize)
        self._cancel = cancel
        self.maxsize = maxsize
        cancel.on_cancel(self._free.release)  # wake a producer blocked on a full bridge

    def put(self, delta: ChatDelta) -> None:
        while not self._free.acquire(timeout=0.1):
            if self._cancel.cancelled:
                return
        if self._cancel.cancelled:
            self._free.release()
            return
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, delta)
        except RuntimeError:  # the loop is closed: nobody will read
            self._cancel.cancel()

    async def get(self) -> ChatDelta | _End:
        return await self._queue.get()

    def release(self) -> None:
        self._free.release()

    def finish(self) -> None:
        self._queue.put_nowait(_END)


class ChatStream:
    """The async side of one streamed generation: ``async for delta in stream`` (or ``async with stream``).

    The generation starts at construction (a task calls ``call(job)``, normally ``Worker.call``). Iteration
    yields every delta the engine produced, in order, and then:

    - ends normally when the generation finished; ``result`` holds the :class:`ChatResult`;
    - raises the error of the call (``EngineError`` with its code, ``AtCapacity`` when the engine's queue is
      full, ``UnknownEngine``) after the deltas that came before it; ``error`` holds it too;
    - ends quietly after :meth:`cancel`/:meth:`aclose` (no error is raised for a cancelled stream).

    Cancelling the task that iterates (e.g. barge-in cancels the turn) cancels the generation too. A stream
    that is dropped without being closed cancels its generation when it is garbage-collected, but call
    :meth:`aclose` (or use ``async with``) so the engine thread is free again before the next turn.

    ``first_delta_s``: loop time from construction to the first delta with content (includes queueing).
    """

    def __init__(self, call: Callable[[ChatJob], Awaitable[Any]], request: ChatRequest, *, buffer: int = 32) -> None:
        loop = asyncio.get_running_loop()
        self.request = request
        self.result: ChatResult | None = None
        self.error: BaseException | None = None
        self.first_delta_s: float | None = None
        self._cancel = CancelToken()
        self._bridge = DeltaBridge(loop, buffer, self._cancel)
        self._job = ChatJob(request, cancel=self._cancel, sink=self._bridge.put)
        self._finished = False
        self._user_cancelled = False  # cancel()/aclose() called (the token also fires when the call failed)
        self._created = loop.time()
        self._loop = loop
        self._task: asyncio.Task[Any] = loop.create_task(_await(call(self._job)), name="rtc_agent.llm.stream")
        # the callback must not hold the stream: a stream dropped by its consumer is then garbage-collected
        # (and its __del__ cancels the generation) even while the task is pending
        self._task.add_done_callback(_finisher(self._bridge, self._cancel))

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` or :meth:`aclose` was called."""
        return self._user_cancelled

    @property
    def done(self) -> bool:
        """True when the generation is over (the engine thread no longer works on it)."""
        return self._task.done()

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> ChatDelta:
        if self._finished:
            raise StopAsyncIteration
        try:
            item = await self._bridge.get()
        except asyncio.CancelledError:
            self.cancel()
            raise
        if isinstance(item, _End):
            self._finished = True
            self._settle()
            if self.error is not None and not self._user_cancelled:
                raise self.error
            raise StopAsyncIteration
        self._bridge.release()
        if self.first_delta_s is None and (item.text or item.tool_calls):
            self.first_delta_s = self._loop.time() - self._created
        return item

    def _settle(self) -> None:
        task = self._task
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.error = exc
        else:
            self.result = task.result()

    def cancel(self) -> None:
        """Stop the generation without waiting: the engine stops at its next token (or its connection is
        closed); a job still queued in the worker is withdrawn. Idempotent."""
        self._user_cancelled = True
        if self._task.done():
            self._cancel.cancel()
            return
        self._cancel.cancel()
        if not self._job.started.is_set():
            self._task.cancel()

    async def aclose(self, grace: float = 5.0) -> None:
        """Cancel (unless already finished) and wait up to ``grace`` seconds for the engine to stop."""
        if not self._task.done():
            self.cancel()
            await asyncio.wait({self._task}, timeout=grace)
        self._finished = True
        if self._task.done():
            self._settle()

    async def collect(self) -> ChatResult:
        """Consume the rest of the stream and return the result (raises the call's error)."""
        async for _ in self:
            pass
        if self.result is None:
            raise EngineError("the generation was cancelled", code="llm_cancelled")
        return self.result

    async def __aenter__(self) -> ChatStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # no loop calls here: only the thread-safe token (wakes the producer, closes a remote connection)
        cancel = getattr(self, "_cancel", None)
        task = getattr(self, "_task", None)
        if cancel is not None and task is not None and not task.done():
            cancel.cancel()


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _finisher(bridge: DeltaBridge, cancel: CancelToken) -> Callable[[asyncio.Task[Any]], None]:
    """The done callback of a stream's task: post the end marker; when the call failed or was cancelled (e.g. the
    worker's timeout), also stop the engine, whose result nobody will read."""

    def done(task: asyncio.Task[Any]) -> None:
        if task.cancelled() or task.exception() is not None:  # exception() also marks it retrieved
            cancel.cancel()
        bridge.finish()

    return done


class LLMClient:
    """What an app holds to talk to a chat engine registered with a :class:`~rtc_agent.worker.Worker`.

    ``stream(request)`` starts a streamed generation (see :class:`ChatStream`); ``complete(request)`` returns the
    whole :class:`ChatResult`. ``timeout`` (seconds, None = none) bounds queueing, loading and the whole
    generation of one call; ``buffer`` is the bridge's capacity in deltas.
    """

    def __init__(self, worker: Worker, name: str = "llm", *, timeout: float | None = None, buffer: int = 32) -> None:
        self.worker = worker
        self.name = name
        self.timeout = timeout
        self.buffer = buffer

    def stream(self, request: ChatRequest, *, timeout: float | None = None) -> ChatStream:
        """Start generating now; must be called on the worker's event loop."""
        limit = self.timeout if timeout is None else timeout
        return ChatStream(lambda job: self.worker.call(self.name, job, timeout=limit), request, buffer=self.buffer)

    async def complete(self, request: ChatRequest, *, timeout: float | None = None) -> ChatResult:
        """The whole reply. Cancelling the caller stops the generation."""
        limit = self.timeout if timeout is None else timeout
        job = ChatJob(request)
        try:
            return await self.worker.call(self.name, job, timeout=limit)
        except BaseException:
            job.cancel.cancel()
            raise
