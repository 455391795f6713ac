"""What an app is and what it may use.

An app is the per-session policy: audio, frames and client events go in; events and speech come out. It sees no
aiortc and no model library: media arrives as numpy arrays on the session clock, speech leaves through
:class:`SpeechSink`, model calls go through the worker, and events are the typed classes of
:mod:`rtc_agent.protocol.events`. That keeps every policy testable with scripted engines and fake sinks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, ClassVar, Protocol

import numpy as np

from rtc_agent.errors import InvalidRequest
from rtc_agent.protocol import ClientEvent, ServerEvent


class UtteranceHandle(Protocol):
    """One queued piece of speech (see :class:`rtc_agent.rtc.speech_output.Utterance`)."""

    id: str
    done: asyncio.Future[int]

    @property
    def sent_ms(self) -> int: ...

    def write(self, pcm: np.ndarray) -> None: ...

    def finish(self) -> None: ...


class SpeechSink(Protocol):
    """The session's outgoing audio: utterances play in order, never overlapping; ``clear`` stops at once."""

    def start_utterance(self, sample_rate: int, *, utterance_id: str | None = None,
                        response_id: str | None = None) -> UtteranceHandle: ...

    def play(self, pcm: np.ndarray, sample_rate: int, *, utterance_id: str | None = None,
             response_id: str | None = None) -> UtteranceHandle: ...

    def clear(self) -> list[Any]: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    @property
    def busy(self) -> bool: ...


class AppContext(Protocol):
    """What the session gives its app."""

    session_id: str
    speech: SpeechSink | None  # None when the peer offered no way to receive audio
    worker: Any  # rtc_agent.worker.Worker; typed loosely so apps stay importable without the worker
    settings: Any  # rtc_agent.config.Settings: server-wide defaults (engine choices, VAD parameters)
    #: the server's shared call rooms (rtc_agent.apps.call.RoomRegistry); None where the session has none
    rooms: Any

    def now_ms(self) -> int:
        """The session clock: ms of audio received so far."""
        ...

    def emit(self, event: ServerEvent) -> None:
        """Send an event to the client."""
        ...

    def observe(self, stage: str, seconds: float) -> None:
        """Record one latency of a pipeline stage (the ``rtc_agent_stage_latency_seconds`` histogram)."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        """Run a task that the session owns: it is cancelled when the session ends; its failure is reported."""
        ...


class App:
    """Base class of the per-session policies. Subclasses set ``name`` and override what they need.

    Contract: ``on_audio`` and ``on_frame`` run on the event loop for every chunk and must not block (queue the
    work, spawn a task, or call the worker). ``on_event`` gets the validated client events in order. ``close``
    releases what ``start`` took; the session cancels the tasks spawned through the context afterwards.
    """

    name: ClassVar[str]
    title: ClassVar[str] = ""
    description: ClassVar[str] = ""
    uses_video: ClassVar[bool] = False

    def __init__(self, ctx: AppContext, config: dict[str, Any]) -> None:
        self.ctx = ctx
        self.config = config
        #: the page's microphone is muted (``input_audio.muted``)
        self.input_muted = False

    @classmethod
    def validate_config(cls, config: dict[str, Any], settings: Any) -> dict[str, Any]:
        """The app's configuration with defaults (from the server ``settings``) applied.

        Raises :class:`InvalidRequest` (code ``invalid_config``) for unknown keys or bad values.
        """
        if config:
            raise InvalidRequest(f"app {cls.name!r} takes no configuration keys, got {sorted(config)}",
                                 code="invalid_config")
        return {}

    @classmethod
    def admit(cls, config: dict[str, Any], rooms: Any) -> None:
        """Refuse (raise :class:`~rtc_agent.errors.AgentError`), before any media work, a session of the validated
        ``config`` that the server's shared state cannot take now; ``rooms`` is what
        :attr:`AppContext.rooms` will be. Called at session creation and token minting; admits by default."""

    def engines(self) -> dict[str, str]:
        """Engine kind -> engine name this app uses (reported in ``session.created``)."""
        return {}

    async def start(self) -> None:
        """Called once the session is set up, before media flows."""

    def on_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        """16 kHz mono int16 samples starting at ``start_ms`` on the session clock."""

    def on_frame(self, image: np.ndarray, ts_ms: int) -> None:
        """An RGB camera frame sampled at the session's video rate, stamped on the session clock."""

    def set_input_muted(self, muted: bool) -> None:
        """``input_audio.muted``: the session calls this for every app (the event never reaches ``on_event``).

        Muting ends speech now: apps with a VAD path (``_on_window(prob, start_ms, end_ms)``, as captions and
        the agent have) get silent windows covering their end-of-speech silence, so their own logic finalizes the
        caption or ends the turn at once. Apps override this for anything else.
        """
        was, self.input_muted = self.input_muted, bool(muted)
        on_window = getattr(self, "_on_window", None)
        if not muted or was or not callable(on_window):
            return
        segmenter = getattr(self, "segmenter", None)
        if segmenter is not None and not getattr(segmenter, "in_speech", False):
            return
        silence_ms = int(getattr(segmenter, "min_silence_ms", 500) or 500) + 64
        start = self.ctx.now_ms()
        for at in range(start, start + silence_ms, 32):
            on_window(0.0, at, at + 32)

    async def on_event(self, event: ClientEvent) -> None:
        """A validated client event other than ping/pong. Unhandled types get an ``unsupported_event`` error."""
        raise InvalidRequest(f"app {self.name!r} does not handle {event.type!r}", code="unsupported_event")

    def stats(self) -> dict[str, Any]:
        """Live numbers for ``GET /v1/sessions/{id}``."""
        return {}

    async def close(self) -> None:
        """The session is ending."""
