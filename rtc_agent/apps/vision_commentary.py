"""Visual commentary for one app session: camera frames into a realtime vision session, ``vision.*`` events out.

:class:`VisionCommentary` is the piece an app (``captions``, optionally ``agent``) owns per session:

- ``start()`` takes a lease on the vision engine (one realtime session per model instance), loads it through the
  worker and opens a session (:mod:`rtc_agent.engines.vlm.realtime` protocol). When the engine is at capacity the
  client gets an ``error`` event (``code="engine_capacity"``) and the app session goes on without commentary; any
  other start failure is reported the same way with its own code.
- ``on_frame(image, ts_ms)`` (non-blocking) pushes a frame stamped ``ts_ms / 1000`` seconds on the session
  clock. The session's frame queue is bounded: when it drops the oldest frame a ``vision.frame.dropped`` event
  says so (its ``frame_ts`` is the frame that was queued in its place).
- ``prompt(text)`` sends a user prompt (``vision.prompt``); it opens a new round.
- Outputs become events: ``vision.round.started {round_id, prompt}`` (``prompt`` is null for spontaneous
  commentary), ``vision.text.delta {round_id, delta, frame_ts}``, ``vision.silence {frame_ts}``,
  ``vision.round.ended {round_id}``. ``frame_ts`` is in seconds on the session clock: the newest frame the
  model had seen when it produced the output.
- ``close()`` closes the session (ending an open round), stops the output task and returns the lease.

Nothing blocks the event loop: the session decodes in its own thread and wakes the output task through a
thread-safe listener; opening and closing run in threads. No queue here grows without bound: frames go into
the session's bounded queue, outputs come out of its bounded queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import numpy as np

from rtc_agent.apps.base import AppContext
from rtc_agent.apps.limits import TextLimits, show, show_keys
from rtc_agent.engines.vlm import SessionBusy, SessionOptions, VisionOutput, VisionSession
from rtc_agent.errors import AgentError, AtCapacity, EngineError, InvalidRequest
from rtc_agent.protocol.events import (
    Error,
    ErrorBody,
    VisionFrameDropped,
    VisionRoundEnded,
    VisionRoundStarted,
    VisionSilence,
    VisionTextDelta,
)
from rtc_agent.tasks import cancel_and_wait

log = logging.getLogger(__name__)

__all__ = ["COMMENTARY_DEFAULTS", "DEFAULT_COMMENTARY_PROMPT", "VisionCommentary", "validate_commentary_config"]

DEFAULT_COMMENTARY_PROMPT = (
    "As the video streams frame by frame, describe important changes as soon as you see them, in one short "
    "sentence; otherwise stay silent."
)

COMMENTARY_DEFAULTS: dict[str, Any] = {
    "prompt": DEFAULT_COMMENTARY_PROMPT,
    "system_prompt": None,
    "max_tokens_per_turn": 12,
    "frame_queue_size": 8,
    "max_new_tokens": 128,
    "lease_wait_s": 0.0,
    "silence_events": "change",
    "close_timeout_s": 5.0,
}
"""Configuration keys of :class:`VisionCommentary` and their defaults:

- ``prompt`` (str, at most ``max_text_field_chars``): the standing instruction before any frame (the session's
  initial prompt).
- ``system_prompt`` (str | None, at most ``max_instructions_chars``): ``None`` = the backend's default (MOSS's
  realtime system prompt).
- ``max_tokens_per_turn`` (int, 1-1000): decode rate cap in tokens per second.
- ``frame_queue_size`` (int, 1-256): frames waiting for the model, at most (oldest dropped beyond).
- ``max_new_tokens`` (int, 1-4096): tokens after one input before the model must wait for more input.
- ``lease_wait_s`` (float, 0-60): how long to wait for a free engine before reporting ``engine_capacity``.
- ``silence_events`` (``"change"`` | ``"all"`` | ``"none"``): which ``<|silence|>`` outputs become
  ``vision.silence`` events: only the first after speech (default), every one, or none.
- ``close_timeout_s`` (float, 0.1-60): how long ``close()`` waits for the model loop to stop.
"""


def _number(config: Mapping[str, Any], key: str, kind: type, low: float, high: float) -> Any:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not isinstance(value, int)):
        raise InvalidRequest(f"vision config {key} must be {'an integer' if kind is int else 'a number'}",
                             code="invalid_config")
    if not low <= value <= high:
        raise InvalidRequest(f"vision config {key} must be within {low}..{high}, got {show(value)}",
                             code="invalid_config")
    return kind(value)


def validate_commentary_config(config: Mapping[str, Any] | None, settings: Any = None) -> dict[str, Any]:
    """``config`` with defaults applied (:data:`COMMENTARY_DEFAULTS`); raises :class:`InvalidRequest`
    (``code="invalid_config"``) for unknown keys or bad values, ``config_too_large`` for a prompt over the caps of
    ``settings`` (see :mod:`rtc_agent.apps.limits`; their defaults when ``None``)."""
    config = dict(config or {})
    unknown = set(config) - set(COMMENTARY_DEFAULTS)
    if unknown:
        raise InvalidRequest(f"unknown vision config keys: {show_keys(unknown)}", code="invalid_config")
    limits = TextLimits.from_settings(settings)  # on what the client gave: the defaults may be longer than a cap
    if config.get("prompt") != COMMENTARY_DEFAULTS["prompt"]:
        limits.text("vision config prompt", config.get("prompt"))
    limits.instructions("vision config system_prompt", config.get("system_prompt"))
    out = {**COMMENTARY_DEFAULTS, **config}
    if not isinstance(out["prompt"], str):
        raise InvalidRequest("vision config prompt must be a string", code="invalid_config")
    if out["system_prompt"] is not None and not isinstance(out["system_prompt"], str):
        raise InvalidRequest("vision config system_prompt must be null or a string", code="invalid_config")
    out["max_tokens_per_turn"] = _number(out, "max_tokens_per_turn", int, 1, 1000)
    out["frame_queue_size"] = _number(out, "frame_queue_size", int, 1, 256)
    out["max_new_tokens"] = _number(out, "max_new_tokens", int, 1, 4096)
    out["lease_wait_s"] = _number(out, "lease_wait_s", float, 0.0, 60.0)
    out["close_timeout_s"] = _number(out, "close_timeout_s", float, 0.1, 60.0)
    if out["silence_events"] not in ("change", "all", "none"):
        raise InvalidRequest("vision config silence_events must be change, all or none", code="invalid_config")
    return out


class VisionCommentary:
    """Visual commentary of one app session (see the module docstring).

    Args:
        ctx: the app's :class:`~rtc_agent.apps.base.AppContext` (``emit``, ``spawn``, ``now_ms``).
        worker: the :class:`~rtc_agent.worker.Worker` holding the vision engine.
        engine_name: its registered name (``rtc_agent.engines.vlm.ENGINE_NAME``, ``"vlm"``, by default).
        config: keys of :data:`COMMENTARY_DEFAULTS` (validated here; :class:`InvalidRequest` when bad).

    ``state`` is ``idle`` → ``starting`` → ``running``, or ``unavailable`` (no commentary for this session: at
    capacity or the engine failed to start), ``failed`` (the model loop died; an ``error`` event said why), and
    ``closed`` after :meth:`close`.
    """

    def __init__(self, ctx: AppContext, worker: Any, engine_name: str,
                 config: Mapping[str, Any] | None = None) -> None:
        self.ctx = ctx
        self.worker = worker
        self.engine_name = engine_name
        settings = getattr(ctx, "settings", None)
        self.config = validate_commentary_config(config, settings)
        self.limits = TextLimits.from_settings(settings)
        self.state = "idle"
        self.error: dict[str, Any] | None = None
        self.engine_info: dict[str, Any] = {}
        self._session: VisionSession | None = None
        self._lease: AbstractAsyncContextManager[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._round_ids: dict[int, str] = {}
        self._round_counter = 0
        self._speaking = False
        self._silences = 0
        self._closing = False
        self.counts = {"frames_in": 0, "frames_ignored": 0, "frames_rejected": 0, "frames_dropped": 0,
                       "prompts": 0, "rounds": 0, "deltas": 0, "silences": 0}
        self.last_frame_ts: float | None = None
        self._start_requested = False

    # lifecycle --------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Lease, load and open the vision session. Never raises for engine trouble: the client gets an
        ``error`` event and :attr:`state` becomes ``unavailable``."""
        if self.state != "idle":
            return
        self.state = "starting"
        self._loop = asyncio.get_running_loop()
        lease = self.worker.lease(self.engine_name, wait=self.config["lease_wait_s"])
        try:
            await lease.__aenter__()
        except AgentError as exc:
            self._unavailable(exc)
            return
        self._lease = lease
        session: VisionSession | None = None
        wake = self._wake = asyncio.Event()
        try:
            engine = await self.worker.load(self.engine_name)
            describe = getattr(engine, "describe", None)
            self.engine_info = describe() if callable(describe) else {}
            options = SessionOptions(
                initial_prompt=self.config["prompt"], system_prompt=self.config["system_prompt"],
                frame_queue_size=self.config["frame_queue_size"],
                max_tokens_per_turn=self.config["max_tokens_per_turn"],
                max_new_tokens=self.config["max_new_tokens"])
            session = await asyncio.to_thread(engine.open_session, options)
            session.set_listener(self._on_output)
            await asyncio.to_thread(session.start)
        except BaseException as exc:
            if session is not None:
                await self._close_session(session)
            await self._release()
            if isinstance(exc, Exception):
                self._unavailable(exc)
                return
            raise
        self._session = session
        if self._closing:  # close() ran while we were starting
            await self._close_session(session)
            self._session = None
            await self._release()
            return
        self.state = "running"
        self._task = self.ctx.spawn(self._pump(session, wake), "vision-commentary")

    def _unavailable(self, exc: BaseException) -> None:
        if isinstance(exc, SessionBusy):
            exc = AtCapacity(str(exc), code="engine_capacity")
        if not isinstance(exc, AgentError):
            exc = EngineError(f"visual commentary could not start: {type(exc).__name__}: {exc}",
                              code="vision_unavailable")
        log.warning("visual commentary unavailable (%s): %s", exc.code, exc.message)
        self.state = "unavailable"
        self._report(exc)

    def _report(self, exc: AgentError) -> None:
        self.error = exc.to_dict()
        self.ctx.emit(Error(error=ErrorBody(type=exc.type, code=exc.code, message=exc.message)))

    async def close(self) -> None:
        """Close the session (an open round ends with ``vision.round.ended``), stop the output task and return
        the lease. Idempotent."""
        if self.state == "closed":
            return
        self._closing = True
        session, self._session = self._session, None
        if session is not None:
            await self._close_session(session)
            self._drain(session)
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self._release()
        self.state = "closed"

    async def _close_session(self, session: VisionSession) -> None:
        try:
            await asyncio.to_thread(session.close, self.config["close_timeout_s"])
        except TimeoutError:
            log.warning("vision session did not stop within %.1f s", self.config["close_timeout_s"])
        except Exception as exc:  # a failed session re-raises its failure on close, as the reference does
            log.debug("vision session closed after a failure: %r", exc)

    async def _release(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            await lease.__aexit__(None, None, None)

    # input ------------------------------------------------------------------------------------------------------

    def watch(self, image: np.ndarray, ts_ms: int) -> None:
        """:meth:`on_frame` that starts the commentary at the first frame, so a session without a camera never
        holds the engine's single slot."""
        if self.state == "idle" and not self._start_requested:
            self._start_requested = True
            self.ctx.spawn(self.start(), "vision-start")
        self.on_frame(image, ts_ms)

    def on_frame(self, image: np.ndarray, ts_ms: int) -> None:
        """A camera frame (RGB ``uint8``) stamped ``ts_ms`` on the session clock. Never blocks; frames that arrive
        while the commentary is not running are counted and ignored."""
        session = self._session
        if session is None or self.state != "running":
            self.counts["frames_ignored"] += 1
            return
        ts = ts_ms / 1000.0
        try:
            dropped = session.push_frame(image, ts)
        except ValueError as exc:  # a timestamp going backwards: drop this frame
            self.counts["frames_rejected"] += 1
            log.debug("frame rejected: %s", exc)
            return
        except RuntimeError:  # closed or failed: the output task reports failures
            self.counts["frames_ignored"] += 1
            return
        self.counts["frames_in"] += 1
        self.last_frame_ts = ts
        if dropped:
            self.counts["frames_dropped"] += 1
            self.ctx.emit(VisionFrameDropped(frame_ts=ts, dropped=1))

    async def prompt(self, text: str) -> None:
        """Send a user prompt to the vision session; it opens a new round.

        Raises :class:`InvalidRequest` (``config_too_large`` over ``max_text_field_chars``, ``vision_unavailable``
        when commentary is not running, ``invalid_prompt`` for an empty prompt) or :class:`AgentError`
        (``vision_busy``, 429) when too many prompts wait.
        """
        self.limits.text("vision.prompt text", text)
        session = self._session
        if session is None or self.state != "running":
            raise InvalidRequest(f"visual commentary is not running ({self.state})", code="vision_unavailable")
        try:
            session.push_prompt(text)
        except ValueError as exc:
            raise InvalidRequest(str(exc), code="invalid_prompt") from None
        except queue.Full:
            raise AgentError("too many vision prompts waiting; try again shortly", code="vision_busy",
                             status=429) from None
        except RuntimeError as exc:
            raise InvalidRequest(f"visual commentary is not running: {exc}", code="vision_unavailable") from None
        self.counts["prompts"] += 1

    # output -----------------------------------------------------------------------------------------------------

    def _on_output(self) -> None:
        """The session's listener: runs in the session's thread."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    async def _pump(self, session: VisionSession, wake: asyncio.Event) -> None:
        while True:
            await wake.wait()
            wake.clear()
            if not self._drain(session):
                return

    def _drain(self, session: VisionSession) -> bool:
        """Turn every waiting output into events; False once the session has failed (reported) or ended."""
        while True:
            try:
                item = session.poll_event(0.0)
            except RuntimeError as exc:
                if self.state == "running":
                    self.state = "failed"
                    cause = exc.__cause__ or exc
                    self._report(EngineError(f"visual commentary stopped: {type(cause).__name__}: {cause}",
                                             code="vision_failed"))
                return False
            if item is None:
                return True
            self._handle(item)

    def _handle(self, item: VisionOutput) -> None:
        if item.kind == "round_start":
            self._round_counter += 1
            round_id = f"vr_{self._round_counter}"
            if item.round is not None:
                self._round_ids[item.round] = round_id
            self.counts["rounds"] += 1
            self.ctx.emit(VisionRoundStarted(round_id=round_id, prompt=item.prompt))
        elif item.kind == "text":
            round_id = self._round_ids.get(item.round if item.round is not None else -1)
            if round_id is None:  # text without a round start (not produced by RoundTracker): open one
                self._round_counter += 1
                round_id = f"vr_{self._round_counter}"
                self._round_ids[item.round if item.round is not None else -1] = round_id
                self.ctx.emit(VisionRoundStarted(round_id=round_id, prompt=None))
            self._speaking = True
            self.counts["deltas"] += 1
            self.ctx.emit(VisionTextDelta(round_id=round_id, delta=item.text, frame_ts=item.frame_ts))
        elif item.kind == "silence":
            self.counts["silences"] += 1
            mode = self.config["silence_events"]
            if mode == "all" or (mode == "change" and (self._speaking or self._silences == 0)):
                self.ctx.emit(VisionSilence(frame_ts=item.frame_ts))
            self._silences += 1
            self._speaking = False
        elif item.kind == "round_end" and item.round is not None:
            round_id = self._round_ids.pop(item.round, None)
            if round_id is not None:
                self.ctx.emit(VisionRoundEnded(round_id=round_id))

    # introspection ----------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.state == "running"

    def stats(self) -> dict[str, Any]:
        """Live numbers for ``GET /v1/sessions/{id}`` (JSON-able)."""
        session = self._session
        out: dict[str, Any] = {"state": self.state, "engine": self.engine_name, **self.counts,
                               "last_frame_ts": self.last_frame_ts}
        if session is not None:
            with contextlib.suppress(Exception):
                out["pending_frames"] = session.pending_frames
        if self.engine_info:
            out["backend"] = self.engine_info
        if self.error is not None:
            out["error"] = self.error
        return out
